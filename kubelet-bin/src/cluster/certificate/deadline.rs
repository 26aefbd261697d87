//! When to renew a certificate (client-go `certificate_manager.go` `nextRotationDeadline` and
//! `jitteryDuration`): at a random point between 70 % and 90 % of its lifetime, so that the
//! nodes of a cluster whose certificates were issued together do not all renew at once.

use std::time::{Duration, SystemTime};

/// The renewal time of a certificate valid from `not_before` to `not_after`, for `jitter` in
/// `[0, 1)`: `not_before` + (0.7 + 0.2 × `jitter`) × the lifetime. A certificate whose
/// `not_after` is not after its `not_before` is due at once (`not_before`).
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let Ok(lifetime) = not_after.duration_since(not_before) else {
        return not_before;
    };
    let fraction = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    not_before + Duration::from_secs_f64(lifetime.as_secs_f64() * fraction)
}

/// [`rotation_deadline`] with a random jitter.
pub fn next_rotation_deadline(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    rotation_deadline(not_before, not_after, rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_fall_between_70_and_90_percent_of_the_lifetime() {
        let not_before = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let lifetime = Duration::from_secs(1000);
        let not_after = not_before + lifetime;
        assert_eq!(
            rotation_deadline(not_before, not_after, 0.0),
            not_before + Duration::from_secs(700)
        );
        assert_eq!(
            rotation_deadline(not_before, not_after, 1.0),
            not_before + Duration::from_secs(900)
        );
        let mut seen = Vec::new();
        for _ in 0..200 {
            let at = next_rotation_deadline(not_before, not_after);
            let offset = at
                .duration_since(not_before)
                .expect("after not_before")
                .as_secs_f64();
            assert!((700.0..=900.0).contains(&offset), "{offset}");
            seen.push(offset);
        }
        // Jittered: not all the same, spread over the window.
        let min = seen.iter().copied().fold(f64::MAX, f64::min);
        let max = seen.iter().copied().fold(f64::MIN, f64::max);
        assert!(max - min > 100.0, "{min}..{max}");
    }

    #[test]
    fn a_certificate_without_a_lifetime_is_due_at_once() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(50);
        assert_eq!(rotation_deadline(t, t - Duration::from_secs(1), 0.5), t);
    }
}
