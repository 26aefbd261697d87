//! Resource amounts as the node status and the eviction manager print them: apimachinery's
//! `resource.Quantity` (`staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`) with
//! its two formats and canonical string forms (`NewQuantity(v, BinarySI)`,
//! `NewMilliQuantity(v, DecimalSI)`, `Sub` keeping the left operand's format).
//!
//! Parsing is [`crate::resources::parse_quantity_nanos`]; this module adds the canonical
//! formatting upstream's `Quantity.String()` produces, so that `16384000Ki`, `3900m` and `110`
//! come out exactly as a Go kubelet would write them.

use crate::resources::parse_quantity_nanos;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const NANOS: i128 = 1_000_000_000;

/// How an amount is printed (upstream `resource.Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Powers of ten: `m`, `k`, `M`, … (cpu, pods).
    DecimalSi,
    /// Powers of two: `Ki`, `Mi`, `Gi`, … (memory, storage, hugepages).
    BinarySi,
}

/// An exact amount in nano-units with the format it prints in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    /// The value × 10⁹.
    pub nanos: i128,
    /// How it prints.
    pub format: Format,
}

impl Amount {
    /// An integer amount (`NewQuantity(value, format)`).
    pub fn new(value: i128, format: Format) -> Self {
        Self {
            nanos: value.saturating_mul(NANOS),
            format,
        }
    }

    /// Thousandths in decimal format (`NewMilliQuantity(millis, DecimalSI)`).
    pub fn milli(millis: i128) -> Self {
        Self {
            nanos: millis.saturating_mul(1_000_000),
            format: Format::DecimalSi,
        }
    }

    /// Parses a quantity; the format follows the suffix as upstream's parser does (binary
    /// suffixes give [`Format::BinarySi`]). `None` when it is not a quantity.
    pub fn parse(s: &str) -> Option<Self> {
        let nanos = parse_quantity_nanos(s)?;
        let format = if s.trim().ends_with('i') {
            Format::BinarySi
        } else {
            Format::DecimalSi
        };
        Some(Self { nanos, format })
    }

    /// `self − other`, keeping `self`'s format, never below zero (upstream's allocatable
    /// arithmetic: `Sub`, then `Set(0)` when negative).
    #[must_use]
    pub fn saturating_sub(self, other: i128) -> Self {
        Self {
            nanos: (self.nanos - other).max(0),
            format: self.format,
        }
    }

    /// The canonical string (upstream `Quantity.String()`).
    pub fn canonical(&self) -> String {
        match self.format {
            Format::BinarySi if self.nanos % NANOS == 0 && (self.nanos / NANOS).abs() >= 1024 => {
                binary(self.nanos / NANOS)
            }
            _ => decimal(self.nanos),
        }
    }

    /// As an API quantity.
    pub fn to_quantity(&self) -> Quantity {
        Quantity(self.canonical())
    }
}

/// Base-1024 form: the largest binary suffix that divides the value exactly.
fn binary(mut value: i128) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut exp = 0;
    while exp < SUFFIXES.len() - 1 && value % 1024 == 0 {
        value /= 1024;
        exp += 1;
    }
    format!("{value}{}", SUFFIXES[exp])
}

/// Base-10 form with an exponent that is a multiple of 3 (`n` … `E`).
fn decimal(nanos: i128) -> String {
    if nanos == 0 {
        return "0".to_owned();
    }
    let (mut value, mut exp) = (nanos, -9_i32);
    while value % 10 == 0 && exp < 18 {
        value /= 10;
        exp += 1;
    }
    while exp.rem_euclid(3) != 0 {
        value *= 10;
        exp -= 1;
    }
    let suffix = match exp {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    format!("{value}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected strings are what apimachinery's Quantity.String() prints for the same values.
    #[test]
    fn binary_quantities_print_as_upstream() {
        let b = |v| Amount::new(v, Format::BinarySi).canonical();
        assert_eq!(b(16_393_268 * 1024), "16393268Ki");
        assert_eq!(b(16_384_000 * 1024), "16000Mi");
        assert_eq!(b(1 << 30), "1Gi");
        assert_eq!(b(512), "512");
        assert_eq!(b(1025), "1025");
        assert_eq!(b(1_000_000_000), "1000000000");
        assert_eq!(b(0), "0");
    }

    #[test]
    fn decimal_quantities_print_as_upstream() {
        assert_eq!(Amount::milli(4000).canonical(), "4");
        assert_eq!(Amount::milli(3900).canonical(), "3900m");
        assert_eq!(Amount::milli(1500).canonical(), "1500m");
        assert_eq!(Amount::new(110, Format::DecimalSi).canonical(), "110");
        assert_eq!(Amount::new(100_000, Format::DecimalSi).canonical(), "100k");
        assert_eq!(Amount::new(0, Format::DecimalSi).canonical(), "0");
    }

    #[test]
    fn subtraction_keeps_the_left_format_and_stops_at_zero() {
        let memory = Amount::new(16_393_268 * 1024, Format::BinarySi);
        let reserved = Amount::parse("100Mi").map(|a| a.nanos).unwrap_or_default();
        assert_eq!(memory.saturating_sub(reserved).canonical(), "16290868Ki");
        assert_eq!(Amount::milli(100).saturating_sub(NANOS).canonical(), "0");
        assert_eq!(
            Amount::parse("1.5Gi").map(|a| a.canonical()).as_deref(),
            Some("1536Mi")
        );
        assert_eq!(Amount::parse("x"), None);
    }
}
