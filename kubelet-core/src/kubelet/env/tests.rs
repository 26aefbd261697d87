//! Cases of upstream `TestMakeEnvironmentVariables` (pkg/kubelet/kubelet_pods_test.go).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, ResourceFieldSelector,
    ResourceRequirements, SecretEnvSource, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::objects::InMemoryObjectSource;
use crate::testing::pod;

fn source(objects: &InMemoryObjectSource) -> EnvSource {
    EnvSource {
        node_name: "node-a".into(),
        host_ips: vec!["192.168.1.10".into(), "fd00::10".into()],
        allocatable: NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 * 1024 * 1024 * 1024,
            ephemeral_storage_bytes: None,
        },
        objects: Arc::new(objects.clone()),
        services: None,
    }
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn from(name: &str, value_from: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(value_from),
        ..Default::default()
    }
}

fn field(path: &str) -> EnvVarSource {
    EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            api_version: Some("v1".into()),
            field_path: path.into(),
        }),
        ..Default::default()
    }
}

fn resource(res: &str, divisor: Option<&str>) -> EnvVarSource {
    EnvVarSource {
        resource_field_ref: Some(ResourceFieldSelector {
            resource: res.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
            container_name: None,
        }),
        ..Default::default()
    }
}

fn cm_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        config_map_key_ref: Some(ConfigMapKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

fn secret_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

fn web_pod() -> Pod {
    let mut p = pod("web");
    p.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    p.metadata.annotations = Some([("team".to_owned(), "core".to_owned())].into());
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some("node-a".into());
        s.service_account_name = Some("builder".into());
    }
    p
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn make(
    objects: &InMemoryObjectSource,
    pod: &Pod,
    container: &Container,
) -> Result<Vec<(String, String)>, String> {
    source(objects)
        .make_environment_variables(pod, container, &["10.88.0.5".into(), "fd01::5".into()])
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn literal_values_expand_in_order_with_escapes() {
    let p = web_pod();
    let c = Container {
        name: "app".into(),
        env: Some(vec![
            literal("VAR_A", "A"),
            literal("VAR_B", "B"),
            literal("VAR_C", "$(VAR_A)-$(VAR_B)"),
            literal("VAR_ESCAPED", "$$(VAR_A)"),
            literal("VAR_LATER", "$(VAR_D)"),
            literal("VAR_D", "D"),
            literal("VAR_UNTERMINATED", "$(VAR_A"),
            EnvVar {
                name: "EMPTY".into(),
                ..Default::default()
            },
            literal("VAR_A", "again"),
        ]),
        ..Default::default()
    };
    let env = make(&InMemoryObjectSource::new(), &p, &c)
        .await
        .expect("env");
    assert_eq!(
        env,
        pairs(&[
            ("VAR_A", "again"),
            ("VAR_B", "B"),
            ("VAR_C", "A-B"),
            ("VAR_ESCAPED", "$(VAR_A)"),
            ("VAR_LATER", "$(VAR_D)"),
            ("VAR_D", "D"),
            ("VAR_UNTERMINATED", "$(VAR_A"),
            ("EMPTY", ""),
        ])
    );
}

#[tokio::test]
async fn field_refs_resolve_and_feed_expansion() {
    let p = web_pod();
    let c = Container {
        name: "app".into(),
        env: Some(vec![
            from("POD_NAME", field("metadata.name")),
            from("POD_NAMESPACE", field("metadata.namespace")),
            from("POD_UID", field("metadata.uid")),
            from("APP", field("metadata.labels['app']")),
            from("TEAM", field("metadata.annotations['team']")),
            from("MISSING_LABEL", field("metadata.labels['nope']")),
            from("NODE", field("spec.nodeName")),
            from("SA", field("spec.serviceAccountName")),
            from("HOST_IP", field("status.hostIP")),
            from("HOST_IPS", field("status.hostIPs")),
            from("POD_IP", field("status.podIP")),
            from("POD_IPS", field("status.podIPs")),
            literal("URL", "http://$(POD_IP):80/$(POD_NAME)"),
        ]),
        ..Default::default()
    };
    let env = make(&InMemoryObjectSource::new(), &p, &c)
        .await
        .expect("env");
    assert_eq!(
        env,
        pairs(&[
            ("POD_NAME", "web"),
            ("POD_NAMESPACE", "default"),
            ("POD_UID", "uid-web"),
            ("APP", "web"),
            ("TEAM", "core"),
            ("MISSING_LABEL", ""),
            ("NODE", "node-a"),
            ("SA", "builder"),
            ("HOST_IP", "192.168.1.10"),
            ("HOST_IPS", "192.168.1.10,fd00::10"),
            ("POD_IP", "10.88.0.5"),
            ("POD_IPS", "10.88.0.5,fd01::5"),
            ("URL", "http://10.88.0.5:80/web"),
        ])
    );

    let bad = Container {
        name: "app".into(),
        env: Some(vec![from("X", field("spec.restartPolicy"))]),
        ..Default::default()
    };
    assert_eq!(
        make(&InMemoryObjectSource::new(), &p, &bad).await,
        Err("field label not supported: spec.restartPolicy".to_owned())
    );
}

#[test]
fn pod_ips_follow_the_node_family() {
    let ips = ["fd01::5".to_owned(), "10.88.0.5".to_owned()];
    assert_eq!(
        sort_pod_ips(&ips, &["192.168.1.10".to_owned()]),
        ["10.88.0.5", "fd01::5"]
    );
    assert_eq!(
        sort_pod_ips(&ips, &["fd00::10".to_owned()]),
        ["fd01::5", "10.88.0.5"]
    );
}

#[tokio::test]
async fn resource_field_refs_default_limits_to_allocatable() {
    let p = web_pod();
    let c = Container {
        name: "app".into(),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".to_owned(), Quantity("250m".into())),
                    ("memory".to_owned(), Quantity("32Mi".into())),
                ]
                .into(),
            ),
            limits: Some([("memory".to_owned(), Quantity("64Mi".into()))].into()),
            ..Default::default()
        }),
        env: Some(vec![
            from("CPU_REQUEST", resource("requests.cpu", Some("1m"))),
            from("CPU_REQUEST_CORES", resource("requests.cpu", None)),
            from("MEMORY_REQUEST", resource("requests.memory", Some("1Mi"))),
            from("MEMORY_LIMIT", resource("limits.memory", None)),
            from("CPU_LIMIT", resource("limits.cpu", None)),
            from(
                "EPHEMERAL_LIMIT",
                resource("limits.ephemeral-storage", None),
            ),
        ]),
        ..Default::default()
    };
    let env = make(&InMemoryObjectSource::new(), &p, &c)
        .await
        .expect("env");
    assert_eq!(
        env,
        pairs(&[
            ("CPU_REQUEST", "250"),
            ("CPU_REQUEST_CORES", "1"),
            ("MEMORY_REQUEST", "32"),
            ("MEMORY_LIMIT", "67108864"),
            ("CPU_LIMIT", "4"),
            ("EPHEMERAL_LIMIT", "0"),
        ])
    );
}

