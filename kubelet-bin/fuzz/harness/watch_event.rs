//! The API watch-event decoder (cluster mode): a watch response's lines as `kube::Client`
//! decodes them (`WatchEvent<Pod>` JSON lines, or a `Status`), through the watcher and the
//! kubelet's `api` pod source (`kubelet::cluster::ApiPodSource`, upstream
//! `config/apiserver.go`) into the pod config merger (`kubelet_core::config::merge`), as in
//! the kubelet. The API server is trusted but not its objects' content, which users write.
//!
//! The input is the body of the pods' watch response; the list before it is empty. Runs on
//! a paused clock until the watcher comes back for a third request (a re-watch or a relist
//! after the stream ended or failed). Checked: no panic, and every `Set` the source sends has
//! distinct pods.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Request, Response};
use kube::client::Body;
use kubelet::cluster::ApiPodSource;
use kubelet_core::config::merge::PodConfig;
use kubelet_core::config::{API_SERVER_SOURCE, PodSource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const EMPTY_LIST: &str =
    r#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}"#;

/// Serves `data` as the pods' watch response to the kubelet's pod source.
pub fn run(data: &[u8]) {
    let _ = pods_seen(data);
}

/// [`run`], returning how many pods the source's sets held in all.
pub fn pods_seen(data: &[u8]) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(watch(Arc::from(data)))
}

async fn watch(body: Arc<[u8]>) -> usize {
    let token = CancellationToken::new();
    let requests = Arc::new(AtomicUsize::new(0));
    let service = {
        let token = token.clone();
        tower::service_fn(move |req: Request<Body>| {
            let n = requests.fetch_add(1, Ordering::SeqCst);
            if n >= 3 {
                token.cancel();
            }
            let watching = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            let body = if watching {
                Body::from(body.to_vec())
            } else {
                Body::from(EMPTY_LIST.as_bytes().to_vec())
            };
            let response = Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(body);
            async move { response }
        })
    };
    let client = kube::Client::new(service, "default");
    let (mut config, mut merged) = PodConfig::new();
    let (sets_tx, mut sets) = mpsc::channel(64);
    let tx = config.channel(API_SERVER_SOURCE);
    let source = Box::new(ApiPodSource::new(client, "fuzz-node"));
    let source = source.run(sets_tx, token.clone());
    // Between the source and the merger: each `Set` the source sends is checked.
    let checked = async move {
        let mut seen = 0;
        while let Some(update) = sets.recv().await {
            seen += update.pods.len();
            let mut keys = BTreeSet::new();
            for pod in &update.pods {
                let key = (pod.metadata.namespace.clone(), pod.metadata.name.clone());
                assert!(keys.insert(key), "a pod twice in one set");
                assert!(pod.metadata.managed_fields.is_none(), "managed fields kept");
            }
            if tx.send(update).await.is_err() {
                break;
            }
        }
        seen
    };
    let merger = config.run(token.clone());
    let drain = async move { while merged.recv().await.is_some() {} };
    let ((), seen, (), ()) = tokio::join!(source, checked, merger, drain);
    seen
}
