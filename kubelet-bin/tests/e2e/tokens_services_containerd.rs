//! Issue 13 acceptances 3 and 5 end to end with every component real: the `kubelet` binary
//! with `--kubeconfig` as `system:node:it-node` (so the Node authorizer and NodeRestriction
//! judge its TokenRequests and its watch of Services) on a private containerd, against a real
//! kube-apiserver + etcd, with the real `kubectl` as the admin.
//!
//! - 3: a pod carrying the projected volume the ServiceAccount admission plugin adds
//!   (`kube-api-access-*`: a 3607-second token, `ca.crt` from the `kube-root-ca.crt`
//!   ConfigMap and the namespace through the downward API) reads a JWT that the API server's
//!   TokenReview accepts as `system:serviceaccount:default:default`, bound to that pod, and
//!   the cluster's CA. (Its refresh before expiry
//!   is tested on the fake API server with a paused clock, `cluster_fake_api.rs`: the real
//!   server's minimum lifetime is 600 s.)
//! - 5: a Service created before the pod shows in the container's environment
//!   (`DB_SERVICE_HOST`, `DB_SERVICE_PORT_PG`, `DB_PORT_5432_TCP…`), with the master
//!   service's `KUBERNETES_SERVICE_HOST`/`_PORT`; with `enableServiceLinks: false` only the
//!   master service's.
//! - 3, refresh (`#[ignore]`d: ten minutes of real time, since the API server's minimum
//!   lifetime is 600 s): a 600-second token in the pod's volume is replaced after 80 % of its
//!   lifetime and before it expires, and the new token is accepted too. Run it with
//!   `cargo test -p kubelet-bin --test e2e tokens_services_containerd:: -- --ignored`.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::{NODE, Node, get_json, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;

/// Where the ServiceAccount admission plugin mounts the kube-api-access volume.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A pod that copies its environment (and, with `token`, the kube-api-access files) into
/// `out` as `<name>-env`, `<name>-token`, `<name>-namespace`, then sleeps.
fn pod_yaml(name: &str, out: &Path, token: bool, service_links: bool) -> String {
    pod_yaml_with_lifetime(name, out, token, service_links, 3607)
}

/// [`pod_yaml`] with the token's `expirationSeconds`.
fn pod_yaml_with_lifetime(
    name: &str,
    out: &Path,
    token: bool,
    service_links: bool,
    expiration_seconds: u32,
) -> String {
    let copy = if token {
        format!(
            " && cp {SA_DIR}/namespace /out/{name}-namespace && cp {SA_DIR}/ca.crt /out/{name}-ca.crt \
             && cp {SA_DIR}/token /out/{name}-token.tmp && mv /out/{name}-token.tmp /out/{name}-token"
        )
    } else {
        String::new()
    };
    let script = format!(
        "env > /out/{name}-env.tmp && mv /out/{name}-env.tmp /out/{name}-env{copy}; sleep 3600"
    );
    let (mount, volume) = if token {
        (
            format!(
                "    - name: kube-api-access-x7k2p\n      mountPath: {SA_DIR}\n      readOnly: true\n"
            ),
            format!(
                "  - name: kube-api-access-x7k2p\n    projected:\n      defaultMode: 420\n      sources:\n      \
             - serviceAccountToken:\n          expirationSeconds: {expiration_seconds}\n          path: token\n      \
             - configMap:\n          name: kube-root-ca.crt\n          items:\n          - key: ca.crt\n            \
             path: ca.crt\n      - downwardAPI:\n          items:\n          - path: namespace\n            fieldRef:\n              \
             apiVersion: v1\n              fieldPath: metadata.namespace\n"
            ),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  serviceAccountName: default\n  enableServiceLinks: {service_links}\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sh\", \"-c\", {script:?}]\n    env:\n    - name: SA\n      valueFrom:\n        \
         fieldRef:\n          fieldPath: spec.serviceAccountName\n    - name: POD_IPS\n      \
         valueFrom:\n        fieldRef:\n          fieldPath: status.podIPs\n    - name: API\n      \
         value: \"https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)\"\n    \
         volumeMounts:\n{mount}    - name: out\n      mountPath: /out\n  volumes:\n{volume}  \
         - name: out\n    hostPath:\n      path: {}\n",
        out.display()
    )
}

/// The value of `name` in an `env` dump.
fn var<'a>(env: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    env.lines().find_map(|l| l.strip_prefix(prefix.as_str()))
}

