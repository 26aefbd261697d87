//! Flags and `KubeletConfiguration` fields of node registration and node status (upstream
//! `--node-labels`, `--register-node`, `--register-with-taints`, `--max-pods`,
//! `--kube-reserved`, `--system-reserved`, `--eviction-hard`,
//! `--node-status-report-frequency`, `--node-status-max-images`, `--port`, `--cloud-provider`,
//! and the fields
//! `registerNode`, `registerWithTaints`, `maxPods`, `kubeReserved`, `systemReserved`,
//! `evictionHard`, `nodeStatusReportFrequency`, `nodeStatusMaxImages`, `port`), merged as the
//! other settings: defaults < file < flags, into the library's
//! [`NodeStatusOptions`] (their one home). `--node-status-update-frequency` is in
//! `cluster_settings`.

use std::collections::BTreeMap;
use std::time::Duration;

use kubelet::cluster::node_status::{self, EvictionHard, NodeStatusOptions, Reserved, initial};

use crate::cli::config::KubeletConfiguration;
use crate::cli::map_flags;
use crate::duration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "node-status")]
pub struct Flags {
    /// Labels of the registered Node (`key=value,…`); repeated flags add up, as upstream's
    /// map flags.
    #[arg(long, action = map_flags::ACTION)]
    pub node_labels: Vec<String>,
    /// Create the Node in the API server (default true).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub register_node: Option<bool>,
    /// Taints of the registered Node (`key=value:Effect,…`).
    #[arg(long)]
    pub register_with_taints: Option<String>,
    /// The node's pod capacity (default 110).
    #[arg(long)]
    pub max_pods: Option<u32>,
    /// Resources held back for Kubernetes daemons (`cpu=100m,memory=256Mi,…`); repeated
    /// flags add up and replace the file's `kubeReserved`.
    #[arg(long, action = map_flags::ACTION)]
    pub kube_reserved: Vec<String>,
    /// Resources held back for the system (`cpu=100m,memory=256Mi,…`); repeated flags add
    /// up and replace the file's `systemReserved`.
    #[arg(long, action = map_flags::ACTION)]
    pub system_reserved: Vec<String>,
    /// Hard eviction thresholds, also held back from allocatable (default
    /// `memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%`);
    /// repeated flags add up and replace the file's `evictionHard`.
    #[arg(long, action = map_flags::ACTION)]
    pub eviction_hard: Vec<String>,
    /// How often an unchanged node status is still posted (default 5m).
    #[arg(long, value_parser = duration::parse)]
    pub node_status_report_frequency: Option<Duration>,
    /// At most this many images in the node status (default 50; -1: all).
    #[arg(long, allow_negative_numbers = true)]
    pub node_status_max_images: Option<i32>,
    /// The kubelet's port, reported as the node's daemon endpoint (default 10250).
    #[arg(long)]
    pub port: Option<u16>,
    /// `external`: a cloud controller manager initializes the Node — it registers with the
    /// `node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule` taint, and its
    /// addresses come from `--node-ip` or the cloud provider (in-tree providers are gone
    /// upstream since v1.29).
    #[arg(long, value_parser = ["", "external"])]
    pub cloud_provider: Option<String>,
}

fn usage(what: &str) -> impl Fn(node_status::Error) -> UsageError + '_ {
    move |e| UsageError(format!("{what}: {e}"))
}

/// A reservation from its flag (`flag_name`), else its config field (`field`); errors name
/// the one used.
fn reserved(
    flag: Option<String>,
    flag_name: &str,
    file: Option<BTreeMap<String, String>>,
    field: &str,
) -> Result<Reserved, UsageError> {
    match (flag, file) {
        (Some(s), _) => s.parse().map_err(usage(flag_name)),
        (None, Some(map)) => {
            let joined: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
            joined.join(",").parse().map_err(usage(field))
        }
        (None, None) => Ok(Reserved::default()),
    }
}

