//! Tests of the `/containerLogs` helpers: the query, the choice of instance, and a followed
//! log's reader ending when its client goes away.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodStatus,
};
use kubelet_core::logs::LogOptions;
use kubelet_core::runtime::{ContainerLog, MockRuntime};

use super::{container_log_id, decode_query, stream_log};

#[test]
fn the_query_decodes_as_upstreams_parameter_codec() {
    let o =
        decode_query("follow=1&previous=True&timestamps=f&tailLines=3&limitBytes=7&sinceSeconds=9")
            .expect("valid");
    assert!(o.follow && o.previous && !o.timestamps);
    assert_eq!(
        (o.tail_lines, o.limit_bytes, o.since_seconds),
        (Some(3), Some(7), Some(9))
    );
    let o = decode_query("sinceTime=2024-01-01T00%3A00%3A00Z&tail=all&tailLines=4").expect("valid");
    assert_eq!(
        o.since_time,
        Some("2024-01-01T00:00:00Z".parse().expect("time"))
    );
    assert_eq!(o.tail_lines, None, "the legacy tail=all wins");
    assert_eq!(decode_query("tail=5").expect("valid").tail_lines, Some(5));
    assert!(decode_query("follow=yes").is_err());
    assert!(decode_query("sinceTime=yesterday").is_err());
    assert!(decode_query("limitBytes=1.5").is_err());
}

fn status(state: ContainerState, last: Option<&str>) -> PodStatus {
    PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some("containerd://current".into()),
            state: Some(state),
            last_state: last.map(|id| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    container_id: Some(id.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[test]
fn the_instance_is_chosen_as_upstream_validate_container_log_status() {
    let running = ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    };
    let waiting = |reason: &str| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = status(running.clone(), Some("containerd://old"));
    assert_eq!(
        container_log_id("p", &s, "app", false),
        Ok("containerd://current".into())
    );
    assert_eq!(
        container_log_id("p", &s, "app", true),
        Ok("containerd://old".into())
    );
    assert_eq!(
        container_log_id("p", &status(running, None), "app", true),
        Err("previous terminated container \"app\" in pod \"p\" not found".into())
    );
    assert_eq!(
        container_log_id("p", &s, "other", false),
        Err("container \"other\" in pod \"p\" is not available".into())
    );
    // Waiting after a crash: the last instance's log.
    assert_eq!(
        container_log_id(
            "p",
            &status(waiting("CrashLoopBackOff"), Some("containerd://old")),
            "app",
            false
        ),
        Ok("containerd://old".into())
    );
    assert_eq!(
        container_log_id(
            "p",
            &status(waiting("ImagePullBackOff"), None),
            "app",
            false
        ),
        Err(
            "container \"app\" in pod \"p\" is waiting to start: trying and failing to pull image"
                .into()
        )
    );
    assert_eq!(
        container_log_id(
            "p",
            &status(waiting("ContainerCreating"), None),
            "app",
            false
        ),
        Err("container \"app\" in pod \"p\" is waiting to start: ContainerCreating".into())
    );
}

#[tokio::test]
async fn a_followed_log_stops_being_read_when_the_client_goes_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("0.log");
    std::fs::write(&path, "2024-01-01T00:00:00Z stdout F first\n").expect("log");
    let mut runtime = MockRuntime::new();
    // The container runs forever: only the client's departure ends the read.
    runtime.expect_container_log().returning(|_| {
        Ok(ContainerLog {
            path: Default::default(),
            running: true,
        })
    });
    let opts = LogOptions {
        follow: true,
        ..Default::default()
    };
    let (body, reader) = stream_log(path, "c1".into(), opts, Arc::new(runtime));
    let mut data = body.into_data_stream();
    let first = data.next().await.expect("a chunk").expect("data");
    assert_eq!(&first[..], b"first\n");
    drop(data);
    tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the reader ends")
        .expect("no panic");
}
