//! Flags that installers pass and this kubelet accepts without implementing them: each has
//! one row in [`TABLE`] saying why it is ignored or what replaces it, and the binary logs that
//! as one warning per flag given. The table is the one home of these flags: it defines their
//! clap arguments ([`Flags`]) and their warnings.
//!
//! Most were removed upstream with dockershim (v1.24) or klog's flags (v1.26), and kubeadm's
//! drop-in (v1.20–v1.26), kubespray and k3s still pass them.

use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgMatches, Command};

/// What a flag takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// A boolean: `--flag`, `--flag=true`, `--flag=false`.
    Bool,
    /// Any value.
    Value,
    /// One of these values; others are a usage error.
    OneOf(&'static [&'static str]),
    /// Comma-separated `key=bool` pairs, as upstream's `cliflag.MapStringBool`: repetitions
    /// add up, a later key wins ([`super::map_flags`]), and the warning names the result.
    BoolMap,
}

/// One accepted-and-ignored flag.
#[derive(Debug, PartialEq, Eq)]
pub struct Ignored {
    /// The long name without `--`.
    pub name: &'static str,
    /// Its values.
    pub takes: Takes,
    /// Why it is ignored, or what replaces it (completes "--name=value is ignored: …").
    pub why: &'static str,
}

const fn row(name: &'static str, takes: Takes, why: &'static str) -> Ignored {
    Ignored { name, takes, why }
}

const DOCKERSHIM: &str = "the container runtime sets up pod networking with CNI and reads its own CNI configuration (removed upstream with dockershim in v1.24)";
const KLOG: &str = "this kubelet logs to stderr only (klog's file flags were removed upstream in v1.26); let systemd or the supervisor keep the logs";

const LOG_STREAMS: &str = "every log line goes to stderr through one buffered writer (upstream's split streams are alpha)";

/// Every accepted-and-ignored flag.
pub const TABLE: &[Ignored] = &[
    row(
        "container-runtime",
        Takes::OneOf(&["remote"]),
        "CRI (`remote`) is the only runtime; --container-runtime-endpoint selects it (removed upstream in v1.27)",
    ),
    row("network-plugin", Takes::Value, DOCKERSHIM),
    row("network-plugin-mtu", Takes::Value, DOCKERSHIM),
    row("cni-bin-dir", Takes::Value, DOCKERSHIM),
    row("cni-conf-dir", Takes::Value, DOCKERSHIM),
    row("cni-cache-dir", Takes::Value, DOCKERSHIM),
    row(
        "non-masquerade-cidr",
        Takes::Value,
        "masquerading is the network plugin's job (removed upstream in v1.24)",
    ),
    row(
        "image-pull-progress-deadline",
        Takes::Value,
        "a dockershim setting; the CRI runtime times out its own pulls (removed upstream in v1.24)",
    ),
    row(
        "experimental-dockershim-root-directory",
        Takes::Value,
        "dockershim is gone (removed upstream in v1.24)",
    ),
    row(
        "experimental-allocatable-ignore-eviction",
        Takes::Bool,
        "eviction thresholds always count towards allocatable here (removed upstream in v1.24)",
    ),
    row(
        "experimental-mounter-path",
        Takes::Value,
        "volumes are mounted with the host's mount (removed upstream in v1.24)",
    ),
    row(
        "experimental-check-node-capabilities-before-mount",
        Takes::Bool,
        "no mount capability checks are made (removed upstream in v1.24)",
    ),
    row(
        "experimental-kernel-memcg-notification",
        Takes::Bool,
        "memory pressure is found by polling the cgroup's usage (kernelMemcgNotification is not implemented)",
    ),
    row("logtostderr", Takes::Bool, KLOG),
    row("alsologtostderr", Takes::Bool, KLOG),
    row("log-dir", Takes::Value, KLOG),
    row("log-file", Takes::Value, KLOG),
    row("log-file-max-size", Takes::Value, KLOG),
    row("stderrthreshold", Takes::Value, KLOG),
    row("skip-log-headers", Takes::Bool, KLOG),
    row(
        "log-flush-frequency",
        Takes::Value,
        "the log writer thread writes each line as it comes; there is nothing to flush periodically",
    ),
    row("log-json-info-buffer-size", Takes::Value, LOG_STREAMS),
    row("log-json-split-stream", Takes::Bool, LOG_STREAMS),
    row("log-text-info-buffer-size", Takes::Value, LOG_STREAMS),
    row("log-text-split-stream", Takes::Bool, LOG_STREAMS),
    row(
        "vmodule",
        Takes::Value,
        "per-file verbosity is not supported; use --v or RUST_LOG",
    ),
    row(
        "fail-swap-on",
        Takes::Bool,
        "swap is not checked at start-up; pods get no swap (upstream's NoSwap)",
    ),
    row(
        "provider-id",
        Takes::Value,
        "the Node's spec.providerID is not set by this kubelet; the cloud controller manager sets it",
    ),
    row(
        "volume-plugin-dir",
        Takes::Value,
        "FlexVolume plugins are not supported (use CSI)",
    ),
    row(
        "feature-gates",
        Takes::BoolMap,
        "this kubelet's features are not gated; it behaves as upstream's defaults",
    ),
    row(
        "serialize-image-pulls",
        Takes::Bool,
        "the image pull queue is not configurable",
    ),
    row(
        "protect-kernel-defaults",
        Takes::Bool,
        "kernel tunables are not checked",
    ),
    row(
        "make-iptables-util-chains",
        Takes::Bool,
        "iptables chains are kube-proxy's and the network plugin's (removed upstream in v1.28)",
    ),
    row(
        "hairpin-mode",
        Takes::Value,
        "hairpin traffic is the network plugin's job",
    ),
    row(
        "containerd",
        Takes::Value,
        "a cAdvisor flag; stats come from the CRI runtime",
    ),
    row(
        "image-service-endpoint",
        Takes::Value,
        "images are served by --container-runtime-endpoint",
    ),
    row(
        "cpu-manager-policy",
        Takes::Value,
        "the CPU manager is not implemented (all pods share the CPUs: upstream's `none`)",
    ),
    row(
        "topology-manager-policy",
        Takes::Value,
        "the topology manager is not implemented (upstream's `none`)",
    ),
    row("lock-file", Takes::Value, "no lock file is taken"),
    row(
        "exit-on-lock-contention",
        Takes::Bool,
        "no lock file is taken",
    ),
    row(
        "streaming-connection-idle-timeout",
        Takes::Value,
        "streaming sessions last until either side closes them",
    ),
    row(
        "max-open-files",
        Takes::Value,
        "the kubelet's file limit is left to the service manager (LimitNOFILE)",
    ),
    row(
        "oom-score-adj",
        Takes::Value,
        "the kubelet's OOM score is left to the service manager (OOMScoreAdjust)",
    ),
];

