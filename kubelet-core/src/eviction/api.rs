//! Eviction signals and thresholds, and their configuration syntax (upstream
//! `pkg/kubelet/eviction/api/types.go` and `ParseThresholdConfig` in
//! `pkg/kubelet/eviction/helpers.go`).
//!
//! A threshold is `<signal><<value>`: `memory.available<100Mi`, `nodefs.available<10%`. Hard
//! thresholds act at once; soft ones (`--eviction-soft`) only once they held for their grace
//! period (`--eviction-soft-grace-period`, required for every soft signal). A minimum reclaim
//! (`--eviction-minimum-reclaim`) keeps a met threshold met until `value + reclaim` is
//! available again. `0%` and `100%` thresholds are ignored, as upstream.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::Error;
use crate::quantity::{Amount, Format};

/// What an eviction threshold is about (upstream `evictionapi.Signal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `memory.available`: node memory capacity − working set.
    MemoryAvailable,
    /// `allocatableMemory.available`: the `pods` cgroup's memory (upstream adds it for
    /// `--enforce-node-allocatable=pods`).
    AllocatableMemoryAvailable,
    /// `nodefs.available`: free bytes of the kubelet's root filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes of the runtime's image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `pid.available`: `kernel.pid_max` − running processes.
    PidAvailable,
}

impl Signal {
    /// Every signal, in upstream's order.
    pub const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name, e.g. `memory.available`.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The resource the signal starves (upstream `signalToResource`): `memory`,
    /// `ephemeral-storage`, `inodes` or `pids`.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// The node condition a met threshold of the signal sets (upstream
    /// `signalToNodeCondition`).
    pub fn node_condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                NodeCondition::MemoryPressure
            }
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// How amounts of the signal print: bytes in binary, counts in decimal.
    pub fn format(self) -> Format {
        match self.resource() {
            "memory" | "ephemeral-storage" => Format::BinarySi,
            _ => Format::DecimalSi,
        }
    }

    /// Upstream's `containerfs.*` signals: accepted and ignored, since this kubelet keeps
    /// containers on the image filesystem (upstream overrides them with the nodefs or
    /// imagefs thresholds too).
    fn is_ignored(name: &str) -> bool {
        matches!(name, "containerfs.available" | "containerfs.inodesFree")
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Signal {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Signal::ALL
            .into_iter()
            .find(|sig| sig.as_str() == s)
            .ok_or_else(|| Error::UnsupportedSignal(s.to_owned()))
    }
}

/// The node conditions the eviction manager reports (upstream `v1.NodeConditionType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    /// `MemoryPressure`.
    MemoryPressure,
    /// `DiskPressure`.
    DiskPressure,
    /// `PIDPressure`.
    PidPressure,
}

impl NodeCondition {
    /// The condition type, e.g. `MemoryPressure`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

impl fmt::Display for NodeCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A threshold's value: an amount, or a fraction of the signal's capacity (upstream
/// `ThresholdValue`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdValue {
    /// An absolute amount (`100Mi`).
    Quantity(Amount),
    /// A fraction as upstream stores it: `float32(p) / 100` (`10%` → 0.1).
    Percentage(f32),
}

impl ThresholdValue {
    /// The amount the value stands for against `capacity` (upstream `GetThresholdQuantity`:
    /// a percentage is `int64(float64(capacity) * float64(p))`, printed in binary format).
    pub fn quantity(self, capacity: i64) -> Amount {
        match self {
            ThresholdValue::Quantity(a) => a,
            ThresholdValue::Percentage(p) => {
                #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
                let v = (capacity as f64 * f64::from(p)) as i64;
                Amount::new(i128::from(v), Format::BinarySi)
            }
        }
    }
}

impl fmt::Display for ThresholdValue {
    /// As the configuration writes it: `100Mi`, `10%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThresholdValue::Quantity(a) => f.write_str(&a.canonical()),
            ThresholdValue::Percentage(p) => {
                let percent = (f64::from(*p) * 100.0 * 1e4).round() / 1e4;
                write!(f, "{percent}%")
            }
        }
    }
}

