//! The event correlator: aggregation, deduplication and the spam filter that client-go's
//! recorder applies before an event reaches the API server.
//!
//! Mirrors client-go `tools/record/events_cache.go` (`EventCorrelator`): the
//! `EventAggregator` (more than [`Config::max_events`] − 1 distinct messages for the same
//! object and reason within [`Config::max_interval`] become one event whose message starts
//! with `(combined from similar events): `), the `eventLogger` (an event seen before is a
//! PATCH of `count`, `lastTimestamp` and `message` on the first one) and the
//! `EventSourceObjectSpamFilter` (a token bucket per source and object: burst 25, one token
//! per 5 minutes). Time is `tokio::time`, so tests run on a paused clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

/// The message prefix of an aggregated event (upstream `EventAggregatorByReasonMessageFunc`).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// The correlator's limits; the defaults are upstream's.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Distinct messages per aggregate key before aggregation starts (upstream
    /// `defaultAggregateMaxEvents`, 10).
    pub max_events: usize,
    /// The aggregation window (upstream `defaultAggregateIntervalInSeconds`, 600 s).
    pub max_interval: Duration,
    /// Spam filter burst per source and object (upstream `defaultSpamBurst`, 25).
    pub spam_burst: u32,
    /// Spam filter refill: one token per this period (upstream `defaultSpamQPS`, 1/300).
    pub spam_refill: Duration,
    /// Entries kept in each cache (upstream `maxLruCacheEntries`, 4096).
    pub cache_size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_events: 10,
            max_interval: Duration::from_secs(600),
            spam_burst: 25,
            spam_refill: Duration::from_secs(300),
            cache_size: 4096,
        }
    }
}

/// What to do with an event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlated {
    /// Dropped by the spam filter.
    Skip,
    /// A new event: create it.
    Create(Event),
    /// Seen before: PATCH `patch` onto the event called `event.metadata.name` (create
    /// `event` if that one is gone).
    Patch {
        /// The event with its count, first timestamp and name from the last observation.
        event: Event,
        /// The strategic merge patch (`count`, `lastTimestamp`, `message`).
        patch: serde_json::Value,
    },
}

struct AggregateRecord {
    messages: HashSet<String>,
    last: Instant,
}

#[derive(Clone)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
    last: Instant,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The correlator (upstream `EventCorrelator`). One per writer; not shared.
pub struct Correlator {
    config: Config,
    aggregates: HashMap<String, AggregateRecord>,
    observations: HashMap<String, Observation>,
    spam: HashMap<String, Bucket>,
}

impl std::fmt::Debug for Correlator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Correlator")
            .field("config", &self.config)
            .field("observations", &self.observations.len())
            .finish_non_exhaustive()
    }
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// Upstream `getEventKey`: everything that makes two events the same.
fn event_key(e: &Event) -> String {
    let o = &e.involved_object;
    let source = e.source.as_ref();
    [
        source.map_or("", |x| s(&x.component)),
        source.map_or("", |x| s(&x.host)),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ]
    .join("\u{0}")
}

/// Upstream `EventAggregatorByReasonFunc`: the key without the message (and field path).
fn aggregate_key(e: &Event) -> String {
    let o = &e.involved_object;
    let source = e.source.as_ref();
    [
        source.map_or("", |x| s(&x.component)),
        source.map_or("", |x| s(&x.host)),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]
    .join("\u{0}")
}

/// Upstream `getSpamKey`: source and object.
fn spam_key(e: &Event) -> String {
    let o = &e.involved_object;
    let source = e.source.as_ref();
    [
        source.map_or("", |x| s(&x.component)),
        source.map_or("", |x| s(&x.host)),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
    ]
    .join("\u{0}")
}

/// Drops the least recently used entry when `map` is over `cap`.
fn bound<V>(map: &mut HashMap<String, V>, cap: usize, last: impl Fn(&V) -> Instant) {
    if map.len() <= cap {
        return;
    }
    if let Some(oldest) = map
        .iter()
        .min_by_key(|(_, v)| last(v))
        .map(|(k, _)| k.clone())
    {
        map.remove(&oldest);
    }
}

