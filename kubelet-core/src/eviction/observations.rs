//! What the signals read from the Summary API, and which thresholds they meet (upstream
//! `makeSignalObservations`, `thresholdsMet`, `thresholdsFirstObservedAt`,
//! `thresholdsMetGracePeriod`, `nodeConditions`, `nodeConditionsLastObservedAt` and
//! `nodeConditionsObservedSince` in `pkg/kubelet/eviction/helpers.go`).
//!
//! Thresholds are named by their index in the manager's configured list, so that the
//! bookkeeping maps can key on them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::{Duration, Instant};

use super::api::{NodeCondition, Signal, Threshold};
use crate::stats::v1alpha1::{SYSTEM_CONTAINER_PODS, Summary};

/// One signal's reading (upstream `signalObservation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// What is available (bytes, inodes or PIDs).
    pub available: i64,
    /// The total.
    pub capacity: i64,
}

/// Every signal that the summary had the numbers for.
pub type Observations = BTreeMap<Signal, Observation>;

fn obs(available: Option<u64>, capacity: Option<u64>) -> Option<Observation> {
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Some(Observation {
        available: to_i64(available?),
        capacity: to_i64(capacity?),
    })
}

/// The signals of `summary` (upstream `makeSignalObservations`): memory available and
/// capacity = available + working set, the `pods` system container's memory, the node's
/// and the image filesystem's bytes and inodes, and `maxpid − curproc`.
pub fn make_signal_observations(summary: &Summary) -> Observations {
    let node = &summary.node;
    let mut out = Observations::new();
    let mut put = |signal, o: Option<Observation>| {
        if let Some(o) = o {
            out.insert(signal, o);
        }
    };
    let memory = |m: &crate::stats::v1alpha1::MemoryStats| {
        let (available, working_set) = (m.available_bytes?, m.working_set_bytes?);
        obs(Some(available), Some(available.saturating_add(working_set)))
    };
    put(
        Signal::MemoryAvailable,
        node.memory.as_ref().and_then(memory),
    );
    put(
        Signal::AllocatableMemoryAvailable,
        node.system_containers
            .iter()
            .find(|c| c.name == SYSTEM_CONTAINER_PODS)
            .and_then(|c| c.memory.as_ref())
            .and_then(memory),
    );
    if let Some(fs) = &node.fs {
        put(
            Signal::NodeFsAvailable,
            obs(fs.available_bytes, fs.capacity_bytes),
        );
        put(Signal::NodeFsInodesFree, obs(fs.inodes_free, fs.inodes));
    }
    if let Some(fs) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        put(
            Signal::ImageFsAvailable,
            obs(fs.available_bytes, fs.capacity_bytes),
        );
        put(Signal::ImageFsInodesFree, obs(fs.inodes_free, fs.inodes));
    }
    if let Some(r) = &node.rlimit
        && let (Some(max), Some(cur)) = (r.maxpid, r.curproc)
    {
        put(
            Signal::PidAvailable,
            Some(Observation {
                available: max - cur,
                capacity: max,
            }),
        );
    }
    out
}

/// `true` when the summary's image filesystem is the node's root filesystem (upstream asks
/// cadvisor whether they are one device; here: the same capacity and inode count).
pub fn has_dedicated_image_fs(summary: &Summary) -> bool {
    let node = &summary.node;
    let image = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref());
    match (&node.fs, image) {
        (Some(root), Some(image)) => {
            root.capacity_bytes != image.capacity_bytes || root.inodes != image.inodes
        }
        _ => false,
    }
}

