//! The journal: every request the fake answered (method, path, query, user agent, body,
//! status, latency), with counters per verb and resource and an event-driven
//! [`Journal::wait_for`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// One answered request.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The HTTP method (`GET`, `PATCH`, …).
    pub method: String,
    /// The request path.
    pub path: String,
    /// The query string, without `?` (`""` if none).
    pub query: String,
    /// The API verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection` (`""` for non-resource paths).
    pub verb: String,
    /// The resource, with the subresource after a slash (`pods`, `pods/status`, `leases`).
    pub resource: String,
    /// The namespace in the path, if any.
    pub namespace: Option<String>,
    /// The object name in the path, if any.
    pub name: Option<String>,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The authenticated user (from the bearer token), if any.
    pub user: Option<String>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The request body.
    pub body: String,
    /// The response status (200 for a watch whose stream started; 0 when the connection was
    /// dropped or never answered).
    pub status: u16,
    /// Time from the request's arrival to the response headers.
    pub latency: Duration,
    /// The client's address: one per connection (a new port is a new connection).
    pub peer: Option<std::net::SocketAddr>,
}

impl Entry {
    /// Whether the entry is `verb` on `resource` (`"pods"` matches only the main endpoint,
    /// `"pods/status"` only the subresource).
    pub fn is(&self, verb: &str, resource: &str) -> bool {
        self.verb == verb && self.resource == resource
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// The journal of a [`super::FakeApiServer`]; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Journal {
    entries: Arc<Mutex<Vec<Entry>>>,
    len: Arc<watch::Sender<usize>>,
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            entries: Arc::default(),
            len: Arc::new(watch::channel(0).0),
        }
    }
}

impl Journal {
    pub(crate) fn record(&self, entry: Entry) {
        let len = {
            let mut e = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            e.push(entry);
            e.len()
        };
        self.len.send_replace(len);
    }

    /// All entries so far, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests were `verb` on `resource` (see [`Entry::is`]).
    pub fn count(&self, verb: &str, resource: &str) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| e.is(verb, resource))
            .count()
    }

    /// Forgets all entries (counters start over).
    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.len.send_replace(0);
    }

    /// Waits until an entry (past or future) satisfies `pred` and returns the first that does.
    /// Event-driven: it wakes on each new entry. Cancel safe. Wrap it in a timeout in tests.
    pub async fn wait_for(&self, pred: impl Fn(&Entry) -> bool) -> Entry {
        let mut rx = self.len.subscribe();
        let mut seen = 0;
        loop {
            {
                let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
                if seen > entries.len() {
                    seen = 0; // cleared meanwhile
                }
                if let Some(e) = entries[seen..].iter().find(|e| pred(e)) {
                    return e.clone();
                }
                seen = entries.len();
                rx.mark_unchanged();
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until `verb` on `resource` has happened `n` times (counting past requests).
    pub async fn wait_for_count(&self, verb: &str, resource: &str, n: usize) {
        let mut rx = self.len.subscribe();
        loop {
            rx.mark_unchanged();
            if self.count(verb, resource) >= n {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(verb: &str, resource: &str) -> Entry {
        Entry {
            method: "GET".into(),
            path: "/".into(),
            query: String::new(),
            verb: verb.into(),
            resource: resource.into(),
            namespace: None,
            name: None,
            user_agent: None,
            user: None,
            content_type: None,
            body: String::new(),
            status: 200,
            latency: Duration::ZERO,
            peer: None,
        }
    }

    #[tokio::test]
    async fn wait_for_wakes_on_a_later_entry_and_counts_split_subresources() {
        let j = Journal::default();
        j.record(entry("patch", "pods"));
        let waiter = tokio::spawn({
            let j = j.clone();
            async move { j.wait_for(|e| e.is("patch", "pods/status")).await }
        });
        tokio::task::yield_now().await;
        j.record(entry("patch", "pods/status"));
        let got = waiter.await.expect("ok");
        assert_eq!(got.resource, "pods/status");
        assert_eq!(j.count("patch", "pods"), 1);
        assert_eq!(j.count("patch", "pods/status"), 1);
        j.wait_for_count("patch", "pods", 1).await;
    }
}
