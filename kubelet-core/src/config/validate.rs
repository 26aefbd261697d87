//! Pod validation: the subset of upstream `ValidatePodCreate` that a node agent relies on, and
//! the static-pod rule that forbids references to API objects.
//!
//! Mirrors parts of upstream `pkg/apis/core/validation/validation.go` (`ValidatePodCreate`,
//! `validateContainers`, `validateRestartPolicy`, `validateContainerPorts`),
//! `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go` (`IsDNS1123Label`,
//! `IsDNS1123Subdomain`) and `pkg/api/pod/util.go` (`HasAPIObjectReference`, used by the
//! `PreventStaticPodAPIReferences` check in `pkg/kubelet/config/common.go`).
//!
//! Field paths and messages follow upstream's `field.Error` wording, e.g.
//! `spec.containers[1].name: Duplicate value: "app"`.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::{validate_meta, validate_resources};

/// Longest DNS-1123 label (upstream `DNS1123LabelMaxLength`).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (upstream `DNS1123SubdomainMaxLength`).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

const LABEL_FMT_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
     characters or '-', and must start and end with an alphanumeric character";
const SUBDOMAIN_FMT_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// One validation failure: the field path and what is wrong with it (upstream `field.Error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// What is wrong, e.g. `Required value`.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}

/// All validation failures of one pod (upstream `field.ErrorList`); never empty when returned
/// as an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

/// Most errors [`ValidationErrors`] shows; a hostile manifest can have thousands.
const MAX_SHOWN_ERRORS: usize = 16;
/// Longest value an error quotes, in bytes; a hostile manifest's values can be megabytes.
const MAX_QUOTED_VALUE: usize = 256;

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, e) in self.0.iter().take(MAX_SHOWN_ERRORS).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{e}")?;
        }
        if let Some(more) = self
            .0
            .len()
            .checked_sub(MAX_SHOWN_ERRORS)
            .filter(|n| *n > 0)
        {
            write!(f, ", and {more} more")?;
        }
        f.write_str("]")
    }
}

impl ValidationErrors {
    pub(super) fn push(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            detail: detail.into(),
        });
    }

    fn required(&mut self, field: impl Into<String>) {
        self.push(field, "Required value");
    }

    /// `Invalid value: "<value>": <msg>`, the value cut at [`MAX_QUOTED_VALUE`] bytes.
    pub(super) fn invalid(&mut self, field: impl Into<String>, value: &str, msg: &str) {
        if value.len() > MAX_QUOTED_VALUE {
            let mut end = MAX_QUOTED_VALUE;
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            let more = value.len() - end;
            let value = &value[..end];
            self.push(
                field,
                format!("Invalid value: {value:?}... ({more} more bytes): {msg}"),
            );
        } else {
            self.push(field, format!("Invalid value: {value:?}: {msg}"));
        }
    }
}

/// `true` if `s` is a DNS-1123 label: at most 63 lowercase alphanumerics or `-`, starting and
/// ending with an alphanumeric (upstream `IsDNS1123Label`).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= DNS1123_LABEL_MAX_LEN
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `true` if `s` is a DNS-1123 subdomain: at most 253 characters, dot-separated parts that
/// each look like a label (without the per-label length limit, as upstream's regex)
/// (upstream `IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= DNS1123_SUBDOMAIN_MAX_LEN
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.first().is_some_and(alnum)
                && b.last().is_some_and(alnum)
                && b.iter().all(|c| alnum(c) || *c == b'-')
        })
}

fn check_label(errs: &mut ValidationErrors, field: &str, value: &str) {
    if value.len() > DNS1123_LABEL_MAX_LEN {
        errs.invalid(
            field,
            value,
            &format!("must be no more than {DNS1123_LABEL_MAX_LEN} characters"),
        );
    } else if !is_dns1123_label(value) {
        errs.invalid(field, value, LABEL_FMT_MSG);
    }
}

fn check_subdomain(errs: &mut ValidationErrors, field: &str, value: &str) {
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errs.invalid(
            field,
            value,
            &format!("must be no more than {DNS1123_SUBDOMAIN_MAX_LEN} characters"),
        );
    } else if !is_dns1123_subdomain(value) {
        errs.invalid(field, value, SUBDOMAIN_FMT_MSG);
    }
}

