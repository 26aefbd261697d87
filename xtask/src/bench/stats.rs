//! Percentiles and a bootstrap confidence interval for a ratio of percentiles.

/// The `p`-th percentile (0–100) of `xs`, linearly interpolated between closest ranks
/// (`NaN` for no samples).
pub(crate) fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// The median of `xs`.
pub(crate) fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// A small deterministic PRNG (SplitMix64), enough for resampling.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn resample(&mut self, xs: &[f64]) -> Vec<f64> {
        (0..xs.len())
            .map(|_| xs[(self.next() % xs.len() as u64) as usize])
            .collect()
    }
}

/// A 95 % percentile-bootstrap interval of `percentile(a, p) / percentile(b, p)`, resampling
/// both arms independently (2,000 resamples, fixed seed).
pub(crate) fn ratio_ci(a: &[f64], b: &[f64], p: f64) -> (f64, f64) {
    if a.is_empty() || b.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = SplitMix(0x5EED);
    let ratios: Vec<f64> = (0..2000)
        .map(|_| percentile(&rng.resample(a), p) / percentile(&rng.resample(b), p))
        .collect();
    (percentile(&ratios, 2.5), percentile(&ratios, 97.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(median(&xs), 2.5);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 100.0), 4.0);
        assert!((percentile(&xs, 99.0) - 3.97).abs() < 1e-9);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn ratio_interval_contains_the_ratio() {
        let a: Vec<f64> = (0..30).map(|i| 120.0 + f64::from(i)).collect();
        let b: Vec<f64> = (0..30).map(|i| 100.0 + f64::from(i)).collect();
        let (lo, hi) = ratio_ci(&a, &b, 50.0);
        let r = median(&a) / median(&b);
        assert!(lo <= r && r <= hi, "{lo} <= {r} <= {hi}");
        assert!(lo > 1.0);
    }
}
