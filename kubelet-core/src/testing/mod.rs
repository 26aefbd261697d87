//! Test utilities behind the `test-util` feature: a stateful [`FakeRuntime`] (the pod
//! engine over the scriptable backend [`FakeRuntimeService`]), a [`FakeRuntimeHelper`] and
//! pod fixtures. The mockall mocks of every manager trait
//! (`MockRuntime`, `MockVolumeManager`, `MockStatusManager`, `MockPleg`, `MockSyncHandler`,
//! `MockPodSyncer`, `MockRuntimeHelper`) live next to their traits. [`apiserver`] is an
//! in-process fake Kubernetes API server reached by a real `kube::Client`.

#[cfg(feature = "test-util")]
pub mod apiserver;
mod events;
mod fake_managers;
mod fake_pleg;
mod fake_runtime;
mod fake_service;
mod fixtures;

pub use crate::kuberuntime::actions::backoff_key;
pub use events::{CollectingRecorder, RecordedEvent};
pub use fake_managers::{FakeStatusManager, FakeVolumeManager};
pub use fake_pleg::FakePleg;
pub use fake_runtime::{Call, FakeRuntime};
pub use fake_service::{
    FakeRuntimeService, FakeSandbox, STOPPED_EXIT_CODE, ServiceCall, ServiceOp, UNAUTHORIZED,
};
pub use fixtures::{
    FakeRuntimeHelper, container_with_resources, pod, pod_of, pod_with, resource_list,
};
