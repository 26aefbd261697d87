//! Wall-clock helpers for API timestamps (`k8s_openapi::jiff::Timestamp`).
//!
//! k8s-openapi's `jiff` is built without `std`, so it has no `Timestamp::now()`; these
//! helpers fill that gap. Timing *logic* uses `tokio::time`, never these.

use std::time::{SystemTime, UNIX_EPOCH};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_cri_nanos() {
        assert_eq!(from_cri_nanos(0), None);
        let t = from_cri_nanos(1_700_000_000_123_456_789).expect("set");
        assert_eq!(t.to_string(), "2023-11-14T22:13:20.123456789Z");
        assert!(now() > t);
    }
}
