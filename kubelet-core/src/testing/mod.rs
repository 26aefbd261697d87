//! Test utilities behind the `test-util` feature: a stateful [`FakeRuntime`], a
//! [`FakeRuntimeHelper`] and pod fixtures. The mockall mocks of every manager trait
//! (`MockRuntime`, `MockVolumeManager`, `MockStatusManager`, `MockPleg`, `MockSyncHandler`,
//! `MockPodSyncer`, `MockRuntimeHelper`) live next to their traits.

mod fake_runtime;
mod fixtures;

pub use fake_runtime::{backoff_key, Call, FakeRuntime};
pub use fixtures::{pod, pod_with, FakeRuntimeHelper};
