//! Waiting reasons reported in [`crate::runtime::ContainerSyncError::reason`], as
//! upstream's `pkg/kubelet/container/sync_result.go` and `pkg/kubelet/images/types.go` name
//! them (they end up in `containerStatuses[].state.waiting.reason`).

/// The container is inside its restart backoff window.
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
/// The image could not be pulled.
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
/// A recent pull of the image failed; waiting for its backoff window to end.
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
/// The image is absent and the pull policy is `Never`.
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
/// The image reference cannot be used.
pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
/// The runtime could not tell whether the image is present.
pub const IMAGE_INSPECT_ERROR: &str = "ImageInspectError";
/// The runtime helper could not produce env/mounts, or the log directory failed.
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
/// `CreateContainer` failed.
pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
/// `StartContainer` failed.
pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";
/// Upstream `ErrPostStartHook`: the postStart hook failed (the container is killed).
pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";
/// The kill reason of a container whose postStart hook failed (upstream's event reason).
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