/// One eviction threshold (upstream `evictionapi.Threshold`; the operator is always
/// `LessThan`).
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// Met when the signal's available amount is below this.
    pub value: ThresholdValue,
    /// How long the threshold must hold before pods are evicted; zero for a hard threshold.
    pub grace_period: Duration,
    /// Once met, the threshold stays met until this much more than `value` is available.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// `true` for a hard threshold (upstream `isHardEvictionThreshold`: no grace period).
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// Upstream's `DefaultEvictionHard` (Linux).
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// [`DEFAULT_EVICTION_HARD`] as a map.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A flag's `key<sep>value,…` list as a map (upstream's `LangleSeparatedMapStringString`
/// for `--eviction-hard` and `--eviction-soft` with `<`, `MapStringString` for the grace
/// periods and minimum reclaims with `=`). A later key wins.
pub fn parse_flag_map(s: &str, separator: char) -> Result<BTreeMap<String, String>, Error> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|statement| {
            let (k, v) =
                statement
                    .split_once(separator)
                    .ok_or_else(|| Error::InvalidStatement {
                        statement: statement.to_owned(),
                        separator,
                    })?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// The thresholds of the eviction settings (upstream `ParseThresholdConfig`): `hard` and
/// `soft` map signals to values (`100Mi`, `10%`), `soft_grace_periods` gives every soft
/// signal its grace period, `min_reclaims` signals to reclaim amounts. Errors name the
/// statement at fault.
pub fn parse_threshold_config(
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace_periods: &BTreeMap<String, Duration>,
    min_reclaims: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, Error> {
    for signal in soft_grace_periods.keys() {
        if !Signal::is_ignored(signal) {
            signal.parse::<Signal>()?;
        }
    }
    let mut out = Vec::new();
    for (statements, soft) in [(hard, false), (soft, true)] {
        for (name, value) in statements {
            if Signal::is_ignored(name) {
                tracing::warn!(signal = %name, "containerfs eviction thresholds are ignored");
                continue;
            }
            let signal: Signal = name.parse()?;
            let Some(value) = parse_value(signal, value)? else {
                continue;
            };
            let grace_period = if soft {
                *soft_grace_periods
                    .get(name)
                    .ok_or_else(|| Error::MissingGracePeriod(signal.to_string()))?
            } else {
                Duration::ZERO
            };
            out.push(Threshold {
                signal,
                value,
                grace_period,
                min_reclaim: None,
            });
        }
    }
    apply_min_reclaims(&mut out, min_reclaims)?;
    Ok(out)
}

/// Sets the minimum reclaim of each of `thresholds` whose signal `min_reclaims` names
/// (upstream `parseMinimumReclaims`, then applied to hard and soft thresholds alike).
pub fn apply_min_reclaims(
    thresholds: &mut [Threshold],
    min_reclaims: &BTreeMap<String, String>,
) -> Result<(), Error> {
    for (signal, value) in min_reclaims {
        if Signal::is_ignored(signal) {
            continue;
        }
        let signal: Signal = signal.parse()?;
        let reclaim = parse_min_reclaim(signal, value)?;
        for t in thresholds.iter_mut().filter(|t| t.signal == signal) {
            t.min_reclaim = Some(reclaim);
        }
    }
    Ok(())
}

/// A threshold value; `None` for the ignored `0%` and `100%` (upstream
/// `parseThresholdStatement`).
fn parse_value(signal: Signal, value: &str) -> Result<Option<ThresholdValue>, Error> {
    let invalid = |why: &str| Error::InvalidThreshold {
        statement: format!("{signal}<{value}"),
        why: why.to_owned(),
    };
    if let Some(p) = value.strip_suffix('%') {
        if value == "0%" || value == "100%" {
            return Ok(None);
        }
        let p: f32 = p.trim().parse().map_err(|_| invalid("not a percentage"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(invalid("a percentage must be between 0% and 100%"));
        }
        return Ok(Some(ThresholdValue::Percentage(p / 100.0)));
    }
    let amount = Amount::parse(value).ok_or_else(|| invalid("not a quantity"))?;
    if amount.nanos <= 0 {
        return Err(invalid("must be positive"));
    }
    Ok(Some(ThresholdValue::Quantity(amount)))
}

/// A minimum reclaim (upstream `parseMinimumReclaims`).
fn parse_min_reclaim(signal: Signal, value: &str) -> Result<ThresholdValue, Error> {
    let invalid = |why: &str| Error::InvalidMinimumReclaim {
        statement: format!("{signal}={value}"),
        why: why.to_owned(),
    };
    if let Some(p) = value.strip_suffix('%') {
        let p: f32 = p.trim().parse().map_err(|_| invalid("not a percentage"))?;
        if p <= 0.0 {
            return Err(invalid("must be positive"));
        }
        return Ok(ThresholdValue::Percentage(p / 100.0));
    }
    let amount = Amount::parse(value).ok_or_else(|| invalid("not a quantity"))?;
    if amount.nanos < 0 {
        return Err(invalid("must not be negative"));
    }
    Ok(ThresholdValue::Quantity(amount))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_parse_as_upstream() {
        let t = parse_threshold_config(
            &default_eviction_hard(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
        )
        .expect("defaults are valid");
        assert_eq!(t.len(), 5);
        let memory = t
            .iter()
            .find(|t| t.signal == Signal::MemoryAvailable)
            .expect("memory");
        assert!(memory.is_hard());
        assert_eq!(memory.value.quantity(0).canonical(), "100Mi");
        let nodefs = t
            .iter()
            .find(|t| t.signal == Signal::NodeFsAvailable)
            .expect("nodefs");
        assert_eq!(nodefs.value, ThresholdValue::Percentage(0.1));
        assert_eq!(nodefs.value.to_string(), "10%");
        assert_eq!(memory.value.to_string(), "100Mi");
        assert_eq!(ThresholdValue::Percentage(0.155).to_string(), "15.5%");
        assert_eq!(nodefs.value.quantity(1000).canonical(), "100");
    }

    #[test]
    fn soft_thresholds_take_their_grace_period_and_reclaims_apply_to_both() {
        let grace = [("memory.available".to_owned(), Duration::from_secs(90))]
            .into_iter()
            .collect();
        let t = parse_threshold_config(
            &map(&[("memory.available", "100Mi")]),
            &map(&[("memory.available", "1Gi")]),
            &grace,
            &map(&[("memory.available", "50Mi")]),
        )
        .expect("valid");
        assert_eq!(t.len(), 2);
        assert!(t[0].is_hard() && !t[1].is_hard());
        assert_eq!(t[1].grace_period, Duration::from_secs(90));
        assert!(t.iter().all(|t| t.min_reclaim.is_some()));
    }

    #[test]
    fn flag_lists_split_on_their_separator() {
        let m = parse_flag_map("memory.available<100Mi, nodefs.available<10%", '<').expect("valid");
        assert_eq!(m["memory.available"], "100Mi");
        assert_eq!(m["nodefs.available"], "10%");
        let e = parse_flag_map("memory.available>1Gi", '<')
            .map(|_| ())
            .expect_err("bad");
        assert_eq!(
            e.to_string(),
            "invalid statement \"memory.available>1Gi\": want <key><<value>"
        );
    }

    #[test]
    fn errors_name_the_bad_part() {
        let none = BTreeMap::new();
        let err = |hard: &[(&str, &str)], soft: &[(&str, &str)], reclaim: &[(&str, &str)]| {
            parse_threshold_config(&map(hard), &map(soft), &BTreeMap::new(), &map(reclaim))
                .map(|_| ())
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            err(&[("memory.free", "1Gi")], &[], &[]),
            "unsupported eviction signal memory.free"
        );
        assert!(err(&[("memory.available", "lots")], &[], &[]).contains("memory.available<lots"));
        assert!(err(&[("nodefs.available", "120%")], &[], &[]).contains("nodefs.available<120%"));
        assert!(err(&[("memory.available", "0")], &[], &[]).contains("must be positive"));
        assert_eq!(
            err(&[], &[("memory.available", "1Gi")], &[]),
            "grace period must be specified for the soft eviction threshold memory.available"
        );
        assert!(err(&[], &[], &[("pid.available", "-1")]).contains("pid.available=-1"));
        let ok = parse_threshold_config(
            &map(&[("memory.available", "0%"), ("containerfs.available", "10%")]),
            &none,
            &BTreeMap::new(),
            &none,
        )
        .expect("ignored");
        assert!(ok.is_empty(), "0% and containerfs are ignored");
    }
}