/// The ignored flags given on a command line, in [`TABLE`]'s order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    given: Vec<(&'static Ignored, String)>,
}

impl Flags {
    /// One warning per flag given: `--name=value is ignored: why`.
    pub fn warnings(&self) -> Vec<String> {
        self.given
            .iter()
            .map(|(flag, value)| format!("--{}={value} is ignored: {}", flag.name, flag.why))
            .collect()
    }
}

/// One value of a [`Takes::BoolMap`] flag as upstream's `MapStringBool.Set` reads it:
/// comma-separated `key=bool` pairs (empty ones skipped, keys and values trimmed, the values
/// Go booleans), written back as `key=true|false` pairs.
fn bool_pairs(value: &str) -> Result<String, String> {
    let mut pairs = Vec::new();
    for pair in value.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("malformed pair {pair:?}, expect key=bool"))?;
        let (key, value) = (key.trim(), value.trim());
        let value = go_bool(value).map_err(|e| format!("invalid value of {key}: {e}"))?;
        pairs.push(format!("{key}={value}"));
    }
    Ok(pairs.join(","))
}

/// The repetitions of a [`Takes::BoolMap`] flag (each checked by [`bool_pairs`]) as one
/// `key=bool` list, sorted by key, a later value for a key winning.
fn merged_bool_map(values: &[String]) -> Option<String> {
    let joined = super::map_flags::joined(values)?;
    let map: std::collections::BTreeMap<&str, &str> = joined
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Some(pairs.join(","))
}

/// Go's `strconv.ParseBool`, as upstream's boolean flags.
fn go_bool(value: &str) -> Result<String, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok("true".into()),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok("false".into()),
        other => Err(format!("{other:?} is not a boolean")),
    }
}

impl Ignored {
    fn arg(&'static self) -> Arg {
        let arg = Arg::new(self.name)
            .long(self.name)
            .hide(true)
            .help(self.why);
        match self.takes {
            Takes::Bool => arg
                .value_name("BOOL")
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_parser(go_bool),
            Takes::Value => arg.num_args(1),
            Takes::OneOf(values) => arg
                .num_args(1)
                .value_parser(PossibleValuesParser::new(values.iter().copied())),
            Takes::BoolMap => arg
                .num_args(1)
                .action(super::map_flags::ACTION)
                .value_parser(bool_pairs),
        }
    }
}

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for flag in TABLE {
            let value = match flag.takes {
                Takes::BoolMap => matches
                    .get_many::<String>(flag.name)
                    .and_then(|values| merged_bool_map(&values.cloned().collect::<Vec<_>>())),
                _ => matches.get_one::<String>(flag.name).cloned(),
            };
            if let Some(value) = value {
                self.given.retain(|(given, _)| given.name != flag.name);
                self.given.push((flag, value));
            }
        }
        Ok(())
    }
}

impl clap::Args for Flags {
    fn augment_args(cmd: Command) -> Command {
        TABLE.iter().fold(cmd, |cmd, flag| cmd.arg(flag.arg()))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_reasons_given() {
        let mut names: Vec<_> = TABLE.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TABLE.len());
        assert!(TABLE.iter().all(|f| !f.why.is_empty()));
    }

    #[test]
    fn bool_maps_are_checked_and_merged_as_upstreams_map_string_bool() {
        assert_eq!(bool_pairs(" A = True,,B=0"), Ok("A=true,B=false".into()));
        assert_eq!(bool_pairs(""), Ok(String::new()));
        assert!(
            bool_pairs("A")
                .expect_err("no value")
                .contains("malformed pair")
        );
        assert!(
            bool_pairs("A=maybe")
                .expect_err("not a bool")
                .contains("invalid value of A")
        );
        assert_eq!(
            merged_bool_map(&["B=true,A=true".into(), "B=false".into()]),
            Some("A=true,B=false".into())
        );
        assert_eq!(merged_bool_map(&[]), None);
    }

    #[test]
    fn go_bools() {
        assert_eq!(go_bool("True"), Ok("true".into()));
        assert_eq!(go_bool("0"), Ok("false".into()));
        assert!(go_bool("yes").is_err());
    }
}
