//! Environment and security-context acceptance against a real containerd (issue 3,
//! acceptance 5 and 7): `$(VAR)` expansion, `$$` escapes, `fieldRef` and `resourceFieldRef`
//! values as a container prints them in its log; `runAsUser`/`runAsGroup`/groups,
//! capabilities, `readOnlyRootFilesystem`, `no_new_privs` and a safe sysctl as a container
//! observes them; `runAsNonRoot` with a root image → `CreateContainerConfigError` with
//! upstream's message; an unsafe sysctl → the pod is rejected (`Failed`, `SysctlForbidden`).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::{Node, container_status, log_lines, phase, uid};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn succeeded(node: &Node, name: &str) -> Value {
    node.wait_for(Duration::from_secs(30), &format!("{name} Succeeded"), |n| {
        n.pod(name).filter(|p| phase(p) == "Succeeded")
    })
}

#[test]
fn env_values_are_expanded_and_resolved_as_upstream() {
    let node = Node::start("env-sec-env");
    node.write_manifest(
        "env.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: envs
  namespace: team-a
  labels: {{app: web}}
  annotations: {{owner: core}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "for a in \"$@\"; do echo \"arg=$a\"; done; env | grep '^E_' | sort", "sh"]
    args: ["$(E_GREETING)", "$$(E_GREETING)", "$(E_MISSING)", "$(E_POD_NAME)@$(E_POD_IP)"]
    resources:
      requests: {{cpu: 250m, memory: 32Mi}}
      limits: {{memory: 64Mi}}
    env:
    - {{name: E_GREETING, value: hello}}
    - {{name: E_COMPOSED, value: "$(E_GREETING)-world"}}
    - {{name: E_ESCAPED, value: "$$(E_GREETING) costs $5"}}
    - {{name: E_FORWARD, value: "$(E_LATER)"}}
    - {{name: E_LATER, value: later}}
    - {{name: E_POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: E_POD_NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: E_POD_UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: E_APP, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app']"}}}}}}
    - {{name: E_OWNER, valueFrom: {{fieldRef: {{fieldPath: "metadata.annotations['owner']"}}}}}}
    - {{name: E_NODE_NAME, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: E_HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
    - {{name: E_POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: E_POD_IPS, valueFrom: {{fieldRef: {{fieldPath: status.podIPs}}}}}}
    - {{name: E_URL, value: "http://$(E_POD_IP):8080/$(E_POD_NAME)"}}
    - {{name: E_CPU_REQUEST_M, valueFrom: {{resourceFieldRef: {{resource: requests.cpu, divisor: 1m}}}}}}
    - {{name: E_MEMORY_REQUEST, valueFrom: {{resourceFieldRef: {{resource: requests.memory}}}}}}
    - {{name: E_MEMORY_LIMIT_MI, valueFrom: {{resourceFieldRef: {{containerName: main, resource: limits.memory, divisor: 1Mi}}}}}}
    - {{name: E_CPU_LIMIT_M, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}}}
"#
        ),
    );
    let pod = succeeded(&node, "envs");
    let ip = pod["status"]["podIP"].as_str().unwrap_or("").to_owned();
    assert!(ip.starts_with("10."), "the sandbox's IP: {ip:?}");
    let pod_uid = uid(&pod);
    // No limits.cpu: node allocatable, i.e. this machine's CPUs.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut want: Vec<String> = vec![
        "arg=hello".into(),
        "arg=$(E_GREETING)".into(),
        "arg=$(E_MISSING)".into(),
        format!("arg=envs-it-node@{ip}"),
    ];
    let mut env = vec![
        "E_APP=web".to_owned(),
        "E_COMPOSED=hello-world".into(),
        format!("E_CPU_LIMIT_M={}", cpus * 1000),
        "E_CPU_REQUEST_M=250".into(),
        "E_ESCAPED=$(E_GREETING) costs $5".into(),
        "E_FORWARD=$(E_LATER)".into(),
        "E_GREETING=hello".into(),
        "E_HOST_IP=192.0.2.10".into(),
        "E_LATER=later".into(),
        "E_MEMORY_LIMIT_MI=64".into(),
        format!("E_MEMORY_REQUEST={}", 32 * 1024 * 1024),
        "E_NODE_NAME=it-node".into(),
        "E_OWNER=core".into(),
        format!("E_POD_IP={ip}"),
        format!("E_POD_IPS={ip}"),
        "E_POD_NAME=envs-it-node".into(),
        "E_POD_NAMESPACE=team-a".into(),
        format!("E_POD_UID={pod_uid}"),
        format!("E_URL=http://{ip}:8080/envs-it-node"),
    ];
    env.sort();
    want.extend(env);
    assert_eq!(log_lines(&node, &pod, "main"), want);
}

#[test]
fn security_context_reaches_the_container() {
    let node = Node::start("env-sec-sec");
    node.write_manifest(
        "sec.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: secure
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    supplementalGroups: [4000]
    sysctls: [{{name: net.ipv4.ip_unprivileged_port_start, value: "100"}}]
  containers:
  - name: user
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo uid=$(id -u); echo gid=$(id -g); echo groups=$(id -G); if touch /probe 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi; grep NoNewPrivs /proc/self/status"]
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
  - name: caps
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo uid=$(id -u); grep CapEff /proc/self/status; if touch /probe 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi; grep NoNewPrivs /proc/self/status; echo port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)"]
    securityContext:
      runAsUser: 0
      capabilities: {{drop: [ALL], add: [NET_ADMIN]}}
"#
        ),
    );
    node.write_manifest(
        "unsafe-sysctl.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: unsafe-sysctl
spec:
  securityContext:
    sysctls: [{{name: kernel.msgmax, value: "65536"}}]
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#
        ),
    );
    node.write_manifest(
        "nonroot.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: nonroot
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#
        ),
    );

    let pod = succeeded(&node, "secure");
    let user = log_lines(&node, &pod, "user");
    assert_eq!(user[..2], ["uid=1000", "gid=3000"], "{user:?}");
    let groups: BTreeSet<&str> = user[2]
        .strip_prefix("groups=")
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        groups,
        BTreeSet::from(["2000", "3000", "4000"]),
        "runAsGroup, fsGroup and supplementalGroups: {user:?}"
    );
    assert_eq!(user[3], "rootfs=ro", "{user:?}");
    assert_eq!(
        user[4].split_whitespace().collect::<Vec<_>>(),
        ["NoNewPrivs:", "1"]
    );

    let caps = log_lines(&node, &pod, "caps");
    assert_eq!(caps[0], "uid=0", "{caps:?}");
    assert_eq!(
        caps[1].split_whitespace().collect::<Vec<_>>(),
        ["CapEff:", "0000000000001000"],
        "only CAP_NET_ADMIN (bit 12) is left: {caps:?}"
    );
    assert_eq!(caps[2], "rootfs=rw", "{caps:?}");
    assert_eq!(
        caps[3].split_whitespace().collect::<Vec<_>>(),
        ["NoNewPrivs:", "0"],
        "allowPrivilegeEscalation unset: {caps:?}"
    );
    assert_eq!(caps[4], "port_start=100", "a safe sysctl is set: {caps:?}");

    let rejected = node.wait_for(Duration::from_secs(30), "unsafe-sysctl Failed", |n| {
        n.pod("unsafe-sysctl").filter(|p| phase(p) == "Failed")
    });
    assert_eq!(rejected["status"]["reason"], "SysctlForbidden");
    assert_eq!(
        rejected["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
    );
    assert!(
        node.runtime_containers(&uid(&rejected)).is_empty(),
        "a rejected pod gets no sandbox"
    );

    let (pod, message) = node.wait_for(
        Duration::from_secs(30),
        "nonroot CreateContainerConfigError",
        |n| {
            let pod = n.pod("nonroot")?;
            let w = &container_status(&pod, "main")?["state"]["waiting"];
            (w["reason"] == "CreateContainerConfigError")
                .then(|| w["message"].as_str().unwrap_or("").to_owned())
                .map(|m| (pod, m))
        },
    );
    assert_eq!(
        message,
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot-it-node_default({})\", container: main)",
            uid(&pod)
        )
    );
    assert_eq!(phase(&pod), "Pending");
}