/// Validates the parts of a pod that the kubelet depends on (a subset of upstream
/// `ValidatePodCreate`):
///
/// - `metadata.name` is required and a DNS-1123 subdomain; `metadata.namespace`, when set, is
///   a DNS-1123 label;
/// - `spec.containers` is not empty; init and app container names are DNS-1123 labels and
///   unique across both lists; every container has an image without surrounding whitespace;
/// - `spec.restartPolicy` is `Always`, `OnFailure` or `Never` when set;
/// - container ports are in `1..=65535`, host ports in `0..=65535`, protocols
///   `TCP`/`UDP`/`SCTP`;
/// - volume names are unique DNS-1123 labels and every volume mount names a volume;
/// - env var names are given, of printable ASCII other than `=` (upstream's
///   `RelaxedEnvironmentVariableValidation`);
/// - label keys and values, annotation keys and the annotations' total size as upstream
///   `ValidateObjectMeta` (see `validate_meta`);
/// - resource limits and requests, and emptyDir size limits, are well-formed non-negative
///   quantities, requests at most limits (see [`validate_resources`]).
///
/// Returns every failure found, not only the first (the message shows the first 16).
pub fn validate_pod(pod: &Pod) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();

    match pod.metadata.name.as_deref() {
        None | Some("") => errs.required("metadata.name"),
        Some(name) => check_subdomain(&mut errs, "metadata.name", name),
    }
    validate_meta::validate_labels(&mut errs, "metadata.labels", pod.metadata.labels.as_ref());
    validate_meta::validate_annotations(
        &mut errs,
        "metadata.annotations",
        pod.metadata.annotations.as_ref(),
    );
    if let Some(ns) = pod
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
    {
        check_label(&mut errs, "metadata.namespace", ns);
    }

    match pod.spec.as_ref() {
        None => errs.required("spec.containers"),
        Some(spec) => validate_spec(&mut errs, spec),
    }

    if errs.0.is_empty() { Ok(()) } else { Err(errs) }
}

fn validate_spec(errs: &mut ValidationErrors, spec: &PodSpec) {
    if let Some(policy) = spec.restart_policy.as_deref()
        && !matches!(policy, "Always" | "OnFailure" | "Never")
    {
        errs.push(
            "spec.restartPolicy",
            format!(
                "Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \
                 \"Never\""
            ),
        );
    }

    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            errs.required(field);
        } else {
            check_label(errs, &field, &v.name);
            if !volumes.insert(v.name.as_str()) {
                errs.push(field, format!("Duplicate value: {:?}", v.name));
            }
        }
    }

    validate_resources::validate_volume_quantities(errs, spec);

    if spec.containers.is_empty() {
        errs.required("spec.containers");
    }
    let mut names = BTreeSet::new();
    let init = spec.init_containers.iter().flatten();
    let lists = init
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (path, c) in lists {
        validate_container(errs, &path, c, &mut names, &volumes);
    }
}

