//! Go's `time.Duration.String()`, so health messages read as upstream's (`3m0s`).

use std::time::Duration;

/// `d` as Go prints a `time.Duration`: `0s`, `250ms`, `1.5s`, `3m0s`, `1h2m3.5s`.
pub(crate) fn go_duration(d: Duration) -> String {
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
}
