//! Issue 34 item 3 against a real containerd (1.6 here): `--seccomp-default` confines a
//! container without a profile (`Seccomp: 2` in its `/proc/self/status`) and leaves an
//! explicit `Unconfined` alone; an unsafe sysctl allowed by `--allowed-unsafe-sysctls`
//! (`kernel.msg*`) reaches the container's IPC namespace while one outside it is refused
//! (`Failed`, `SysctlForbidden`); a pod asking for AppArmor on a host without it is refused
//! with upstream's reason and message (and runs where AppArmor is on); `hostUsers: false`
//! leaves the pod Pending with `FailedCreatePodSandBox` naming `spec.hostUsers`, since
//! containerd 1.6 reports no user namespace support. The seccomp, SELinux and
//! `supplementalGroupsPolicy` requests themselves are unit-tested in `kubelet-cri`
//! (containerd 1.6 ignores `supplemental_groups_policy`, and SELinux is off here).

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{Node, container_status, log_lines, phase, uid};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn pod(name: &str, extra_spec: &str, annotations: &str, command: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
{extra_spec}  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{command}"]
"#
    )
}

#[test]
fn seccomp_default_unsafe_sysctls_apparmor_and_user_namespaces() {
    let mut node = Node::new("security-profiles");
    node.extra_args.extend([
        "--seccomp-default".to_owned(),
        "--allowed-unsafe-sysctls=kernel.msg*".to_owned(),
    ]);
    node.start_kubelet();
    node.write_manifest(
        "seccomp.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: seccomp
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    sysctls: [{{name: kernel.msgmax, value: "12345"}}]
  containers:
  - name: default
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "grep Seccomp: /proc/self/status; echo msgmax=$(cat /proc/sys/kernel/msgmax)"]
  - name: unconfined
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "grep Seccomp: /proc/self/status"]
    securityContext:
      seccompProfile: {{type: Unconfined}}
"#
        ),
    );
    node.write_manifest(
        "forbidden.yaml",
        &pod(
            "forbidden",
            "  securityContext:\n    sysctls: [{name: kernel.sem, value: \"250 32000 32 128\"}]\n",
            "",
            "sleep 3600",
        ),
    );
    node.write_manifest(
        "apparmor.yaml",
        &pod(
            "apparmor",
            "",
            "container.apparmor.security.beta.kubernetes.io/main: runtime/default",
            "echo confined",
        ),
    );
    node.write_manifest(
        "userns.yaml",
        &pod("userns", "  hostUsers: false\n", "", "sleep 3600"),
    );

    let seccomp = node.wait_for(Duration::from_secs(60), "seccomp Succeeded", |n| {
        n.pod("seccomp").filter(|p| phase(p) == "Succeeded")
    });
    let fields = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let default = log_lines(&node, &seccomp, "default");
    assert_eq!(
        default.first().map(|l| fields(l)),
        Some(vec!["Seccomp:".to_owned(), "2".to_owned()]),
        "seccompDefault: the runtime's default (filter mode): {default:?}"
    );
    assert_eq!(
        default.get(1).map(String::as_str),
        Some("msgmax=12345"),
        "an allowed unsafe sysctl reaches the pod's IPC namespace: {default:?}"
    );
    let unconfined = log_lines(&node, &seccomp, "unconfined");
    assert_eq!(
        unconfined.first().map(|l| fields(l)),
        Some(vec!["Seccomp:".to_owned(), "0".to_owned()]),
        "an explicit Unconfined profile wins: {unconfined:?}"
    );
    let host_msgmax = std::fs::read_to_string("/proc/sys/kernel/msgmax").unwrap_or_default();
    assert_ne!(
        host_msgmax.trim(),
        "12345",
        "the host's own value is untouched"
    );

    let forbidden = node.wait_for(Duration::from_secs(30), "forbidden Failed", |n| {
        n.pod("forbidden").filter(|p| phase(p) == "Failed")
    });
    assert_eq!(forbidden["status"]["reason"], "SysctlForbidden");
    assert_eq!(
        forbidden["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"kernel.sem\" not allowlisted"
    );

    if kubelet_core::apparmor::host_enabled() {
        node.wait_for(Duration::from_secs(30), "apparmor Succeeded", |n| {
            n.pod("apparmor").filter(|p| phase(p) == "Succeeded")
        });
    } else {
        let refused = node.wait_for(Duration::from_secs(30), "apparmor Failed", |n| {
            n.pod("apparmor").filter(|p| phase(p) == "Failed")
        });
        assert_eq!(refused["status"]["reason"], "AppArmor");
        assert_eq!(
            refused["status"]["message"],
            "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
        assert!(
            node.runtime_containers(&uid(&refused)).is_empty(),
            "a rejected pod gets no sandbox"
        );
    }

    // The sandbox failure (the FailedCreatePodSandBox event's message) in the kubelet's log.
    let want = "invalid pod spec: spec.hostUsers: the runtime cannot run the pod in a user namespace: runtime handlers are not set";
    node.wait_for(
        Duration::from_secs(30),
        "FailedCreatePodSandBox for userns",
        |n| n.log().contains(want).then_some(()),
    );
    let userns = node.pod("userns").expect("userns pod listed");
    assert_eq!(phase(&userns), "Pending");
    let waiting =
        container_status(&userns, "main").map(|c| c["state"]["waiting"]["reason"].clone());
    assert_eq!(waiting, Some(Value::from("ContainerCreating")), "{userns}");
    assert!(
        node.runtime_containers(&uid(&userns)).is_empty(),
        "no sandbox"
    );
}