fn objects() -> InMemoryObjectSource {
    let objects = InMemoryObjectSource::new();
    objects.set_config_map(
        "default",
        "cfg",
        ConfigMap {
            data: Some(BTreeMap::from([
                ("mode".to_owned(), "fast".to_owned()),
                ("1bad".to_owned(), "x".to_owned()),
                ("REPLACE_ME".to_owned(), "from-cm".to_owned()),
            ])),
            ..Default::default()
        },
    );
    objects.set_secret(
        "default",
        "creds",
        Secret {
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(b"s3cr3t".to_vec()),
            )])),
            ..Default::default()
        },
    );
    objects
}

#[tokio::test]
async fn config_map_and_secret_refs_and_env_from() {
    let p = web_pod();
    let c = Container {
        name: "app".into(),
        env_from: Some(vec![
            EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                prefix: None,
                secret_ref: None,
            },
            EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "creds".into(),
                    optional: None,
                }),
                prefix: Some("DB_".into()),
                config_map_ref: None,
            },
            EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "absent".into(),
                    optional: Some(true),
                }),
                prefix: None,
                secret_ref: None,
            },
        ]),
        env: Some(vec![
            from("MODE", cm_key("cfg", "mode", None)),
            from("PASSWORD", secret_key("creds", "password", None)),
            from("OPT_KEY", cm_key("cfg", "nope", Some(true))),
            from("OPT_OBJ", secret_key("absent", "k", Some(true))),
            literal("REPLACE_ME", "$(MODE)/$(DB_password)"),
        ]),
        ..Default::default()
    };
    let env = make(&objects(), &p, &c).await.expect("env");
    assert_eq!(
        env,
        pairs(&[
            ("REPLACE_ME", "fast/s3cr3t"),
            ("mode", "fast"),
            ("DB_password", "s3cr3t"),
            ("MODE", "fast"),
            ("PASSWORD", "s3cr3t"),
        ]),
        "1bad is skipped; optional misses define nothing; env overrides envFrom in place"
    );
}

#[tokio::test]
async fn missing_required_objects_and_keys_fail_with_upstream_messages() {
    let p = web_pod();
    let with = |v: EnvVarSource| Container {
        name: "app".into(),
        env: Some(vec![from("X", v)]),
        ..Default::default()
    };
    let cases = [
        (
            cm_key("absent", "k", None),
            "configmap \"absent\" not found",
        ),
        (
            cm_key("absent", "k", Some(false)),
            "configmap \"absent\" not found",
        ),
        (
            cm_key("cfg", "nope", None),
            "couldn't find key nope in ConfigMap default/cfg",
        ),
        (
            secret_key("absent", "k", None),
            "secret \"absent\" not found",
        ),
        (
            secret_key("creds", "nope", None),
            "couldn't find key nope in Secret default/creds",
        ),
    ];
    for (v, want) in cases {
        assert_eq!(make(&objects(), &p, &with(v)).await, Err(want.to_owned()));
    }
    let env_from = Container {
        name: "app".into(),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "absent".into(),
                optional: None,
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(
        make(&objects(), &p, &env_from).await,
        Err("secret \"absent\" not found".to_owned())
    );
}

#[test]
fn env_var_names() {
    for ok in ["A", "a_b", "_x", "-x", ".x", "x.y-z9"] {
        assert!(is_env_var_name(ok), "{ok}");
    }
    for bad in ["", "1a", "a b", "a=b", "é"] {
        assert!(!is_env_var_name(bad), "{bad}");
    }
}

/// A lister over fixed services.
struct Services {
    synced: bool,
    services: Vec<Arc<k8s_openapi::api::core::v1::Service>>,
}

impl ServiceLister for Services {
    fn has_synced(&self) -> bool {
        self.synced
    }
    fn list(&self) -> Vec<Arc<k8s_openapi::api::core::v1::Service>> {
        self.services.clone()
    }
}

fn svc(
    name: &str,
    namespace: &str,
    ip: &str,
    port: i32,
) -> Arc<k8s_openapi::api::core::v1::Service> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": ip, "ports": [{"port": port, "protocol": "TCP"}]}
        }))
        .expect("service"),
    )
}