/// Merges `flags` over `file` into the node status options of node `node_name`; errors name
/// the flag or field.
pub fn merge(
    flags: Flags,
    file: &KubeletConfiguration,
    node_name: &str,
) -> Result<NodeStatusOptions, UsageError> {
    {
        let node_labels = match map_flags::joined(&flags.node_labels) {
            Some(labels) => initial::parse_labels(&labels).map_err(usage("--node-labels"))?,
            None => BTreeMap::new(),
        };
        let register_with_taints = match flags.register_with_taints.as_deref() {
            Some(s) => initial::parse_taints(s).map_err(usage("--register-with-taints"))?,
            // checked by KubeletConfiguration::validate
            None => file.register_with_taints.clone().unwrap_or_default(),
        };
        let eviction_hard = match (
            map_flags::joined(&flags.eviction_hard),
            file.eviction_hard.clone(),
        ) {
            (Some(s), _) => s.parse().map_err(usage("--eviction-hard"))?,
            (None, Some(map)) => EvictionHard::from_map(&map).map_err(usage("evictionHard"))?,
            (None, None) => EvictionHard::default(),
        };
        let report_frequency = match flags.node_status_report_frequency {
            Some(d) => d,
            None => match file.node_status_report_frequency.as_deref() {
                Some(v) => duration::parse(v)
                    .map_err(|e| UsageError(format!("nodeStatusReportFrequency: {e}")))?,
                None => node_status::DEFAULT_REPORT_FREQUENCY,
            },
        };
        let mut opts = NodeStatusOptions::new(node_name);
        opts.node_labels = node_labels;
        opts.register_node = flags
            .register_node
            .or(file.register_node)
            .unwrap_or(opts.register_node);
        opts.register_with_taints = register_with_taints;
        opts.max_pods = flags.max_pods.or(file.max_pods).unwrap_or(opts.max_pods);
        opts.kube_reserved = reserved(
            map_flags::joined(&flags.kube_reserved),
            "--kube-reserved",
            file.kube_reserved.clone(),
            "kubeReserved",
        )?;
        opts.system_reserved = reserved(
            map_flags::joined(&flags.system_reserved),
            "--system-reserved",
            file.system_reserved.clone(),
            "systemReserved",
        )?;
        opts.eviction_hard = eviction_hard;
        opts.report_frequency = report_frequency;
        opts.max_images = flags
            .node_status_max_images
            .or(file.node_status_max_images)
            .unwrap_or(opts.max_images);
        if opts.max_images < -1 {
            return Err(UsageError(format!(
                "--node-status-max-images/nodeStatusMaxImages {}: must be -1 (no cap) or more",
                opts.max_images
            )));
        }
        opts.port = flags.port.or(file.port).unwrap_or(opts.port);
        opts.external_cloud_provider = flags.cloud_provider.as_deref() == Some("external");
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> KubeletConfiguration {
        serde_saphyr::from_str(yaml).expect("valid yaml")
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = merge(Flags::default(), &KubeletConfiguration::default(), "n").expect("valid");
        assert!(s.register_node);
        assert_eq!(s.max_pods, 110);
        assert_eq!(s.port, 10250);
        assert_eq!(s.max_images, 50);
        assert_eq!(s.report_frequency, Duration::from_secs(300));
        assert_eq!(s.eviction_hard, EvictionHard::default());
        assert_eq!(s.kube_reserved, Reserved::default());
    }

    #[test]
    fn config_fields_with_flags_on_top() {
        let cfg = file(
            "registerNode: false\nmaxPods: 50\nkubeReserved:\n  cpu: 100m\n  memory: 1Gi\n\
             evictionHard:\n  memory.available: 200Mi\nregisterWithTaints:\n- key: a\n  value: b\n  effect: NoSchedule\n\
             nodeStatusReportFrequency: 1m\nport: 10251\n",
        );
        let flags = Flags {
            max_pods: Some(30),
            system_reserved: vec!["cpu=200m".into()],
            node_labels: vec!["role=edge".into()],
            ..Flags::default()
        };
        let s = merge(flags, &cfg, "n").expect("valid");
        assert!(!s.register_node);
        assert_eq!(s.max_pods, 30);
        assert_eq!(s.kube_reserved.0.len(), 2);
        assert_eq!(s.system_reserved.0["cpu"], 200_000_000);
        assert_eq!(s.eviction_hard.0.len(), 1);
        assert_eq!(s.register_with_taints[0].key, "a");
        assert_eq!(s.node_labels["role"], "edge");
        assert_eq!(s.report_frequency, Duration::from_secs(60));
        assert_eq!(s.port, 10251);
        assert_eq!(s.node_name, "n");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let flags = Flags {
            eviction_hard: vec!["memory.available>1Gi".into()],
            ..Flags::default()
        };
        let err = merge(flags, &KubeletConfiguration::default(), "n").expect_err("bad");
        assert!(err.0.contains("--eviction-hard"), "{}", err.0);
        let err =
            merge(Flags::default(), &file("kubeReserved:\n  cpu: lots\n"), "n").expect_err("bad");
        assert!(err.0.contains("kubeReserved"), "{}", err.0);
        let flags = Flags {
            kube_reserved: vec!["cpu=1".into(), "memory=lots".into()],
            ..Flags::default()
        };
        let err = merge(flags, &KubeletConfiguration::default(), "n").expect_err("bad");
        assert!(err.0.starts_with("--kube-reserved: "), "{}", err.0);
    }

    /// Upstream's `cliflag.MapStringString`: repetitions add up, a later key wins, and a
    /// flag replaces the file's whole map.
    #[test]
    fn map_flags_add_up_and_replace_the_files_map() {
        let cfg = file(
            "kubeReserved:\n  cpu: 100m\n  memory: 1Gi\nsystemReserved:\n  pid: \"100\"\n\
             evictionHard:\n  memory.available: 200Mi\n  nodefs.available: 5%\n",
        );
        let flags = Flags {
            kube_reserved: vec!["cpu=300m".into()],
            system_reserved: vec!["cpu=100m".into(), "memory=1Gi,cpu=200m".into()],
            eviction_hard: vec!["memory.available<1Gi".into(), "memory.available<2Gi".into()],
            node_labels: vec!["a=1,b=2".into(), "a=3".into()],
            ..Flags::default()
        };
        let s = merge(flags, &cfg, "n").expect("valid");
        assert_eq!(
            s.kube_reserved.0,
            BTreeMap::from([("cpu".to_owned(), 300_000_000)]),
            "the flag replaces the file's map: no memory"
        );
        assert_eq!(
            s.system_reserved.0,
            BTreeMap::from([
                ("cpu".to_owned(), 200_000_000),
                ("memory".to_owned(), 1_073_741_824 * 1_000_000_000),
            ])
        );
        assert_eq!(
            s.eviction_hard,
            "memory.available<2Gi".parse().expect("hard")
        );
        assert_eq!(
            s.node_labels,
            BTreeMap::from([
                ("a".to_owned(), "3".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ])
        );
        let flags = Flags {
            kube_reserved: vec![String::new()],
            ..Flags::default()
        };
        let s = merge(flags, &cfg, "n").expect("valid");
        assert_eq!(
            s.kube_reserved,
            Reserved::default(),
            "an empty flag still replaces the file's map, as upstream's first Set clears it"
        );
        assert_eq!(s.system_reserved.0.len(), 1, "the file's, without the flag");
    }
}