impl Correlator {
    /// A correlator with `config`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            aggregates: HashMap::new(),
            observations: HashMap::new(),
            spam: HashMap::new(),
        }
    }

    /// Aggregates, observes and filters `event` (upstream `EventCorrelate`). `event` carries
    /// its wall-clock timestamps; `now` is the monotonic time of the call.
    pub fn correlate(&mut self, event: Event, now: Instant) -> Correlated {
        let (event, key) = self.aggregate(event, now);
        let observed = self.observe(event, key, now);
        let event = match &observed {
            Correlated::Create(e) | Correlated::Patch { event: e, .. } => e,
            Correlated::Skip => return Correlated::Skip,
        };
        if !self.allow(event, now) {
            return Correlated::Skip;
        }
        observed
    }

    /// Remembers what the API server returned for a written event (upstream `UpdateState`):
    /// later duplicates patch it.
    pub fn update_state(&mut self, written: &Event, now: Instant) {
        let key = event_key(written);
        self.observations.insert(
            key,
            Observation {
                count: written.count.unwrap_or(1),
                first_timestamp: written.first_timestamp.clone(),
                name: written.metadata.name.clone(),
                resource_version: written.metadata.resource_version.clone(),
                last: now,
            },
        );
        bound(&mut self.observations, self.config.cache_size, |o| o.last);
    }

    /// Upstream `EventAggregate`: the event and its dedup key.
    fn aggregate(&mut self, event: Event, now: Instant) -> (Event, String) {
        let key = aggregate_key(&event);
        let record = self
            .aggregates
            .entry(key.clone())
            .or_insert_with(|| AggregateRecord {
                messages: HashSet::new(),
                last: now,
            });
        if now.duration_since(record.last) > self.config.max_interval {
            record.messages.clear();
        }
        record.messages.insert(s(&event.message).to_owned());
        record.last = now;
        let distinct = record.messages.len();
        bound(&mut self.aggregates, self.config.cache_size, |r| r.last);
        if distinct < self.config.max_events {
            let key = event_key(&event);
            return (event, key);
        }
        let name = format!(
            "{}.{:x}",
            s(&event.involved_object.name),
            event
                .last_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_nanosecond())
        );
        let combined = Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: event.last_timestamp.clone(),
            last_timestamp: event.last_timestamp.clone(),
            message: Some(format!("{COMBINED_PREFIX}{}", s(&event.message))),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            ..Default::default()
        };
        (combined, key)
    }

    /// Upstream `eventObserve`: a seen event becomes a patch on the first one.
    fn observe(&mut self, mut event: Event, key: String, now: Instant) -> Correlated {
        let last = self.observations.get(&key).cloned();
        let result = match last {
            Some(last) if last.count > 0 => {
                event.count = Some(last.count.saturating_add(1));
                event.first_timestamp = last.first_timestamp;
                event.metadata.name = last.name;
                event.metadata.resource_version = last.resource_version;
                let patch = serde_json::json!({
                    "count": event.count,
                    "lastTimestamp": event.last_timestamp,
                    "message": event.message,
                });
                Correlated::Patch { event, patch }
            }
            _ => Correlated::Create(event),
        };
        let event = match &result {
            Correlated::Create(e) | Correlated::Patch { event: e, .. } => e,
            Correlated::Skip => return result,
        };
        self.observations.insert(
            key,
            Observation {
                count: event.count.unwrap_or(1),
                first_timestamp: event.first_timestamp.clone(),
                name: event.metadata.name.clone(),
                resource_version: event.metadata.resource_version.clone(),
                last: now,
            },
        );
        bound(&mut self.observations, self.config.cache_size, |o| o.last);
        result
    }

    /// Upstream `EventSourceObjectSpamFilter.Filter` (negated): takes a token from the
    /// event's source-and-object bucket.
    fn allow(&mut self, event: &Event, now: Instant) -> bool {
        let burst = f64::from(self.config.spam_burst);
        let refill = self.config.spam_refill.as_secs_f64();
        let bucket = self.spam.entry(spam_key(event)).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        if refill > 0.0 {
            let gained = now.duration_since(bucket.at).as_secs_f64() / refill;
            bucket.tokens = (bucket.tokens + gained).min(burst);
        } else {
            bucket.tokens = burst;
        }
        bucket.at = now;
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        bound(&mut self.spam, self.config.cache_size, |b| b.at);
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    fn event(name: &str, reason: &str, message: &str) -> Event {
        Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!("{name}.{message}")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                api_version: Some("v1".into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            count: Some(1),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("node-1".into()),
            }),
            ..Default::default()
        }
    }

    fn created(c: Correlated) -> Event {
        match c {
            Correlated::Create(e) => e,
            other => panic!("expected a create, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeated_event_patches_the_first_with_a_higher_count() {
        let mut c = Correlator::new(Config::default());
        let now = Instant::now();
        let first = created(c.correlate(event("web", "Pulled", "m"), now));
        assert_eq!(first.count, Some(1));
        let mut written = first.clone();
        written.metadata.resource_version = Some("7".into());
        c.update_state(&written, now);
        for expected in 2..=3 {
            match c.correlate(event("web", "Pulled", "m"), now) {
                Correlated::Patch { event, patch } => {
                    assert_eq!(event.count, Some(expected));
                    assert_eq!(event.metadata.name, first.metadata.name);
                    assert_eq!(event.metadata.resource_version.as_deref(), Some("7"));
                    assert_eq!(patch["count"], expected);
                    assert_eq!(patch["message"], "m");
                }
                other => panic!("expected a patch, got {other:?}"),
            }
        }
        // Another message is another event.
        created(c.correlate(event("web", "Pulled", "other"), now));
    }

    #[tokio::test(start_paused = true)]
    async fn ten_similar_events_in_ten_minutes_are_combined() {
        let mut c = Correlator::new(Config {
            spam_burst: 100,
            ..Config::default()
        });
        let now = Instant::now();
        for i in 0..9 {
            let e = created(c.correlate(event("web", "Unhealthy", &format!("m{i}")), now));
            assert_eq!(e.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        let combined = created(c.correlate(event("web", "Unhealthy", "m9"), now));
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert_eq!(combined.reason.as_deref(), Some("Unhealthy"));
        // Further distinct messages patch the combined event.
        match c.correlate(event("web", "Unhealthy", "m10"), now) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.count, Some(2));
                assert_eq!(event.metadata.name, combined.metadata.name);
                assert_eq!(patch["message"], "(combined from similar events): m10");
            }
            other => panic!("expected a patch, got {other:?}"),
        }
        // Another reason is not aggregated with these.
        let other = created(c.correlate(event("web", "Killing", "k"), now));
        assert_eq!(other.message.as_deref(), Some("k"));
        // After the window, counting starts again.
        tokio::time::advance(Duration::from_secs(601)).await;
        let fresh = c.correlate(event("web", "Unhealthy", "m11"), Instant::now());
        assert_eq!(created(fresh).message.as_deref(), Some("m11"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_of_25_per_object_then_one_per_5_minutes() {
        let mut c = Correlator::new(Config::default());
        let now = Instant::now();
        let mut allowed = 0;
        for i in 0..30 {
            // Distinct reasons: no aggregation, only the spam filter.
            if c.correlate(event("web", &format!("R{i}"), "m"), now) != Correlated::Skip {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 25);
        // Another object has its own bucket.
        assert_ne!(c.correlate(event("db", "R0", "m"), now), Correlated::Skip);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(
            c.correlate(event("web", "R40", "m"), Instant::now()),
            Correlated::Skip
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_ne!(
            c.correlate(event("web", "R41", "m"), Instant::now()),
            Correlated::Skip
        );
        assert_eq!(
            c.correlate(event("web", "R42", "m"), Instant::now()),
            Correlated::Skip
        );
    }

    #[test]
    fn caches_stay_bounded() {
        let mut c = Correlator::new(Config {
            cache_size: 3,
            ..Config::default()
        });
        let now = Instant::now();
        for i in 0..10 {
            c.correlate(event(&format!("p{i}"), "Pulled", "m"), now);
        }
        assert!(c.observations.len() <= 3 && c.aggregates.len() <= 3 && c.spam.len() <= 3);
    }
}
