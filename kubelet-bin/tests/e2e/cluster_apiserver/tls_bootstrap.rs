//! TLS bootstrap and client certificate rotation against the real kube-apiserver: a node with
//! only a bootstrap token (user `bootstrap-node-b` in `system:bootstrappers`, bound to
//! ClusterRole `system:node-bootstrapper`) requests its client certificate; the test approves
//! the request as the admin and signs it with the CA the server trusts (`--client-ca-file`),
//! as kube-controller-manager would. The node then registers as `system:node:node-b` with
//! that certificate, renews it through a second request (made with the certificate itself)
//! before it expires, and keeps renewing its Lease after the first certificate's expiry. With
//! `serverTLSBootstrap` the node also requests its serving certificate (signer
//! `kubernetes.io/kubelet-serving`), which its secure port then serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use futures::TryStreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt as _, watcher};
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet::cluster::certificate::{Bootstrap, Rotation, Store, bootstrap::Outcome};
use kubelet::server::SecureOptions;
use kubelet_core::testing::FakeRuntime;
use rcgen::{CertificateSigningRequestParams, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use xtask::apiserver::Cluster;

use crate::support::api::{bound_pod, client, config};

const NODE: &str = "node-b";
const BOOTSTRAP_USER: &str = "bootstrap-node-b";
/// The first certificate's lifetime: short, so that it is renewed within the test.
const FIRST_LIFETIME: Duration = Duration::from_secs(30);

/// Unix time as rcgen's date.
fn date(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    time::OffsetDateTime::UNIX_EPOCH
        .saturating_add(time::Duration::seconds(i64::try_from(secs).unwrap_or(0)))
}

/// Approves (as the admin, through `/approval`) and signs with `issuer` every new request;
/// the first certificate lives [`FIRST_LIFETIME`], the later ones an hour.
async fn approve_and_sign(admin: kube::Client, issuer: Arc<Issuer<'static, KeyPair>>) {
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let mut stream = std::pin::pin!(
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    let mut signed = 0;
    while let Ok(Some(mut csr)) = stream.try_next().await {
        if csr.status.as_ref().is_some_and(|s| s.conditions.is_some()) {
            continue;
        }
        let Some(name) = csr.metadata.name.clone() else {
            continue;
        };
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("E2eApproved".into()),
                message: Some("approved by the e2e test".into()),
                ..CertificateSigningRequestCondition::default()
            }]),
            certificate: None,
        });
        let Ok(mut approved) = api
            .replace_subresource("approval", &name, &PostParams::default(), &csr)
            .await
        else {
            continue;
        };
        let Ok(request) = String::from_utf8(csr.spec.request.0.clone()) else {
            continue;
        };
        let Ok(mut params) = CertificateSigningRequestParams::from_pem(&request) else {
            continue;
        };
        let now = SystemTime::now();
        let serving = csr.spec.signer_name == "kubernetes.io/kubelet-serving";
        let lifetime = if signed == 0 && !serving {
            FIRST_LIFETIME
        } else {
            Duration::from_secs(3600)
        };
        params.params.not_before = date(now - Duration::from_secs(1));
        params.params.not_after = date(now + lifetime);
        params.params.extended_key_usages = vec![if serving {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let Ok(cert) = params.signed_by(&issuer) else {
            continue;
        };
        if !serving {
            signed += 1;
        }
        if let Some(status) = approved.status.as_mut() {
            status.certificate = Some(ByteString(cert.pem().into_bytes()));
        }
        let _ = api
            .replace_status(&name, &PostParams::default(), &approved)
            .await;
    }
}

/// Whether the secure port at `addr` serves a certificate for 127.0.0.1 that verifies against
/// the CA file `ca`.
async fn served_by(addr: std::net::SocketAddr, ca: &Path) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    let Ok(ca) = rustls::pki_types::CertificateDer::from_pem_file(ca) else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(ca).is_err() {
        return false;
    }
    let Ok(builder) = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions() else {
        return false;
    };
    let config = builder.with_root_certificates(roots).with_no_client_auth();
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let Ok(name) = rustls::pki_types::ServerName::try_from("127.0.0.1") else {
        return false;
    };
    let handshake = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
    matches!(
        tokio::time::timeout(Duration::from_secs(10), handshake).await,
        Ok(Ok(_))
    )
}

