//! `FaultProxy` between `RemoteRuntime` and `FakeCriServer`: calls pass through byte for byte,
//! and each fault (latency, gRPC status, dropped connection, stall) shows up in the client as
//! the runtime error the pod engine retries.

use std::path::Path;
use std::time::Duration;

use kubelet_core::runtime::{Error, Runtime};
use kubelet_cri::fake::FakeCriServer;
use kubelet_cri::testing::{Fault, FaultProxy};
use kubelet_cri::{Options, RemoteRuntime};

struct Env {
    dir: tempfile::TempDir,
    server: FakeCriServer,
    proxy: FaultProxy,
    rt: RemoteRuntime,
}

async fn setup(request_timeout: Duration) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
    let proxy = FaultProxy::start(&dir.path().join("proxy.sock"), server.socket_path())
        .await
        .expect("proxy");
    let rt = kubelet_cri::connect(
        &proxy.endpoint(),
        Options::default().with_request_timeout(request_timeout),
    )
    .expect("connect");
    Env {
        dir,
        server,
        proxy,
        rt,
    }
}

fn is_deadline(err: &Error) -> bool {
    matches!(err, Error::Runtime { message, .. } if message.contains("deadline exceeded"))
}

#[tokio::test]
async fn forwards_calls_and_counts_them() {
    let env = setup(Duration::from_secs(10)).await;
    let version = env.rt.version().await.expect("version through the proxy");
    assert_eq!(version.runtime_name, "fake-cri");
    assert!(env.rt.get_pods(true).await.expect("pods").is_empty());
    assert_eq!(env.proxy.count("Version"), 1);
    assert_eq!(env.server.cri().count("Version"), 1);
    assert!(env.proxy.count("ListPodSandbox") >= 1);
    assert_eq!(
        u64::try_from(env.server.cri().count("ListContainers")).expect("count"),
        env.proxy.count("ListContainers")
    );
    env.proxy.shutdown().await;
}

#[tokio::test]
async fn injected_statuses_are_the_clients_errors_and_never_reach_the_runtime() {
    let env = setup(Duration::from_secs(10)).await;
    env.proxy.set("Version", Fault::unavailable());
    let err = env.rt.version().await.expect_err("unavailable");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());

    env.proxy.set("Version", Fault::deadline_exceeded());
    let err = env.rt.version().await.expect_err("deadline");
    assert!(is_deadline(&err), "{err:?}");
    assert!(err.is_retryable());

    env.proxy.set("Version", Fault::internal());
    let err = env.rt.version().await.expect_err("internal");
    assert!(
        matches!(err, Error::Runtime { op: "Version", ref message } if message.contains("injected")),
        "{err:?}"
    );

    // every other method is forwarded meanwhile
    assert!(env.rt.get_pods(true).await.is_ok());
    assert_eq!(env.server.cri().count("Version"), 0);
    assert_eq!(env.proxy.count("Version"), 3);

    env.proxy.clear("Version");
    assert!(env.rt.version().await.is_ok());
    assert_eq!(env.server.cri().count("Version"), 1);

    env.proxy.set_every_method(Fault::unavailable());
    assert!(env.rt.get_pods(true).await.is_err());
    env.proxy.clear_all();
    assert!(env.rt.get_pods(true).await.is_ok());
    env.proxy.shutdown().await;
}

#[tokio::test]
async fn latency_beyond_the_request_timeout_is_a_deadline_error() {
    let env = setup(Duration::from_millis(300)).await;
    env.proxy
        .set("Version", Fault::Latency(Duration::from_millis(20)));
    assert!(env.rt.version().await.is_ok());
    env.proxy
        .set("Version", Fault::Latency(Duration::from_secs(30)));
    let err = env.rt.version().await.expect_err("too slow");
    assert!(is_deadline(&err), "{err:?}");
    env.proxy.shutdown().await;
}

#[tokio::test]
async fn a_stalled_method_times_out_without_blocking_the_others_and_resumes_when_cleared() {
    let env = setup(Duration::from_millis(300)).await;
    env.proxy.set("ListContainers", Fault::Stall);
    let err = env.rt.get_pods(true).await.expect_err("stalled");
    assert!(is_deadline(&err), "{err:?}");
    assert!(err.is_retryable());
    assert!(env.rt.version().await.is_ok(), "other methods still answer");
    assert_eq!(env.server.cri().count("ListContainers"), 0);
    while env.proxy.abandoned("ListContainers") < 1 {
        // the client's reset reaches the proxy after the client returned
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(env.proxy.abandoned("Version"), 0);

    // a call stalled with a long deadline goes through once the stall is lifted
    let slow = kubelet_cri::connect(
        &env.proxy.endpoint(),
        Options::default().with_request_timeout(Duration::from_secs(60)),
    )
    .expect("connect");
    let stalled = tokio::spawn(async move { slow.get_pods(true).await });
    while env.proxy.count("ListContainers") < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!stalled.is_finished());
    env.proxy.clear("ListContainers");
    let pods = stalled.await.expect("join").expect("released");
    assert!(pods.is_empty());
    assert_eq!(env.server.cri().count("ListContainers"), 1);
    assert_eq!(env.proxy.abandoned("ListContainers"), 1);
    env.proxy.shutdown().await;
}

#[tokio::test]
async fn a_dropped_connection_is_unavailable_and_the_client_reconnects() {
    let env = setup(Duration::from_secs(10)).await;
    assert!(env.rt.version().await.is_ok());
    env.proxy.set("Version", Fault::DropConnection);
    let err = env.rt.version().await.expect_err("dropped");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    env.proxy.clear("Version");
    assert!(env.rt.version().await.is_ok(), "reconnected");

    env.proxy.drop_connections();
    let after = reconnect(&env.rt).await;
    assert!(after <= 1, "{after} failed calls before reconnecting");
    env.proxy.shutdown().await;
}

/// Calls `version` until it succeeds; how many failed (a call racing the close may fail).
async fn reconnect(rt: &RemoteRuntime) -> u32 {
    let mut failed = 0;
    while let Err(e) = rt.version().await {
        assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
        failed += 1;
        assert!(failed < 5, "no reconnection after {failed} calls");
    }
    failed
}

#[tokio::test]
async fn a_restarted_runtime_is_redialled() {
    let env = setup(Duration::from_secs(10)).await;
    assert!(env.rt.version().await.is_ok());
    let dir: &Path = env.dir.path();
    let state = env.server.shutdown().await;
    let err = env.rt.version().await.expect_err("runtime down");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let server = FakeCriServer::start_with(dir, state)
        .await
        .expect("restart");
    assert!(env.rt.version().await.is_ok(), "proxy redials the runtime");
    assert_eq!(server.cri().count("Version"), 2);
    env.proxy.shutdown().await;
    server.shutdown().await;
}