fn with_services(synced: bool) -> EnvSource {
    let mut s = source(&InMemoryObjectSource::new());
    s.services = Some(Arc::new(Services {
        synced,
        services: vec![
            svc("kubernetes", "default", "1.2.3.1", 8081),
            svc("test", "test1", "1.2.3.3", 8083),
        ],
    }));
    s
}

fn in_namespace(ns: &str, links: Option<bool>) -> Pod {
    let mut p = pod("web");
    p.metadata.namespace = Some(ns.into());
    if let Some(s) = p.spec.as_mut() {
        s.enable_service_links = links;
    }
    p
}

#[tokio::test]
async fn service_links_follow_upstream_cases() {
    let env = with_services(true);
    let names = |vars: &[(String, String)]| -> Vec<String> {
        vars.iter().map(|(k, _)| k.clone()).collect()
    };
    // "api server = Y, kubelet = Y": the container's own variables first and kept, the
    // master service's appended.
    let c = Container {
        env: Some(vec![
            literal("FOO", "BAR"),
            literal("TEST_SERVICE_HOST", "9.9.9.9"),
            literal(
                "URL",
                "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
            ),
        ]),
        ..Default::default()
    };
    let vars = env
        .make_environment_variables(&in_namespace("test1", Some(false)), &c, &[])
        .await
        .expect("env");
    assert_eq!(
        names(&vars),
        [
            "FOO",
            "TEST_SERVICE_HOST",
            "URL",
            "KUBERNETES_PORT",
            "KUBERNETES_PORT_8081_TCP",
            "KUBERNETES_PORT_8081_TCP_ADDR",
            "KUBERNETES_PORT_8081_TCP_PORT",
            "KUBERNETES_PORT_8081_TCP_PROTO",
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
        ]
    );
    let get = |vars: &[(String, String)], k: &str| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    };
    assert_eq!(get(&vars, "TEST_SERVICE_HOST").as_deref(), Some("9.9.9.9"));
    assert_eq!(get(&vars, "URL").as_deref(), Some("https://1.2.3.1:8081"));

    // Links on (also the default when unset): the namespace's services too.
    for links in [Some(true), None] {
        let vars = env
            .make_environment_variables(&in_namespace("test1", links), &Container::default(), &[])
            .await
            .expect("env");
        assert_eq!(get(&vars, "TEST_SERVICE_HOST").as_deref(), Some("1.2.3.3"));
        assert_eq!(
            get(&vars, "TEST_PORT").as_deref(),
            Some("tcp://1.2.3.3:8083")
        );
        assert_eq!(vars.len(), 14, "{vars:?}");
    }
    // Another namespace with links on: only the master service.
    let vars = env
        .make_environment_variables(
            &in_namespace("other", Some(true)),
            &Container::default(),
            &[],
        )
        .await
        .expect("env");
    assert_eq!(vars.len(), 7, "{vars:?}");
    assert!(get(&vars, "TEST_SERVICE_HOST").is_none());
}

#[tokio::test]
async fn api_pods_wait_for_the_services_static_pods_do_not() {
    let env = with_services(false);
    let api_pod = in_namespace("test1", Some(true));
    let err = env
        .make_environment_variables(&api_pod, &Container::default(), &[])
        .await
        .expect_err("not synced");
    assert_eq!(
        err.to_string(),
        "services have not yet been read at least once, cannot construct envvars"
    );
    let mut static_pod = api_pod.clone();
    static_pod.metadata.annotations = Some(
        [(
            crate::config::CONFIG_SOURCE_ANNOTATION.to_owned(),
            "file".to_owned(),
        )]
        .into(),
    );
    let vars = env
        .make_environment_variables(&static_pod, &Container::default(), &[])
        .await
        .expect("a static pod goes ahead with what is known");
    assert_eq!(vars.len(), 14);
    // A standalone node (no lister) has no service variables and never waits.
    let vars = source(&InMemoryObjectSource::new())
        .make_environment_variables(&api_pod, &Container::default(), &[])
        .await
        .expect("env");
    assert!(vars.is_empty());
}