/// The indices of `thresholds` whose signal is below its value (upstream `thresholdsMet`);
/// with `enforce_min_reclaim`, below value + minimum reclaim.
pub fn thresholds_met(
    thresholds: &[Threshold],
    candidates: impl IntoIterator<Item = usize>,
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> BTreeSet<usize> {
    candidates
        .into_iter()
        .filter(|&i| {
            let Some(t) = thresholds.get(i) else {
                return false;
            };
            let Some(observed) = observations.get(&t.signal) else {
                return false;
            };
            let mut quantity = t.value.quantity(observed.capacity).nanos;
            if enforce_min_reclaim && let Some(reclaim) = t.min_reclaim {
                quantity += reclaim.quantity(observed.capacity).nanos;
            }
            quantity > i128::from(observed.available) * 1_000_000_000
        })
        .collect()
}

/// When each met threshold was first seen met (upstream `thresholdsFirstObservedAt`).
pub fn thresholds_first_observed_at(
    met: &BTreeSet<usize>,
    last: &HashMap<usize, Instant>,
    now: Instant,
) -> HashMap<usize, Instant> {
    met.iter()
        .map(|i| (*i, last.get(i).copied().unwrap_or(now)))
        .collect()
}

/// The thresholds whose grace period has passed (upstream `thresholdsMetGracePeriod`).
pub fn thresholds_met_grace_period(
    thresholds: &[Threshold],
    observed_at: &HashMap<usize, Instant>,
    now: Instant,
) -> BTreeSet<usize> {
    observed_at
        .iter()
        .filter(|(i, at)| {
            thresholds
                .get(**i)
                .is_some_and(|t| now.duration_since(**at) >= t.grace_period)
        })
        .map(|(i, _)| *i)
        .collect()
}

/// The node conditions of the met thresholds (upstream `nodeConditions`).
pub fn node_conditions(thresholds: &[Threshold], met: &BTreeSet<usize>) -> BTreeSet<NodeCondition> {
    met.iter()
        .filter_map(|i| thresholds.get(*i))
        .map(|t| t.signal.node_condition())
        .collect()
}

/// When each condition was last seen: now for the current ones, as before for the others
/// (upstream `nodeConditionsLastObservedAt`).
pub fn node_conditions_last_observed_at(
    current: &BTreeSet<NodeCondition>,
    last: &BTreeMap<NodeCondition, Instant>,
    now: Instant,
) -> BTreeMap<NodeCondition, Instant> {
    let mut out = last.clone();
    for c in current {
        out.insert(*c, now);
    }
    out
}

/// The conditions seen within `period` (upstream `nodeConditionsObservedSince`): a
/// condition stays reported for the pressure transition period after it was last seen.
pub fn node_conditions_observed_since(
    observed_at: &BTreeMap<NodeCondition, Instant>,
    period: Duration,
    now: Instant,
) -> BTreeSet<NodeCondition> {
    observed_at
        .iter()
        .filter(|(_, at)| now.duration_since(**at) < period)
        .map(|(c, _)| *c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::api::ThresholdValue;
    use crate::quantity::Amount;
    use crate::stats::v1alpha1::{FsStats, MemoryStats, NodeStats, RlimitStats, RuntimeStats};

    fn summary() -> Summary {
        Summary {
            node: NodeStats {
                memory: Some(MemoryStats {
                    available_bytes: Some(300),
                    working_set_bytes: Some(700),
                    ..Default::default()
                }),
                fs: Some(FsStats {
                    available_bytes: Some(10),
                    capacity_bytes: Some(100),
                    inodes_free: Some(50),
                    inodes: Some(100),
                    ..Default::default()
                }),
                runtime: Some(RuntimeStats {
                    image_fs: Some(FsStats {
                        available_bytes: Some(10),
                        capacity_bytes: Some(100),
                        inodes_free: Some(50),
                        inodes: Some(100),
                        ..Default::default()
                    }),
                    container_fs: None,
                }),
                rlimit: Some(RlimitStats {
                    time: None,
                    maxpid: Some(1000),
                    curproc: Some(400),
                }),
                ..Default::default()
            },
            pods: Vec::new(),
        }
    }

    #[test]
    fn observations_come_from_the_node_stats() {
        let o = make_signal_observations(&summary());
        let get = |s| o.get(&s).map(|o| (o.available, o.capacity));
        assert_eq!(get(Signal::MemoryAvailable), Some((300, 1000)));
        assert_eq!(get(Signal::NodeFsAvailable), Some((10, 100)));
        assert_eq!(get(Signal::ImageFsInodesFree), Some((50, 100)));
        assert_eq!(get(Signal::PidAvailable), Some((600, 1000)));
        assert_eq!(get(Signal::AllocatableMemoryAvailable), None);
        assert!(!has_dedicated_image_fs(&summary()));
    }

    #[test]
    fn min_reclaim_keeps_a_threshold_met_longer() {
        let t = vec![Threshold {
            signal: Signal::MemoryAvailable,
            value: ThresholdValue::Quantity(Amount::parse("250").expect("q")),
            grace_period: Duration::ZERO,
            min_reclaim: Some(ThresholdValue::Percentage(0.1)),
        }];
        let o = make_signal_observations(&summary());
        assert!(thresholds_met(&t, [0], &o, false).is_empty(), "300 ≥ 250");
        assert_eq!(
            thresholds_met(&t, [0], &o, true),
            [0].into(),
            "300 < 250 + 10% of 1000"
        );
    }

    #[test]
    fn conditions_stay_for_the_transition_period() {
        let t0 = Instant::now();
        let current = [NodeCondition::MemoryPressure].into();
        let seen = node_conditions_last_observed_at(&current, &BTreeMap::new(), t0);
        let period = Duration::from_secs(300);
        let later = t0 + Duration::from_secs(299);
        let seen = node_conditions_last_observed_at(&BTreeSet::new(), &seen, later);
        assert_eq!(
            node_conditions_observed_since(&seen, period, later),
            current
        );
        assert!(
            node_conditions_observed_since(&seen, period, t0 + period).is_empty(),
            "gone once the period has passed since it was last seen"
        );
    }
}
