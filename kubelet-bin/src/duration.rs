//! Go `time.ParseDuration` syntax for flags and config (`2s`, `20s`, `1m`, `1h30m`, `500ms`).

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

#[cfg(test)]
mod tests {
    use super::*;

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