/// The bootstrap kubeconfig: the server, its CA, the bootstrap token.
fn write_bootstrap_kubeconfig(cluster: &Cluster, path: &Path) -> Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": cluster.url(), "certificate-authority": cluster.ca_file()}}],
        "users": [{"name": "bootstrap", "user": {"token": cluster.user_token(BOOTSTRAP_USER)?}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "bootstrap"}}],
        "current-context": "e2e",
    });
    std::fs::write(path, serde_json::to_string_pretty(&config)?)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_bootstraps_its_client_certificate_and_renews_it() -> Result<()> {
    let work = tempfile::tempdir()?;
    let pki_dir = work.path().join("client-ca");
    let pki = xtask::apiserver::write_client_pki(&pki_dir, "/CN=e2e-client-ca", "/CN=unused")?;
    let ca_arg = format!("--client-ca-file={}", pki.ca.display());
    let Some(cluster) = tokio::task::spawn_blocking(move || {
        Cluster::builder()
            .user(BOOTSTRAP_USER, &["system:bootstrappers"])
            .apiserver_arg(ca_arg)
            .start_or_skip()
    })
    .await??
    else {
        return Ok(());
    };
    let admin = client(cluster.admin_kubeconfig()).await?;
    // RBAC: bootstrappers may create CSRs (kubeadm's kubeadm:kubelet-bootstrap binding).
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "e2e:kubelet-bootstrap"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:bootstrappers"}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    let ca_key = KeyPair::from_pem(&std::fs::read_to_string(pki_dir.join("ca.key"))?)?;
    let issuer = Issuer::from_ca_cert_pem(&std::fs::read_to_string(&pki.ca)?, ca_key)?;
    let signer = tokio::spawn(approve_and_sign(admin.clone(), Arc::new(issuer)));

    // The TLS bootstrap, as the binary runs it before the node starts.
    let bootstrap_kubeconfig = work.path().join("bootstrap-kubelet.conf");
    write_bootstrap_kubeconfig(&cluster, &bootstrap_kubeconfig)?;
    let kubeconfig = work.path().join("kubelet.conf");
    let cert_dir: PathBuf = work.path().join("pki");
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        Bootstrap::new(&kubeconfig, &bootstrap_kubeconfig, &cert_dir, NODE).load_client_cert(),
    )
    .await
    .context("bootstrap within 60 s")??;
    let Outcome::Issued(first) = outcome else {
        anyhow::bail!("expected a new certificate: {outcome:?}");
    };
    assert!(cert_dir.join("kubelet-client-current.pem").exists());

    // The node, with the written kubeconfig and rotation on.
    let root = tempfile::tempdir()?;
    let mut node = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name(NODE)
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(root.path())
        .no_probes()
        .secure_server(SecureOptions::new("127.0.0.1:0".parse()?, &cert_dir))
        .cluster(
            ClusterOptions::new(config(&kubeconfig).await?)
                .node_lease_duration(Duration::from_secs(4))
                .rotate_client_certificate(Rotation::client(&cert_dir, NODE))
                .rotate_serving_certificate(Rotation::serving(&cert_dir, NODE)),
        )
        .build()
        .await?;
    let secure_addr = node.secure_addr().context("secure port")?;
    node.spawn().await;

    // Registered (the Node authorizer lets system:node:node-b create only node-b).
    let nodes: Api<Node> = Api::all(admin.clone());
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(nodes, NODE, |n: Option<&Node>| n.is_some()),
    )
    .await
    .with_context(|| format!("the Node within 20 s; server log:\n{}", cluster.log_tail()))??;

    // Renewed before the first certificate expires, through a request the node made itself.
    let store = Store::client(&cert_dir);
    let renew_by = first.not_after;
    loop {
        let current = store.current()?.context("a current pair")?;
        if current.not_after > first.not_after {
            assert!(SystemTime::now() < renew_by, "renewed after the expiry");
            break;
        }
        anyhow::ensure!(
            SystemTime::now() < renew_by,
            "no renewal before the first certificate expired"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let csrs = Api::<CertificateSigningRequest>::all(admin.clone())
        .list(&Default::default())
        .await?
        .items;
    let mut client_users: Vec<String> = csrs
        .iter()
        .filter(|c| c.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet")
        .filter_map(|c| c.spec.username.clone())
        .collect();
    client_users.sort();
    assert_eq!(
        client_users,
        vec![BOOTSTRAP_USER.to_owned(), format!("system:node:{NODE}")]
    );
    // The serving certificate: requested by the node itself, served by the secure port.
    let serving: Vec<&CertificateSigningRequest> = csrs
        .iter()
        .filter(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving")
        .collect();
    assert_eq!(serving.len(), 1, "{csrs:?}");
    assert_eq!(
        serving[0].spec.username.as_deref(),
        Some(format!("system:node:{NODE}").as_str())
    );
    assert!(
        served_by(secure_addr, &pki.ca).await,
        "the secure port serves the certificate signed by the cluster's signer"
    );

    // After the first certificate's expiry the node still renews its Lease: the clients use
    // the new certificate.
    let expired_at =
        k8s_openapi::jiff::Timestamp::try_from(first.not_after + Duration::from_secs(2))?;
    while SystemTime::now() < first.not_after + Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    tokio::time::timeout(
        Duration::from_secs(15),
        await_condition(leases, NODE, move |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref())
                .and_then(|s| s.renew_time.as_ref())
                .is_some_and(|t| t.0 > expired_at)
        }),
    )
    .await
    .with_context(|| {
        format!(
            "a Lease renewal after the old certificate's expiry; server log:\n{}",
            cluster.log_tail()
        )
    })??;
    // A pod bound after the expiry runs and its status reaches the API: the main client's
    // writes (pods/status) authenticate with the new certificate too.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &bound_pod("after-expiry", NODE))
        .await?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(pods, "after-expiry", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                == Some("Running")
        }),
    )
    .await
    .context("the pod Running in the API after the old certificate's expiry")??;
    signer.abort();
    Ok(())
}
