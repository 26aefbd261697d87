//! Watch streams: one JSON event per line (`{"type":…,"object":…}`), replayed from the
//! store's history after the requested resourceVersion, filtered by the selectors (an object
//! entering the selection is `ADDED`, one leaving it `DELETED`), with `BOOKMARK`s,
//! `timeoutSeconds` and `410 Expired` as an `ERROR` event (mirrors
//! `k8s.io/apiserver/pkg/storage/cacher` and `endpoints/handlers/watch.go`).

use std::io;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Shared;
use super::resource::Gvr;
use super::selectors::Selectors;
use super::status::ApiError;
use super::store::{Change, EventType};

/// The sending half of a streamed response body.
pub(crate) type FrameTx = mpsc::Sender<Result<Frame<Bytes>, io::Error>>;

/// What a watch request asked for, and the faults that apply to it.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub(crate) gvr: Gvr,
    pub(crate) namespace: Option<String>,
    pub(crate) selectors: Selectors,
    /// `resourceVersion`; `None` (or 0) starts with the current objects as `ADDED`.
    pub(crate) since: Option<u64>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) bookmarks: bool,
    /// Fault: end the stream after this many events.
    pub(crate) close_after: Option<usize>,
    /// Fault: cut the next event mid-line.
    pub(crate) cut_mid_line: bool,
    /// Fault: answer with a 410 `ERROR` event.
    pub(crate) gone: bool,
}

fn line(ty: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": ty, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

struct Sink {
    tx: FrameTx,
    sent: usize,
    close_after: Option<usize>,
    cut_mid_line: bool,
}

impl Sink {
    /// Sends an event; `false` when the stream must end (client gone or a fault).
    async fn event(&mut self, ty: &str, object: &Value) -> bool {
        let data = line(ty, object);
        if self.cut_mid_line {
            let half = data.slice(..data.len() / 2);
            let _ = self.tx.send(Ok(Frame::data(half))).await;
            let _ = self
                .tx
                .send(Err(io::Error::other("injected fault: watch cut mid-line")))
                .await;
            return false;
        }
        if self.tx.send(Ok(Frame::data(data))).await.is_err() {
            return false;
        }
        if ty != "BOOKMARK" {
            self.sent += 1;
        }
        self.close_after.is_none_or(|n| self.sent < n)
    }
}

/// How a change looks through the selectors: `None` if the watcher does not see it.
fn through_selectors(c: &Change, sel: &Selectors) -> Option<&'static str> {
    let old = c.old.as_ref().is_some_and(|o| sel.matches(o));
    let new = sel.matches(&c.object);
    match c.ty {
        EventType::Added => new.then_some("ADDED"),
        EventType::Deleted => (old || new).then_some("DELETED"),
        EventType::Modified => match (old, new) {
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (true, true) => Some("MODIFIED"),
            (false, false) => None,
        },
    }
}

/// Streams the watch into `tx` until the client leaves, the timeout passes, the server
/// restarts or a fault ends it.
pub(crate) async fn run(shared: Arc<Shared>, req: WatchRequest, tx: FrameTx) {
    let mut sink = Sink {
        tx,
        sent: 0,
        close_after: req.close_after,
        cut_mid_line: req.cut_mid_line,
    };
    if req.close_after == Some(0) {
        return;
    }
    let mut changed = shared.changed.subscribe();
    let ns = req.namespace.as_deref();
    let start = {
        let store = shared.store.lock().unwrap_or_else(PoisonError::into_inner);
        changed.mark_unchanged();
        let since = req.since.filter(|rv| *rv != 0);
        match since {
            Some(rv) if req.gone || rv < store.floor() => Err(ApiError::expired(rv, store.floor())),
            None if req.gone => Err(ApiError::expired(0, store.floor())),
            Some(rv) => Ok((rv, store.epoch(), Vec::new())),
            None => Ok((
                store.rv(),
                store.epoch(),
                store.list(&req.gvr, ns, &req.selectors),
            )),
        }
    };
    let (mut cursor, epoch, initial) = match start {
        Ok(start) => start,
        Err(e) => {
            sink.event("ERROR", &e.to_status()).await;
            return;
        }
    };
    for obj in &initial {
        if !sink.event("ADDED", obj).await {
            return;
        }
    }
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let interval = *shared
        .bookmark_interval
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut bookmark = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        let (changes, rv) = {
            let store = shared.store.lock().unwrap_or_else(PoisonError::into_inner);
            changed.mark_unchanged();
            if store.epoch() != epoch {
                return; // restarted: the client reconnects and learns its rv is gone
            }
            match store.changes_since(cursor) {
                Ok(c) => (c, store.rv()),
                Err(_) => return,
            }
        };
        for c in changes
            .iter()
            .filter(|c| c.gvr == req.gvr && ns.is_none_or(|n| n == c.namespace))
        {
            if let Some(ty) = through_selectors(c, &req.selectors)
                && !sink.event(ty, &c.object).await
            {
                return;
            }
        }
        cursor = cursor.max(rv);
        tokio::select! {
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() => return,
            _ = bookmark.tick(), if req.bookmarks => {
                let obj = json!({
                    "kind": req.gvr.kind(),
                    "apiVersion": req.gvr.api_version(),
                    "metadata": {"resourceVersion": cursor.to_string()},
                });
                if !sink.event("BOOKMARK", &obj).await {
                    return;
                }
            }
            r = changed.changed() => if r.is_err() { return },
            () = sink.tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(ty: EventType, old: Option<&str>, new: &str) -> Change {
        let pod = |node: &str| json!({"spec": {"nodeName": node}});
        Change {
            rv: 1,
            gvr: Gvr {
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
            },
            namespace: "ns".into(),
            ty,
            object: pod(new),
            old: old.map(pod),
            at: tokio::time::Instant::now(),
        }
    }

    #[test]
    fn objects_entering_and_leaving_the_selection_are_added_and_deleted() {
        let sel = Selectors {
            fields: super::super::selectors::FieldSelector::parse("spec.nodeName=n1").expect("ok"),
            ..Default::default()
        };
        let see = |c: Change| through_selectors(&c, &sel);
        assert_eq!(
            see(change(EventType::Modified, Some(""), "n1")),
            Some("ADDED")
        );
        assert_eq!(
            see(change(EventType::Modified, Some("n1"), "n2")),
            Some("DELETED")
        );
        assert_eq!(
            see(change(EventType::Modified, Some("n1"), "n1")),
            Some("MODIFIED")
        );
        assert_eq!(see(change(EventType::Modified, Some("n2"), "n3")), None);
        assert_eq!(see(change(EventType::Added, None, "n2")), None);
        assert_eq!(
            see(change(EventType::Deleted, Some("n1"), "n1")),
            Some("DELETED")
        );
    }
}
