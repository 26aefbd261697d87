//! Event reasons with upstream's names and values (`pkg/kubelet/events/event.go`), plus
//! the node condition reasons the kubelet records as events
//! (`pkg/kubelet/nodestatus/setters.go`).

// Container event reasons.
/// A container was created.
pub const CREATED_CONTAINER: &str = "Created";
/// A container was started.
pub const STARTED_CONTAINER: &str = "Started";
/// A container could not be created (also image pull failures: same value upstream).
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
/// A container could not be started.
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
/// A container is being stopped.
pub const KILLING_CONTAINER: &str = "Killing";
/// A container is being stopped to make room for a critical pod.
pub const PREEMPT_CONTAINER: &str = "Preempting";
/// A container is inside its restart backoff window (CrashLoopBackOff).
pub const BACK_OFF_START_CONTAINER: &str = "BackOff";
/// A container outlived its grace period.
pub const EXCEEDED_GRACE_PERIOD: &str = "ExceededGracePeriod";

// Pod event reasons.
/// A pod could not be killed.
pub const FAILED_TO_KILL_POD: &str = "FailedKillPod";
/// The pod's cgroup could not be created.
pub const FAILED_TO_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
/// The pod's data directories could not be created.
pub const FAILED_TO_MAKE_POD_DATA_DIRECTORIES: &str = "Failed";
/// The pod network is not ready.
pub const NETWORK_NOT_READY: &str = "NetworkNotReady";

// Image event reasons.
/// An image pull starts.
pub const PULLING_IMAGE: &str = "Pulling";
/// An image was pulled, or is already present.
pub const PULLED_IMAGE: &str = "Pulled";
/// An image pull failed.
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
/// An image could not be inspected, or its reference is invalid.
pub const FAILED_TO_INSPECT_IMAGE: &str = "InspectFailed";
/// The image is absent and its pull policy is `Never`.
pub const ERR_IMAGE_NEVER_PULL_POLICY: &str = "ErrImageNeverPull";
/// A pull is refused inside the image's backoff window.
pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";
/// Some of the pod's image pull secrets could not be read (upstream's literal reason in
/// `getPullSecretsForPod`).
pub const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";

// Kubelet (node) event reasons.
/// The node became Ready.
pub const NODE_READY: &str = "NodeReady";
/// The node became NotReady.
pub const NODE_NOT_READY: &str = "NodeNotReady";
/// The node became schedulable.
pub const NODE_SCHEDULABLE: &str = "NodeSchedulable";
/// The node was cordoned.
pub const NODE_NOT_SCHEDULABLE: &str = "NodeNotSchedulable";
/// The kubelet started.
pub const STARTING_KUBELET: &str = "Starting";
/// The kubelet failed to set itself up.
pub const KUBELET_SETUP_FAILED: &str = "KubeletSetupFailed";
/// A volume could not be mounted.
pub const FAILED_MOUNT_VOLUME: &str = "FailedMount";
/// A volume was mounted.
pub const SUCCESSFUL_MOUNT_VOLUME: &str = "SuccessfulMountVolume";
/// The node rebooted since the kubelet last ran.
pub const NODE_REBOOTED: &str = "Rebooted";
/// The node is shutting down.
pub const NODE_SHUTDOWN: &str = "Shutdown";
/// Container garbage collection failed.
pub const CONTAINER_GC_FAILED: &str = "ContainerGCFailed";
/// Image garbage collection failed.
pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
/// Node allocatable could not be enforced on the pods cgroup.
pub const FAILED_NODE_ALLOCATABLE_ENFORCEMENT: &str = "FailedNodeAllocatableEnforcement";
/// Node allocatable is enforced on the pods cgroup.
pub const SUCCESSFUL_NODE_ALLOCATABLE_ENFORCEMENT: &str = "NodeAllocatableEnforced";
/// The pod's sandbox changed and will be recreated.
pub const SANDBOX_CHANGED: &str = "SandboxChanged";
/// The pod's sandbox could not be created.
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
/// The pod's sandbox status could not be read.
pub const FAILED_STATUS_POD_SANDBOX: &str = "FailedPodSandBoxStatus";

// Node condition transitions (nodestatus setters record these with the condition's reason).
/// MemoryPressure became False.
pub const NODE_HAS_SUFFICIENT_MEMORY: &str = "NodeHasSufficientMemory";
/// MemoryPressure became True.
pub const NODE_HAS_INSUFFICIENT_MEMORY: &str = "NodeHasInsufficientMemory";
/// DiskPressure became False.
pub const NODE_HAS_NO_DISK_PRESSURE: &str = "NodeHasNoDiskPressure";
/// DiskPressure became True.
pub const NODE_HAS_DISK_PRESSURE: &str = "NodeHasDiskPressure";
/// PIDPressure became False.
pub const NODE_HAS_SUFFICIENT_PID: &str = "NodeHasSufficientPID";
/// PIDPressure became True.
pub const NODE_HAS_INSUFFICIENT_PID: &str = "NodeHasInsufficientPID";

// Image manager event reasons.
/// The image filesystem reported an invalid capacity.
pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";
/// Image garbage collection could not free enough space.
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";

// Probe event reasons.
/// A probe failed.
pub const CONTAINER_UNHEALTHY: &str = "Unhealthy";
/// A probe succeeded with a warning.
pub const CONTAINER_PROBE_WARNING: &str = "ProbeWarning";

// Pod worker, config and admission event reasons.
/// A pod sync failed.
pub const FAILED_SYNC: &str = "FailedSync";
/// A pod from a source failed validation.
pub const FAILED_VALIDATION: &str = "FailedValidation";

// Lifecycle hook event reasons.
/// A postStart hook failed (the container is killed).
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
/// A preStop hook failed.
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
