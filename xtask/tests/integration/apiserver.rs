//! The real kube-apiserver fixture: it starts, the admin's kubeconfig works with kubectl, a
//! node's token authenticates as `system:node:<name>`, and drop kills both processes and removes
//! the directory. Skipped when the binary is not built (unless KUBELET_REQUIRE_APISERVER is set).

use std::{
    env, fs,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context, Result, ensure};
use serde_json::json;
use xtask::apiserver::Cluster;

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|s| !s.starts_with('Z'))
    })
}

/// The pids of processes whose command line mentions `needle`.
fn pids_mentioning(needle: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

#[test]
fn cluster_starts_with_admin_and_node_identities() -> Result<()> {
    let Some(cluster) = Cluster::builder().node("node-a").start_or_skip()? else {
        return Ok(());
    };
    eprintln!("apiserver fixture started in {:.1?}", cluster.started_in());

    // The admin kubeconfig works for kubectl.
    let nodes: serde_json::Value =
        serde_json::from_str(&cluster.kubectl(&["get", "nodes", "-o", "json"])?)?;
    ensure!(
        nodes["items"] == json!([]),
        "a fresh cluster has no nodes: {nodes}"
    );

    // The node's token is system:node:node-a in system:nodes.
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": cluster.node_token("node-a")?},
    });
    let (status, review) = cluster.admin_request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some(&review),
    )?;
    ensure!(status == 201, "TokenReview answered {status}: {review}");
    let user = &review["status"]["user"];
    ensure!(review["status"]["authenticated"] == true, "{review}");
    ensure!(user["username"] == "system:node:node-a", "{review}");
    ensure!(
        user["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:nodes"))),
        "{review}"
    );

    // The Node authorizer alone: no Secret list for a node, but TokenReviews and
    // SubjectAccessReviews (its kubelet API's authn/authz) without any RBAC binding.
    let node_token = cluster.node_token("node-a")?;
    let (status, body) = cluster.request(node_token, "GET", "/api/v1/secrets", None)?;
    ensure!(status == 403, "node-a listing Secrets: {status} {body}");
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": cluster.admin_token()},
    });
    let (status, body) = cluster.request(
        node_token,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some(&review),
    )?;
    ensure!(
        status == 201,
        "node-a creating a TokenReview: {status} {body}"
    );
    ensure!(body["status"]["user"]["username"] == "admin", "{body}");
    let sar = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "admin", "groups": ["system:masters"],
                 "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": "proxy", "name": "node-a"}},
    });
    let (status, body) = cluster.request(
        node_token,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&sar),
    )?;
    ensure!(
        status == 201,
        "node-a creating a SubjectAccessReview: {status} {body}"
    );
    ensure!(body["status"]["allowed"] == true, "{body}");

    // What a controller-manager would have created.
    let (status, sa) = cluster.admin_request(
        "GET",
        "/api/v1/namespaces/default/serviceaccounts/default",
        None,
    )?;
    ensure!(status == 200, "default ServiceAccount: {status} {sa}");
    let (status, cm) = cluster.admin_request(
        "GET",
        "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
        None,
    )?;
    ensure!(status == 200, "kube-root-ca.crt: {status} {cm}");
    ensure!(
        cm["data"]["ca.crt"]
            .as_str()
            .is_some_and(|ca| ca.contains("BEGIN CERTIFICATE")),
        "{cm}"
    );
    // The service-account keys sign tokens (TokenRequest as the admin).
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 600},
    });
    let (status, token) = cluster.admin_request(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        Some(&request),
    )?;
    ensure!(status == 201, "TokenRequest: {status} {token}");
    let sa_token = token["status"]["token"].as_str().unwrap_or_default();
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": sa_token},
    });
    let (status, review) = cluster.admin_request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some(&review),
    )?;
    ensure!(
        status == 201,
        "TokenReview of the SA token: {status} {review}"
    );
    ensure!(
        review["status"]["user"]["username"] == "system:serviceaccount:default:default",
        "{review}"
    );
    ensure!(
        cluster.node_token("node-b").is_err(),
        "an unknown node has no token"
    );

    // Drop kills etcd and kube-apiserver and removes the directory.
    let dir = cluster.dir().to_path_buf();
    let needle = dir.to_string_lossy().into_owned();
    let pids = pids_mentioning(&needle);
    ensure!(pids.len() == 2, "etcd and kube-apiserver run: {pids:?}");
    drop(cluster);
    ensure!(
        pids.iter().all(|pid| !alive(*pid)),
        "processes left: {pids:?}"
    );
    ensure!(!dir.exists(), "{} is left", dir.display());
    Ok(())
}

#[test]
fn bind_node_group_lets_nodes_read_every_secret() -> Result<()> {
    let Some(cluster) = Cluster::builder()
        .node("node-a")
        .bind_node_group()
        .start_or_skip()?
    else {
        return Ok(());
    };
    // RBAC's system:node role lets the node read every Secret, which the Node authorizer alone
    // denies (see above): why the binding is opt-in.
    let node_token = cluster.node_token("node-a")?;
    let (status, body) = cluster.request(node_token, "GET", "/api/v1/secrets", None)?;
    ensure!(
        status == 200,
        "node-a listing Secrets with the binding: {status} {body}"
    );
    Ok(())
}

/// Set in the child process of [`a_cluster_whose_test_process_died_is_reaped`].
const HOLD_ENV: &str = "XTASK_APISERVER_HOLD";

#[test]
#[ignore = "a helper: a_cluster_whose_test_process_died_is_reaped runs it in a child process"]
fn hold_a_cluster_until_killed() -> Result<()> {
    if env::var_os(HOLD_ENV).is_none() {
        return Ok(());
    }
    let cluster = Cluster::builder().start()?;
    println!("DIR {}", cluster.dir().display());
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn a_cluster_whose_test_process_died_is_reaped() -> Result<()> {
    if xtask::apiserver::cached_binary().is_none() {
        // Let the fixture say why (or fail under KUBELET_REQUIRE_APISERVER).
        ensure!(Cluster::builder().start_or_skip()?.is_none());
        return Ok(());
    }
    let mut child = Command::new(env::current_exe()?)
        .args([
            "--ignored",
            "--exact",
            // libtest's name of the test: this module's path without the crate's name.
            &format!(
                "{}::hold_a_cluster_until_killed",
                module_path!().split_once("::").map_or("", |(_, m)| m)
            ),
            "--nocapture",
        ])
        .env(HOLD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let dir = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("DIR ").map(PathBuf::from));
    child.kill()?; // SIGKILL: no drop runs
    child.wait()?;
    let dir = dir.context("the child printed no cluster directory")?;
    let pids = pids_mentioning(&format!("{}/", dir.display()));
    ensure!(
        pids.len() == 2,
        "the orphan's etcd and kube-apiserver: {pids:?}"
    );

    let cluster = Cluster::builder().start()?;
    ensure!(
        pids.iter().all(|pid| !alive(*pid)),
        "orphans left: {pids:?}"
    );
    ensure!(!dir.exists(), "{} is left", dir.display());
    drop(cluster);
    Ok(())
}
