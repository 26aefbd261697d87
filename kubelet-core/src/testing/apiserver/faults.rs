//! Fault switches, set at run time: which requests misbehave, how, and how many times.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// A way for the fake to misbehave on a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Drop the connection without an answer (the client sees a connection error). For a
    /// refused connection use [`super::FakeApiServer::stop_listening`].
    Refuse,
    /// Accept the request and never answer.
    BlackHole,
    /// Answer `200` headers, then never send the body.
    HeadersThenNothing,
    /// Answer with this HTTP status and a `Status` body (`500`, `503`, …).
    Status(u16),
    /// `429 Too Many Requests` with `Retry-After: retry_after` seconds.
    TooManyRequests {
        /// Seconds for the `Retry-After` header.
        retry_after: u32,
    },
    /// Answer normally after this delay.
    Latency(Duration),
    /// `409 Conflict` (applies to updates and patches unless the filter names a verb).
    Conflict,
    /// `410 Gone`: an `Expired` status for a list, an `ERROR` event for a watch (applies to
    /// lists and watches unless the filter names a verb).
    Gone,
    /// End the watch stream after this many events (applies to watches only).
    CloseWatchAfter(usize),
    /// Send half of the next watch event's line, then cut the connection (watches only).
    CutWatchMidLine,
    /// Restart the server: the history is lost (older resourceVersions are 410 from now on)
    /// and open watches end. The matching request is then answered normally.
    Restart,
}

impl Fault {
    /// The verbs a fault applies to when its filter names none.
    fn default_verbs(&self) -> Option<&'static [&'static str]> {
        match self {
            Self::Conflict => Some(&["update", "patch"]),
            Self::Gone => Some(&["list", "watch"]),
            Self::CloseWatchAfter(_) | Self::CutWatchMidLine => Some(&["watch"]),
            _ => None,
        }
    }
}

/// Which requests a fault applies to; every field left unset matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFilter {
    verb: Option<String>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    user_agent: Option<String>,
}

/// The parts of a request a [`RequestFilter`] looks at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestInfo<'a> {
    pub(crate) verb: &'a str,
    /// `pods` or `pods/status`.
    pub(crate) resource: &'a str,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) user_agent: Option<&'a str>,
}

impl RequestFilter {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Only this verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`).
    #[must_use]
    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Only this resource: `pods` matches the main endpoint and every subresource,
    /// `pods/status` only the subresource.
    #[must_use]
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only this namespace.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only this object name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only requests whose `User-Agent` contains this.
    #[must_use]
    pub fn user_agent(mut self, contains: impl Into<String>) -> Self {
        self.user_agent = Some(contains.into());
        self
    }

    fn matches(&self, fault: &Fault, r: &RequestInfo<'_>) -> bool {
        let verb_ok = match (&self.verb, fault.default_verbs()) {
            (Some(v), _) => v == r.verb,
            (None, Some(vs)) => vs.contains(&r.verb),
            (None, None) => true,
        };
        let resource_ok = self.resource.as_deref().is_none_or(|want| {
            want == r.resource
                || (!want.contains('/') && r.resource.split('/').next() == Some(want))
        });
        verb_ok
            && resource_ok
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| r.namespace == Some(n))
            && self.name.as_deref().is_none_or(|n| r.name == Some(n))
            && self
                .user_agent
                .as_deref()
                .is_none_or(|ua| r.user_agent.is_some_and(|have| have.contains(ua)))
    }
}

#[derive(Debug)]
struct Rule {
    fault: Fault,
    filter: RequestFilter,
    remaining: Option<usize>,
}

/// The fault switches of a [`super::FakeApiServer`].
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
}

impl Faults {
    /// Makes requests matching `filter` fail with `fault`, the next `times` of them (`None`:
    /// until [`Faults::clear`]). Rules apply in the order they were injected; a request gets
    /// the first rule that matches.
    pub fn inject(&self, fault: Fault, filter: RequestFilter, times: Option<usize>) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Rule {
                fault,
                filter,
                remaining: times,
            });
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The fault for this request, if any, using up one of its times.
    pub(crate) fn take(&self, req: &RequestInfo<'_>) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let i = rules
            .iter()
            .position(|r| r.remaining != Some(0) && r.filter.matches(&r.fault, req))?;
        let rule = &mut rules[i];
        let fault = rule.fault.clone();
        if let Some(n) = &mut rule.remaining {
            *n -= 1;
            if *n == 0 {
                rules.remove(i);
            }
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(verb: &'a str, resource: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            verb,
            resource,
            namespace: Some("ns"),
            name: None,
            user_agent: Some("kubelet/1"),
        }
    }

    #[test]
    fn faults_count_down_and_match_defaults_and_subresources() {
        let f = Faults::default();
        f.inject(
            Fault::Conflict,
            RequestFilter::any().resource("pods"),
            Some(2),
        );
        assert_eq!(f.take(&req("get", "pods")), None);
        assert_eq!(f.take(&req("patch", "pods/status")), Some(Fault::Conflict));
        assert_eq!(f.take(&req("update", "pods")), Some(Fault::Conflict));
        assert_eq!(f.take(&req("update", "pods")), None);
        f.inject(
            Fault::Status(500),
            RequestFilter::any()
                .resource("pods/status")
                .user_agent("kubelet"),
            None,
        );
        assert_eq!(f.take(&req("patch", "pods")), None);
        assert_eq!(
            f.take(&req("patch", "pods/status")),
            Some(Fault::Status(500))
        );
        assert_eq!(
            f.take(&req("patch", "pods/status")),
            Some(Fault::Status(500))
        );
        f.clear();
        assert_eq!(f.take(&req("patch", "pods/status")), None);
    }
}
