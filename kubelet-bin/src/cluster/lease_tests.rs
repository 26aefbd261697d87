use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::*;
use crate::cluster::test_api::{self, Journal, status};

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a";
const NODE: &str = "/api/v1/nodes/node-a";

/// A lease store with a readable-or-not Node and scripted failures.
#[derive(Clone, Default)]
struct Server {
    lease: Arc<Mutex<Option<Value>>>,
    version: Arc<AtomicUsize>,
    node_readable: Arc<AtomicBool>,
    fail_creates: Arc<AtomicUsize>,
    conflicts: Arc<AtomicUsize>,
}

impl Server {
    fn start(&self) -> (Controller, Journal) {
        let server = self.clone();
        let (client, journal) = test_api::client(move |call| server.handle(call));
        (
            Controller::new(client, "node-a", Duration::from_secs(40)),
            journal,
        )
    }

    fn handle(&self, call: &test_api::Call) -> (StatusCode, Value) {
        let mut lease = self.lease.lock().expect("lock");
        match (call.method.clone(), call.path.as_str()) {
            (Method::GET, NODE) if self.node_readable.load(Ordering::SeqCst) => (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "node-uid"}}),
            ),
            (Method::GET, NODE) => status(StatusCode::NOT_FOUND, "NotFound"),
            (Method::GET, LEASE) => match &*lease {
                Some(l) => (StatusCode::OK, l.clone()),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            (Method::POST, LEASE_PATH) => {
                if self
                    .fail_creates
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
                }
                *lease = Some(self.stored(call.body.clone()));
                (StatusCode::CREATED, lease.clone().expect("stored"))
            }
            (Method::PUT, LEASE) => {
                if self
                    .conflicts
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                *lease = Some(self.stored(call.body.clone()));
                (StatusCode::OK, lease.clone().expect("stored"))
            }
            _ => status(StatusCode::NOT_FOUND, "NotFound"),
        }
    }

    fn stored(&self, mut lease: Value) -> Value {
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        lease["metadata"]["resourceVersion"] = json!(version.to_string());
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        lease
    }
}

fn calls_after(journal: &Journal, n: usize) -> Vec<String> {
    journal.lines().split_off(n)
}

#[tokio::test(start_paused = true)]
async fn creates_with_an_owner_reference_then_renews_with_puts_only() {
    let server = Server::default();
    server.node_readable.store(true, Ordering::SeqCst);
    let (mut controller, journal) = server.start();
    let token = CancellationToken::new();
    controller.sync(&token).await;
    assert_eq!(
        journal.lines(),
        vec![
            format!("GET {LEASE}"),
            format!("GET {NODE}"),
            format!("POST {LEASE_PATH}")
        ]
    );
    let created = journal.calls()[2].body.clone();
    assert_eq!(created["spec"]["holderIdentity"], "node-a");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 40);
    assert!(created["spec"]["renewTime"].is_string());
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "node-uid");
    assert_eq!(created["metadata"]["ownerReferences"][0]["kind"], "Node");

    for _ in 0..3 {
        controller.sync(&token).await;
    }
    assert_eq!(calls_after(&journal, 3), vec![format!("PUT {LEASE}"); 3]);
    assert_eq!(controller.renew_interval(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn no_lease_until_the_node_is_readable() {
    let server = Server::default();
    let (mut controller, journal) = server.start();
    let token = CancellationToken::new();
    controller.sync(&token).await;
    assert_eq!(
        journal.lines(),
        vec![format!("GET {LEASE}"), format!("GET {NODE}")]
    );
    assert!(server.lease.lock().expect("lock").is_none());
    server.node_readable.store(true, Ordering::SeqCst);
    controller.sync(&token).await;
    assert!(server.lease.lock().expect("lock").is_some());
}

#[tokio::test(start_paused = true)]
async fn create_failures_back_off_200ms_doubling() {
    let server = Server::default();
    server.node_readable.store(true, Ordering::SeqCst);
    server.fail_creates.store(3, Ordering::SeqCst);
    let (mut controller, journal) = server.start();
    let start = tokio::time::Instant::now();
    controller.sync(&CancellationToken::new()).await;
    let lease_gets: Vec<u128> = journal
        .calls()
        .iter()
        .filter(|c| c.method == Method::GET && c.path == LEASE)
        .map(|c| c.at.duration_since(start).as_millis())
        .collect();
    assert_eq!(lease_gets, vec![0, 200, 600, 1400]);
    assert!(server.lease.lock().expect("lock").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_conflict_rereads_the_lease() {
    let server = Server::default();
    server.node_readable.store(true, Ordering::SeqCst);
    let (mut controller, journal) = server.start();
    let token = CancellationToken::new();
    controller.sync(&token).await;
    server.conflicts.store(1, Ordering::SeqCst);
    controller.sync(&token).await;
    assert_eq!(
        calls_after(&journal, 3),
        vec![
            format!("PUT {LEASE}"),
            format!("GET {LEASE}"),
            format!("PUT {LEASE}")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn run_renews_about_every_ten_seconds_and_stops() {
    let server = Server::default();
    server.node_readable.store(true, Ordering::SeqCst);
    let (controller, journal) = server.start();
    let token = CancellationToken::new();
    let task = tokio::spawn(controller.run(token.clone()));
    tokio::time::sleep(Duration::from_secs(35)).await;
    token.cancel();
    task.await.expect("stops");
    let puts: Vec<_> = journal
        .calls()
        .into_iter()
        .filter(|c| c.method == Method::PUT)
        .collect();
    assert_eq!(puts.len(), 3, "{:?}", journal.lines());
    for pair in puts.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            (Duration::from_secs(10)..=Duration::from_millis(10_400)).contains(&gap),
            "{gap:?}"
        );
    }
}