#[test]
fn a_pod_gets_a_token_the_api_server_accepts_and_the_services_in_its_env() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("tokens");
    let _unmount = support::Unmount(node.dir.join("kubelet"));
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    node.extra_args = vec!["--kubeconfig".into(), kubeconfig.display().to_string()];

    // 5. A Service created before the pod (and before the kubelet: its first list has it).
    kubectl_create(
        &cluster,
        &node,
        "db.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: default\nspec:\n  \
         ports:\n  - name: pg\n    port: 5432\n    protocol: TCP\n",
    );
    let db = get_json(&cluster, &["get", "service", "db"]);
    let db_ip = db["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();
    let master = get_json(&cluster, &["get", "service", "kubernetes"]);
    let api_ip = master["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();
    let api_port = master["spec"]["ports"][0]["port"].to_string();
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );

    kubectl_create(
        &cluster,
        &node,
        "sa.yaml",
        &pod_yaml("sa", &out, true, true),
    );
    kubectl_create(
        &cluster,
        &node,
        "nolinks.yaml",
        &pod_yaml("nolinks", &out, false, false),
    );
    kubectl_wait(&cluster, &node, &["--for=condition=Ready", "pod/sa"], 90);
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/nolinks"],
        90,
    );
    let pod = get_json(&cluster, &["get", "pod", "sa"]);
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    let pod_ip = pod["status"]["podIP"].as_str().expect("podIP").to_owned();

    let env = node.wait_for(Duration::from_secs(30), "the container's env", |_| {
        support::read(&out.join("sa-env"))
    });
    let expect = [
        ("DB_SERVICE_HOST", db_ip.clone()),
        ("DB_SERVICE_PORT", "5432".to_owned()),
        ("DB_SERVICE_PORT_PG", "5432".to_owned()),
        ("DB_PORT", format!("tcp://{db_ip}:5432")),
        ("DB_PORT_5432_TCP", format!("tcp://{db_ip}:5432")),
        ("DB_PORT_5432_TCP_PROTO", "tcp".to_owned()),
        ("DB_PORT_5432_TCP_PORT", "5432".to_owned()),
        ("DB_PORT_5432_TCP_ADDR", db_ip.clone()),
        ("KUBERNETES_SERVICE_HOST", api_ip.clone()),
        ("KUBERNETES_SERVICE_PORT", api_port.clone()),
        ("API", format!("https://{api_ip}:{api_port}")),
        ("SA", "default".to_owned()),
        ("POD_IPS", pod_ip),
    ];
    for (name, value) in &expect {
        assert_eq!(var(&env, name), Some(value.as_str()), "{name} in\n{env}");
    }
    println!("service env of pod sa: DB_SERVICE_HOST={db_ip}, KUBERNETES_SERVICE_HOST={api_ip}");
    let env = node.wait_for(Duration::from_secs(30), "nolinks' env", |_| {
        support::read(&out.join("nolinks-env"))
    });
    assert_eq!(var(&env, "KUBERNETES_SERVICE_HOST"), Some(api_ip.as_str()));
    assert_eq!(var(&env, "DB_SERVICE_HOST"), None, "links off:\n{env}");

    // 3. The token is a JWT that the API server accepts, bound to the pod.
    let token = node.wait_for(Duration::from_secs(30), "the token", |_| {
        support::read(&out.join("sa-token"))
    });
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    assert_eq!(
        support::read(&out.join("sa-namespace")).as_deref(),
        Some("default")
    );
    let ca = std::fs::read_to_string(cluster.ca_file()).expect("the cluster's CA");
    assert_eq!(
        support::read(&out.join("sa-ca.crt")).as_deref(),
        Some(ca.as_str()),
        "ca.crt from the kube-root-ca.crt ConfigMap"
    );
    let (code, review) = cluster
        .admin_request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some(&json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token},
            })),
        )
        .expect("TokenReview");
    assert_eq!(code, 201, "{review}");
    let status = &review["status"];
    assert_eq!(status["authenticated"], true, "{review}");
    assert_eq!(
        status["user"]["username"], "system:serviceaccount:default:default",
        "{review}"
    );
    assert_eq!(
        status["user"]["extra"]["authentication.kubernetes.io/pod-uid"][0],
        uid.as_str(),
        "bound to the pod: {review}"
    );
}

/// The `exp` claim (seconds since the epoch) of a JWT.
fn jwt_expiry(token: &str) -> i64 {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .expect("base64url payload");
    let claims: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON claims");
    claims["exp"].as_i64().expect("exp claim")
}

/// Whether the API server's TokenReview accepts `token` as the pod's service account.
fn accepted(cluster: &Cluster, token: &str) -> bool {
    let (code, review) = cluster
        .admin_request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some(&json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token},
            })),
        )
        .expect("TokenReview");
    code == 201
        && review["status"]["authenticated"] == true
        && review["status"]["user"]["username"] == "system:serviceaccount:default:default"
}

#[test]
#[ignore = "ten minutes of real time: the API server's minimum token lifetime is 600 s"]
fn a_short_lived_token_is_replaced_in_the_volume_before_it_expires() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("token-refresh");
    let _unmount = support::Unmount(node.dir.join("kubelet"));
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    support::join_cluster(&cluster, &mut node);
    kubectl_create(
        &cluster,
        &node,
        "short.yaml",
        &pod_yaml_with_lifetime("short", &out, true, true, 600),
    );
    kubectl_wait(&cluster, &node, &["--for=condition=Ready", "pod/short"], 90);
    let uid = get_json(&cluster, &["get", "pod", "short"])["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    // The file the kubelet writes (the container's view of it is the same bind mount).
    let token_file = node
        .dir
        .join("kubelet/root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~projected/kube-api-access-x7k2p/token");
    let first = node.wait_for(Duration::from_secs(30), "the first token", |_| {
        support::read(&token_file)
    });
    assert!(accepted(&cluster, &first), "the first token is accepted");
    let first_expiry = jwt_expiry(&first);
    // 80 % of 600 s is 480 s; the pod's next periodic sync (1 min) rewrites the volume.
    let second = node.wait_for(Duration::from_secs(600), "a refreshed token", |_| {
        support::read(&token_file).filter(|t| *t != first)
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs();
    let now = i64::try_from(now).expect("seconds fit");
    println!(
        "token replaced {} s before the first one expired",
        first_expiry - now
    );
    assert!(now < first_expiry, "replaced before it expired");
    assert!(
        jwt_expiry(&second) > first_expiry,
        "the new token lives longer"
    );
    assert!(accepted(&cluster, &second), "the new token is accepted");
}
