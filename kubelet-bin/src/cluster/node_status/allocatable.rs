//! Node allocatable: capacity − kube-reserved − system-reserved − hard eviction thresholds,
//! never below zero, and memory minus the hugepage pools (upstream
//! `pkg/kubelet/cm/node_container_manager_linux.go` `GetNodeAllocatableReservation` and
//! `hardEvictionReservation`, and the allocatable part of `nodestatus.MachineInfo`); the
//! threshold syntax is `kubelet_core::eviction::api`'s.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::Error;
use super::quantity::Amount;

/// A `--kube-reserved` / `--system-reserved` list such as `cpu=100m,memory=1Gi`: resource
/// name → nano-units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved(pub BTreeMap<String, i128>);

impl FromStr for Reserved {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let mut map = BTreeMap::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let invalid = || Error::InvalidReservation(pair.to_owned());
            let (name, value) = pair.split_once('=').ok_or_else(invalid)?;
            let amount = Amount::parse(value).ok_or_else(invalid)?;
            if amount.nanos < 0 {
                return Err(invalid());
            }
            map.insert(name.trim().to_owned(), amount.nanos);
        }
        Ok(Self(map))
    }
}

pub use kubelet_core::eviction::{Signal, Threshold, ThresholdValue};

/// `--eviction-hard` / `evictionHard`: the hard thresholds, parsed by
/// [`kubelet_core::eviction::api`] (their one home). The default is upstream's
/// (`kubelet_core::eviction::api::DEFAULT_EVICTION_HARD`).
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionHard(pub Vec<Threshold>);

impl Default for EvictionHard {
    fn default() -> Self {
        Self::from_map(&kubelet_core::eviction::api::default_eviction_hard())
            .unwrap_or(Self(Vec::new()))
    }
}

impl EvictionHard {
    /// Thresholds from `evictionHard` of the config file (signal → value, e.g.
    /// `"memory.available": "100Mi"`).
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, Error> {
        use kubelet_core::eviction::api::parse_threshold_config;
        let none = BTreeMap::new();
        parse_threshold_config(map, &none, &BTreeMap::new(), &none)
            .map(Self)
            .map_err(|e| Error::InvalidEvictionThreshold(e.to_string()))
    }
}

impl FromStr for EvictionHard {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let map = kubelet_core::eviction::api::parse_flag_map(s, '<')
            .map_err(|e| Error::InvalidEvictionThreshold(e.to_string()))?;
        Self::from_map(&map)
    }
}

/// What is held back from capacity, per resource (upstream
/// `GetNodeAllocatableReservation`): system-reserved + kube-reserved + the hard eviction
/// thresholds of `memory.available` (memory) and `nodefs.available` (ephemeral-storage).
pub fn reservation(
    capacity: &BTreeMap<String, Amount>,
    kube_reserved: &Reserved,
    system_reserved: &Reserved,
    eviction_hard: &EvictionHard,
) -> BTreeMap<String, i128> {
    let eviction = hard_eviction_reservation(eviction_hard, capacity);
    capacity
        .keys()
        .filter_map(|name| {
            let total = [&system_reserved.0, &kube_reserved.0, &eviction]
                .iter()
                .filter_map(|m| m.get(name))
                .sum::<i128>();
            (total != 0).then(|| (name.clone(), total))
        })
        .collect()
}

/// Upstream `hardEvictionReservation`; a percentage is `int64(float64(capacity.Value()) *
/// float64(percentage))` (upstream `GetThresholdQuantity`).
fn hard_eviction_reservation(
    eviction_hard: &EvictionHard,
    capacity: &BTreeMap<String, Amount>,
) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for t in &eviction_hard.0 {
        let resource = match t.signal {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable => "ephemeral-storage",
            _ => continue,
        };
        let capacity_nanos = capacity.get(resource).map_or(0, |a| a.nanos);
        let capacity = kubelet_core::pod_resources::value(capacity_nanos);
        out.insert(resource.to_owned(), t.value.quantity(capacity).nanos);
    }
    out
}

/// Node allocatable as the `kubepods` cgroup enforces it (upstream
/// `getNodeAllocatableAbsolute` of `node_container_manager_linux.go`): each resource of
/// `capacity` minus system-reserved and kube-reserved, floored at zero, and memory minus
/// each hugepage pool that is left. Unlike [`allocatable`] (the Node status), the hard
/// eviction thresholds are not taken off: the eviction manager keeps them.
#[doc(alias = "getNodeAllocatableAbsolute")]
pub fn enforced_allocatable(
    capacity: &BTreeMap<String, Amount>,
    kube_reserved: &Reserved,
    system_reserved: &Reserved,
) -> BTreeMap<String, Amount> {
    let no_eviction = EvictionHard(Vec::new());
    let reserved = reservation(capacity, kube_reserved, system_reserved, &no_eviction);
    let mut out: BTreeMap<String, Amount> = capacity
        .iter()
        .map(|(name, cap)| {
            let r = reserved.get(name).copied().unwrap_or(0);
            (name.clone(), cap.saturating_sub(r))
        })
        .collect();
    let hugepages: i128 = out
        .iter()
        .filter(|(name, _)| name.starts_with("hugepages-"))
        .map(|(_, a)| a.nanos)
        .sum();
    if let Some(memory) = out.get_mut("memory") {
        *memory = memory.saturating_sub(hugepages);
    }
    out
}

