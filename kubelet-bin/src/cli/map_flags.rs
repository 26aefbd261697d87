//! Map-valued flags (`--kube-reserved`, `--system-reserved`, `--eviction-hard`,
//! `--eviction-soft`, `--eviction-soft-grace-period`, `--eviction-minimum-reclaim`,
//! `--node-labels`, `--feature-gates`): the one home of how their repetitions combine,
//! mirroring upstream's `cliflag.MapStringString` / `LangleSeparatedMapStringString` /
//! `MapStringBool` (`staging/src/k8s.io/component-base/cli/flag/map_string_string.go`).
//!
//! Upstream's first `Set` clears the default map and every `Set` (each repetition) adds its
//! comma-separated pairs, a later value for a key winning. So `--kube-reserved cpu=100m
//! --kube-reserved memory=1Gi` reserves both, `--eviction-hard a<1 --eviction-hard a<2`
//! keeps `a<2`, and a flag given on the command line replaces the config file's whole map
//! (upstream's `kubeletConfigFlagPrecedence` re-parses the flags over the file with fresh
//! flag values, whose first `Set` clears the file's map).
//!
//! Scalar flags are different: a repeated scalar flag takes its last value
//! (`args_override_self` in [`crate::settings::Flags`]).

/// The clap action of a map flag: every repetition is kept, in order.
pub const ACTION: clap::ArgAction = clap::ArgAction::Append;

/// The repetitions of a map flag as one comma-separated list, in the order given: parsed into
/// a map with a later key winning (every parser of these flags collects into a map in order),
/// it is upstream's accumulated value. `None` when the flag was not given, so the config
/// file's map (else the default) applies; `Some("")` for a flag given empty, which, as
/// upstream, replaces the file's map with an empty one.
pub fn joined(values: &[String]) -> Option<String> {
    (!values.is_empty()).then(|| values.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitions_join_in_order_and_absence_is_none() {
        assert_eq!(joined(&[]), None);
        assert_eq!(joined(&[String::new()]), Some(String::new()));
        assert_eq!(
            joined(&["cpu=100m".into(), "memory=1Gi,cpu=200m".into()]),
            Some("cpu=100m,memory=1Gi,cpu=200m".into())
        );
    }
}
