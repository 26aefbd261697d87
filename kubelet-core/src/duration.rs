//! Go `time.ParseDuration` syntax (`2s`, `20s`, `1m`, `1h30m`, `500ms`) of flags, config
//! files and plugin responses (e.g. a credential provider's `cacheDuration`).

use std::time::Duration;

/// Why a string is not a Go duration; every variant but [`Error::Empty`] quotes the string.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// The string is empty.
    #[error("empty duration")]
    Empty,
    /// A number without a unit.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// Not `<number><unit>…` (e.g. a sign, or a unit without a number).
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number that does not parse (e.g. `1.2.3s`).
    #[error("invalid number in duration {0:?}")]
    InvalidNumber(String),
    /// A unit other than `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`.
    #[error("unknown unit {unit:?} in duration {duration:?}")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// The whole string.
        duration: String,
    },
    /// The total does not fit a [`Duration`].
    #[error("invalid duration {duration:?}: {source}")]
    OutOfRange {
        /// The whole string.
        duration: String,
        /// Why it does not fit.
        #[source]
        source: std::time::TryFromFloatSecsError,
    },
}

/// Parses a Go duration string. Only non-negative durations are accepted.
pub fn parse(s: &str) -> Result<Duration, Error> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(Error::Empty);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| Error::MissingUnit(s.to_owned()))?;
        if num_len == 0 {
            return Err(Error::Invalid(s.to_owned()));
        }
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| Error::InvalidNumber(s.to_owned()))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(Error::UnknownUnit {
                    unit: unit.to_owned(),
                    duration: s.to_owned(),
                });
            }
        };
        total += value * factor;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|source| Error::OutOfRange {
        duration: s.to_owned(),
        source,
    })
}

/// Formats `d` as Go's `time.Duration.String` does (`2m0s`, `1h0m0s`, `500ms`, `1.5s`, `0s`),
/// the form `metav1.Duration` takes in JSON (e.g. in `/configz`).
pub fn format(d: Duration) -> String {
    fn trimmed(whole: u128, frac: u128, digits: usize) -> String {
        if frac == 0 {
            return whole.to_string();
        }
        let frac = format!("{frac:0digits$}");
        format!("{whole}.{}", frac.trim_end_matches('0'))
    }
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trimmed(ns / 1_000, ns % 1_000, 3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trimmed(ns / 1_000_000, ns % 1_000_000, 6));
    }
    let secs = ns / 1_000_000_000;
    let seconds = trimmed(secs % 60, ns % 1_000_000_000, 9);
    match (secs / 3600, secs / 60 % 60) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_go_does() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(5430), "1h30m30s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(15), "15ns"),
        ] {
            assert_eq!(format(d), want);
            assert_eq!(parse(want), Ok(d), "{want} round-trips");
        }
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("10"), Err(Error::MissingUnit("10".into())));
        assert_eq!(
            parse("5x").map_err(|e| e.to_string()),
            Err("unknown unit \"x\" in duration \"5x\"".into())
        );
        assert_eq!(parse("-1s"), Err(Error::Invalid("-1s".into())));
        assert_eq!(parse(""), Err(Error::Empty));
    }
}
