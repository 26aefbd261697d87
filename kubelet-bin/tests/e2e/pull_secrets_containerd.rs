//! Issue 13 acceptance 4 with every component real: the `kubelet` binary (cluster mode, as
//! `system:node:it-node` under the Node authorizer and NodeRestriction) on a private
//! containerd, a real kube-apiserver, and a registry on loopback that requires a password
//! (`docker-registry` with htpasswd, `xtask::registry`). A pod with pull policy Always and an
//! `imagePullSecrets` entry whose secret does not exist yet fails with ErrImagePull, then
//! ImagePullBackOff, with the registry's refusal in the message; once the admin creates the
//! secret with `kubectl create secret docker-registry`, the image is pulled with its
//! credentials and the pod runs.
//!
//! The service account's `imagePullSecrets` reach the pod as upstream: the ServiceAccount
//! admission plugin copies them into a pod that names none, and the kubelet pulls with them.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::time::{Duration, Instant};

use support::{NODE, Node, get_json, kubectl_create, kubectl_wait, waiting};
use xtask::apiserver::Cluster;
use xtask::registry::Registry;

#[test]
fn image_pull_secrets_against_a_registry_that_requires_a_password() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("pull-secrets");
    let registry =
        Registry::start(&node.dir.join("registry"), "alice", "s3cret").expect("registry starts");
    let image = registry
        .push_busybox("private/busybox:latest")
        .expect("busybox pushed");
    support::join_cluster(&cluster, &mut node);

    // Pull policy Always (the `latest` tag's default, set explicitly) and a pull secret the
    // admin has not created yet.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: private\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n  imagePullSecrets:\n  - name: regcred\n  \
         containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Always\n    \
         command: [\"sleep\", \"3600\"]\n"
    );
    kubectl_create(&cluster, &node, "private.yaml", &pod);

    // ErrImagePull, then ImagePullBackOff, each with the registry's 401 in the message.
    let mut seen: Vec<(String, String)> = Vec::new();
    node.wait_for(
        Duration::from_secs(60),
        "ErrImagePull then ImagePullBackOff in the API",
        |_| {
            let p = get_json(&cluster, &["get", "pod", "private"]);
            if let Some(w) = waiting(&p, "app")
                && seen.last() != Some(&w)
            {
                println!("waiting: {w:?}");
                seen.push(w);
            }
            let reasons: Vec<&str> = seen.iter().map(|(r, _)| r.as_str()).collect();
            let pull = reasons.iter().position(|r| *r == "ErrImagePull")?;
            reasons[pull..].contains(&"ImagePullBackOff").then_some(())
        },
    );
    for (reason, message) in &seen {
        if reason == "ErrImagePull" || reason == "ImagePullBackOff" {
            assert!(
                message.contains("401 Unauthorized"),
                "{reason}: the registry's refusal is in the message: {message}"
            );
        }
    }
    let events = cluster
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=private",
        ])
        .expect("events");
    println!("{events}");
    assert!(
        events.contains("FailedToRetrieveImagePullSecret"),
        "the missing secret is reported: {events}"
    );

    // The admin creates the secret; the next pull after the backoff carries the credentials.
    let created = Instant::now();
    cluster
        .kubectl(&[
            "create",
            "secret",
            "docker-registry",
            "regcred",
            &format!("--docker-server={}", registry.host()),
            "--docker-username=alice",
            "--docker-password=s3cret",
        ])
        .expect("kubectl create secret docker-registry");
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/private"],
        120,
    );
    println!(
        "pod Ready {:?} after the secret was created",
        created.elapsed()
    );
    let p = get_json(&cluster, &["get", "pod", "private"]);
    assert_eq!(p["status"]["phase"], "Running", "{p}");
    assert!(
        p["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .is_some_and(|id| id.contains("sha256:")),
        "{p}"
    );
    let log = registry.log();
    assert!(
        log.contains("auth.user.name=alice") || log.contains("auth.user.name=\"alice\""),
        "the registry served alice: {}",
        log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_service_accounts_pull_secrets_are_used_through_admission() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .service_account_admission()
        .start_or_skip()
        .expect("kube-apiserver starts")
    else {
        return;
    };
    let mut node = Node::new("sa-pull-secrets");
    let registry =
        Registry::start(&node.dir.join("registry"), "bob", "hunter2").expect("registry starts");
    let image = registry
        .push_busybox("team/busybox:latest")
        .expect("busybox pushed");
    cluster
        .kubectl(&[
            "create",
            "secret",
            "docker-registry",
            "teamcred",
            &format!("--docker-server={}", registry.host()),
            "--docker-username=bob",
            "--docker-password=hunter2",
        ])
        .expect("kubectl create secret docker-registry");
    // No token Secret exists (no controller-manager), so nothing may ask admission to mount one.
    kubectl_create(
        &cluster,
        &node,
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: puller\n  namespace: default\n\
         automountServiceAccountToken: false\nimagePullSecrets:\n- name: teamcred\n",
    );
    support::join_cluster(&cluster, &mut node);
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: team\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  serviceAccountName: puller\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Always\n    \
         command: [\"sleep\", \"3600\"]\n"
    );
    kubectl_create(&cluster, &node, "team.yaml", &pod);
    let p = get_json(&cluster, &["get", "pod", "team"]);
    assert_eq!(
        p["spec"]["imagePullSecrets"][0]["name"], "teamcred",
        "admission copied the service account's pull secrets: {p}"
    );
    kubectl_wait(&cluster, &node, &["--for=condition=Ready", "pod/team"], 90);
    let log = registry.log();
    assert!(
        log.contains("auth.user.name=bob") || log.contains("auth.user.name=\"bob\""),
        "the registry served bob: {}",
        log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
}
