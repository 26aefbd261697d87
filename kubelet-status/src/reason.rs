//! Reasons the kubelet writes into pod and container statuses, with upstream's spelling.

/// Waiting reason of a container that has not been created yet.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of an app container while the pod's init containers run.
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Terminated reason of a container that vanished or was never seen to exit.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Terminated reason of a container that exited with code 0.
pub const COMPLETED: &str = "Completed";
/// Terminated reason of a container that exited with a non-zero code.
pub const ERROR: &str = "Error";
/// Condition reason: every container has succeeded.
pub const POD_COMPLETED: &str = "PodCompleted";
/// Condition reason: the pod has failed.
pub const POD_FAILED: &str = "PodFailed";
/// Condition reason: a container is not ready.
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
/// Condition reason: an init container has not succeeded.
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
/// Condition reason: a readiness gate's condition is missing or not `True`.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";