fn validate_container<'a>(
    errs: &mut ValidationErrors,
    path: &str,
    c: &'a Container,
    names: &mut BTreeSet<&'a str>,
    volumes: &BTreeSet<&str>,
) {
    let field = format!("{path}.name");
    if c.name.is_empty() {
        errs.required(field);
    } else {
        check_label(errs, &field, &c.name);
        if !names.insert(c.name.as_str()) {
            errs.push(field, format!("Duplicate value: {:?}", c.name));
        }
    }

    match c.image.as_deref() {
        None | Some("") => errs.required(format!("{path}.image")),
        Some(image) if image.trim() != image => errs.invalid(
            format!("{path}.image"),
            image,
            "must not have leading or trailing whitespace",
        ),
        Some(_) => {}
    }

    for (i, p) in c.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&p.container_port) {
            errs.invalid(
                format!("{path}.ports[{i}].containerPort"),
                &p.container_port.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        if let Some(hp) = p.host_port
            && !(0..=65535).contains(&hp)
        {
            errs.invalid(
                format!("{path}.ports[{i}].hostPort"),
                &hp.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        if let Some(proto) = p.protocol.as_deref()
            && !matches!(proto, "TCP" | "UDP" | "SCTP")
        {
            errs.push(
                format!("{path}.ports[{i}].protocol"),
                format!(
                    "Unsupported value: {proto:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            );
        }
    }

    for (i, e) in c.env.iter().flatten().enumerate() {
        let field = format!("{path}.env[{i}].name");
        if e.name.is_empty() {
            errs.required(field);
        } else if !e
            .name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
        {
            errs.invalid(
                field,
                &e.name,
                "a valid environment variable name must consist only of printable ASCII \
                 characters other than '='",
            );
        }
    }

    validate_resources::validate_container_resources(errs, path, c);

    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        if m.name.is_empty() {
            errs.required(format!("{path}.volumeMounts[{i}].name"));
        } else if !volumes.contains(m.name.as_str()) {
            errs.push(
                format!("{path}.volumeMounts[{i}].name"),
                format!("Not found: {:?}", m.name),
            );
        }
        if m.mount_path.is_empty() {
            errs.required(format!("{path}.volumeMounts[{i}].mountPath"));
        }
    }
}

/// The first reference to an API object in a pod, as the plural resource upstream names in
/// "static pods may not reference %s" (upstream `podutil.HasAPIObjectReference`).
///
/// Static pods run without the API server, so they may not use service accounts, secrets,
/// config maps, persistent volume claims, resource claims, CSI volumes, cluster trust bundles
/// or pod certificates. Returns e.g. `Some("secrets")`, `Some("configmaps (via projected
/// volumes)")`, or `None` for a self-contained pod.
pub fn api_object_reference(pod: &Pod) -> Option<&'static str> {
    let spec = pod.spec.as_ref()?;
    let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());

    if set(&spec.service_account_name) || set(&spec.service_account) {
        return Some("serviceaccounts");
    }
    if references_secrets(spec) {
        return Some("secrets");
    }
    if references_config_maps(spec) {
        return Some("configmaps");
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Some("resourceclaims");
    }

    for v in spec.volumes.iter().flatten() {
        if v.config_map.is_some() {
            return Some("configmaps (via configmap volumes)");
        }
        if v.secret.is_some() {
            return Some("secrets (via secret volumes)");
        }
        if v.csi.is_some() {
            return Some("csidrivers (via CSI volumes)");
        }
        if v.glusterfs.is_some() {
            return Some("endpoints (via glusterFS volumes)");
        }
        if v.persistent_volume_claim.is_some() {
            return Some("persistentvolumeclaims");
        }
        if v.ephemeral.is_some() {
            return Some("persistentvolumeclaims (via ephemeral volumes)");
        }
        if v.azure_file.is_some() {
            return Some("secrets (via azureFile volumes)");
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if s.config_map.is_some() {
                return Some("configmaps (via projected volumes)");
            }
            if s.secret.is_some() {
                return Some("secrets (via projected volumes)");
            }
            if s.service_account_token.is_some() {
                return Some("serviceaccounts (via projected volumes)");
            }
            if s.cluster_trust_bundle.is_some() {
                return Some("clustertrustbundles");
            }
            k8s_openapi::k8s_if_ge_1_34! {
                if s.pod_certificate.is_some() {
                    return Some("podcertificates");
                }
            }
        }
    }
    None
}

/// Upstream `VisitPodSecretNames` visits at least one name.
fn references_secrets(spec: &PodSpec) -> bool {
    let mut any = false;
    crate::objects::references::visit_secret_names(spec, |_| any = true);
    any
}

/// Upstream `VisitPodConfigmapNames` visits at least one name.
fn references_config_maps(spec: &PodSpec) -> bool {
    let mut any = false;
    crate::objects::references::visit_config_map_names(spec, |_| any = true);
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing as fixtures;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("web-1"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("a.b"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));

        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(".a"));
        assert!(!is_dns1123_subdomain("a_b"));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn valid_fixture_passes() {
        assert_eq!(validate_pod(&fixtures::pod("web")), Ok(()));
        assert_eq!(api_object_reference(&fixtures::pod("web")), None);
    }

    #[test]
    fn reports_every_error_with_its_field() {
        let mut pod = fixtures::pod_with("Bad_Name", "Sometimes", &["app", "app", "X"]);
        pod.metadata.namespace = Some("kube.system".into());
        let spec = pod.spec.as_mut().expect("fixture has a spec");
        spec.containers[0].image = None;
        spec.containers[1].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
            container_port: 70000,
            ..Default::default()
        }]);
        let errs = validate_pod(&pod).expect_err("invalid").0;
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "metadata.namespace",
                "spec.restartPolicy",
                "spec.containers[0].image",
                "spec.containers[1].name",
                "spec.containers[1].ports[0].containerPort",
                "spec.containers[2].name",
            ],
            "{errs:?}"
        );
        assert!(errs[4].detail.contains("Duplicate value"), "{errs:?}");
    }

    #[test]
    fn init_and_app_container_names_share_a_namespace() {
        let mut pod = fixtures::pod("web");
        let spec = pod.spec.as_mut().expect("fixture has a spec");
        spec.init_containers = Some(vec![spec.containers[0].clone()]);
        let errs = validate_pod(&pod).expect_err("duplicate").0;
        assert_eq!(errs[0].field, "spec.containers[0].name");
    }

    #[test]
    fn no_containers_and_no_spec() {
        let mut pod = fixtures::pod("web");
        pod.spec.as_mut().expect("spec").containers.clear();
        assert_eq!(
            validate_pod(&pod).expect_err("empty").to_string(),
            "[spec.containers: Required value]"
        );
        pod.spec = None;
        assert!(validate_pod(&pod).is_err());
    }
}
