//! Wall-clock helpers for API timestamps (`k8s_openapi::jiff::Timestamp`).
//!
//! k8s-openapi's `jiff` is built without `std`, so it has no `Timestamp::now()`; these
//! helpers fill that gap. Timing *logic* uses `tokio::time`, never these. [`go_duration`]
//! prints durations as Go does, so messages read as upstream's (`back-off 10s`, `3m0s`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;

/// The current wall-clock time.
pub fn now() -> Timestamp {
    from_system_time(SystemTime::now())
}

/// Converts a `SystemTime`; times outside jiff's range clamp to its bounds.
pub fn from_system_time(t: SystemTime) -> Timestamp {
    let nanos = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_nanos()).unwrap_or(i128::MAX),
    };
    from_unix_nanos(nanos)
}

/// A timestamp from nanoseconds since the Unix epoch (CRI's encoding). `None` for 0, which
/// CRI uses for "not set".
pub fn from_cri_nanos(nanos: i64) -> Option<Timestamp> {
    (nanos != 0).then(|| from_unix_nanos(i128::from(nanos)))
}

fn from_unix_nanos(nanos: i128) -> Timestamp {
    Timestamp::from_nanosecond(nanos).unwrap_or(if nanos < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// `d` as Go prints a `time.Duration` (`time.Duration.String`): `0s`, `250ms`, `1.5s`, `3m0s`, `1h2m3.5s`.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (unit, divisor) = match nanos {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(nanos, divisor));
    }
    let total = d.as_secs();
    let (hours, minutes) = (total / 3600, (total / 60) % 60);
    let seconds = decimal(
        u128::from(total % 60) * 1_000_000_000 + u128::from(d.subsec_nanos()),
        1_000_000_000,
    );
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / divisor` with the fraction's trailing zeros dropped; `divisor` is a power of ten.
fn decimal(value: u128, divisor: u128) -> String {
    let (int, rem) = (value / divisor, value % divisor);
    if rem == 0 {
        return int.to_string();
    }
    let width = divisor.ilog10() as usize;
    let fraction = format!("{rem:0width$}");
    format!("{int}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(5), "5ns"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(180), "3m0s"),
            (Duration::from_secs(181), "3m1s"),
            (Duration::from_millis(181_050), "3m1.05s"),
            (Duration::from_secs(3_600), "1h0m0s"),
            (Duration::from_secs(3_723), "1h2m3s"),
        ];
        for (d, expected) in cases {
            assert_eq!(go_duration(d), expected, "{d:?}");
        }
    }

    #[test]
    fn converts_cri_nanos() {
        assert_eq!(from_cri_nanos(0), None);
        let t = from_cri_nanos(1_700_000_000_123_456_789).expect("set");
        assert_eq!(t.to_string(), "2023-11-14T22:13:20.123456789Z");
        assert!(now() > t);
    }
}