/// Allocatable from capacity and the reservation (the allocatable part of upstream
/// `nodestatus.MachineInfo`): each resource minus its reservation, floored at zero, and
/// memory also minus every `hugepages-*` capacity.
pub fn allocatable(
    capacity: &BTreeMap<String, Amount>,
    reservation: &BTreeMap<String, i128>,
) -> BTreeMap<String, Amount> {
    let mut out: BTreeMap<String, Amount> = capacity
        .iter()
        .map(|(name, cap)| {
            let reserved = reservation.get(name).copied().unwrap_or(0);
            (name.clone(), cap.saturating_sub(reserved))
        })
        .collect();
    for (name, cap) in capacity {
        if name.starts_with("hugepages-")
            && let Some(memory) = out.get_mut("memory")
        {
            *memory = memory.saturating_sub(cap.nanos);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::quantity::Format;
    use super::*;

    fn capacity() -> BTreeMap<String, Amount> {
        [
            ("cpu", Amount::milli(4000)),
            ("memory", Amount::new(16_393_268 * 1024, Format::BinarySi)),
            ("pods", Amount::new(110, Format::DecimalSi)),
            (
                "ephemeral-storage",
                Amount::new(100 << 30, Format::BinarySi),
            ),
            ("hugepages-2Mi", Amount::new(8 << 20, Format::BinarySi)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn printed(m: &BTreeMap<String, Amount>) -> BTreeMap<String, String> {
        m.iter().map(|(k, v)| (k.clone(), v.canonical())).collect()
    }

    #[test]
    fn default_eviction_thresholds_reserve_memory_and_nodefs() {
        let cap = capacity();
        let r = reservation(
            &cap,
            &Reserved::default(),
            &Reserved::default(),
            &EvictionHard::default(),
        );
        let a = printed(&allocatable(&cap, &r));
        assert_eq!(a["cpu"], "4");
        assert_eq!(a["pods"], "110");
        // 16393268Ki − 100Mi − 8Mi of hugepages.
        assert_eq!(a["memory"], "16282676Ki");
        // 100Gi − int64(float64(100Gi) × float64(float32(0.1))).
        let storage =
            (100_i64 << 30) - (((100_i64 << 30) as f64 * f64::from(10f32 / 100.0)) as i64);
        assert_eq!(a["ephemeral-storage"], storage.to_string());
        assert_eq!(a["hugepages-2Mi"], "8Mi");
    }

    #[test]
    fn reserved_resources_add_up_and_floor_at_zero() {
        let cap = capacity();
        let kube: Reserved = "cpu=100m,memory=1Gi".parse().unwrap_or_default();
        let system: Reserved = "cpu=200m, pods=200".parse().unwrap_or_default();
        let r = reservation(&cap, &kube, &system, &EvictionHard(Vec::new()));
        let a = printed(&allocatable(&cap, &r));
        assert_eq!(a["cpu"], "3700m");
        assert_eq!(a["pods"], "0");
        // 16393268Ki − 1Gi − 8Mi of hugepages.
        assert_eq!(a["memory"], "15336500Ki");
        assert_eq!(a["ephemeral-storage"], "100Gi");
    }

    #[test]
    fn the_enforced_allocatable_leaves_out_eviction_thresholds() {
        let cap = capacity();
        let kube: Reserved = "cpu=100m,memory=1Gi".parse().unwrap_or_default();
        let system: Reserved = "cpu=200m,memory=2Gi,hugepages-2Mi=2Mi"
            .parse()
            .unwrap_or_default();
        let a = printed(&enforced_allocatable(&cap, &kube, &system));
        assert_eq!(a["cpu"], "3700m");
        // 16393268Ki − 3Gi − the 6Mi of hugepages left after their reservation; no
        // eviction threshold.
        assert_eq!(a["memory"], "13241396Ki");
        assert_eq!(a["hugepages-2Mi"], "6Mi");
        assert_eq!(a["ephemeral-storage"], "100Gi");
        assert_eq!(a["pods"], "110");
        let huge: Reserved = "memory=5000Gi".parse().unwrap_or_default();
        let a = printed(&enforced_allocatable(&cap, &huge, &Reserved::default()));
        assert_eq!(a["memory"], "0", "floored at zero");
        let none = printed(&enforced_allocatable(
            &cap,
            &Reserved::default(),
            &Reserved::default(),
        ));
        assert_eq!(none["memory"], "16385076Ki", "capacity minus the hugepages");
    }

    #[test]
    fn invalid_lists_are_errors() {
        assert!("cpu".parse::<Reserved>().is_err());
        assert!("cpu=lots".parse::<Reserved>().is_err());
        assert!("memory.available>1Gi".parse::<EvictionHard>().is_err());
        assert!("foo.available<1Gi".parse::<EvictionHard>().is_err());
        assert!("nodefs.available<120%".parse::<EvictionHard>().is_err());
        assert_eq!(EvictionHard::default().0.len(), 5);
        let from_map =
            EvictionHard::from_map(&[("memory.available".to_owned(), "200Mi".to_owned())].into());
        assert!(from_map.is_ok_and(|e| e.0[0].value.quantity(0).canonical() == "200Mi"));
    }
}
