//! Upstream's tables: `TestFromServices` (`pkg/kubelet/envvars/envvars_test.go`, plus an
//! IPv6 and an SCTP service as upstream's code formats them) and the service cases of
//! `TestMakeEnvironmentVariables` (`pkg/kubelet/kubelet_pods_test.go`).

use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn service(name: &str, namespace: &str, cluster_ip: &str, ports: &[(&str, i32, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip.into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port, protocol)| ServicePort {
                        name: (!name.is_empty()).then(|| (*name).into()),
                        port: *port,
                        protocol: Some((*protocol).into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream `buildService`.
fn build(name: &str, namespace: &str, cluster_ip: &str, port: i32) -> Arc<Service> {
    Arc::new(service(name, namespace, cluster_ip, &[("", port, "TCP")]))
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn from_services_matches_upstream() {
    let services = [
        service("foo-bar", "", "1.2.3.4", &[("", 8080, "TCP")]),
        service(
            "abc-123",
            "",
            "5.6.7.8",
            &[("u-d-p", 8081, "UDP"), ("t-c-p", 8081, "TCP")],
        ),
        service(
            "q-u-u-x",
            "",
            "9.8.7.6",
            &[("", 8082, "TCP"), ("8083", 8083, "TCP")],
        ),
        service("svrc-clusterip-none", "", "None", &[("", 8082, "TCP")]),
        service("svrc-clusterip-empty", "", "", &[("", 8082, "TCP")]),
        service(
            "super-ipv6",
            "",
            "2001:DB8::",
            &[("u-d-p", 8084, "UDP"), ("t-c-p", 8084, "TCP")],
        ),
        service("sctp-1", "", "9.9.9.9", &[("", 7777, "SCTP")]),
    ];
    let refs: Vec<&Service> = services.iter().collect();
    let expected = pairs(&[
        ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
        ("FOO_BAR_SERVICE_PORT", "8080"),
        ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
        ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
        ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
        ("ABC_123_SERVICE_HOST", "5.6.7.8"),
        ("ABC_123_SERVICE_PORT", "8081"),
        ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
        ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
        ("ABC_123_PORT", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
        ("ABC_123_PORT_8081_UDP_PORT", "8081"),
        ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
        ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
        ("ABC_123_PORT_8081_TCP_PORT", "8081"),
        ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
        ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
        ("Q_U_U_X_SERVICE_PORT", "8082"),
        ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
        ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
        ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
        ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
        ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
        ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
        ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
        ("SUPER_IPV6_SERVICE_PORT", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
        ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
        ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
        ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
        ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
        ("SCTP_1_SERVICE_HOST", "9.9.9.9"),
        ("SCTP_1_SERVICE_PORT", "7777"),
        ("SCTP_1_PORT", "sctp://9.9.9.9:7777"),
        ("SCTP_1_PORT_7777_SCTP", "sctp://9.9.9.9:7777"),
        ("SCTP_1_PORT_7777_SCTP_PROTO", "sctp"),
        ("SCTP_1_PORT_7777_SCTP_PORT", "7777"),
        ("SCTP_1_PORT_7777_SCTP_ADDR", "9.9.9.9"),
    ]);
    assert_eq!(from_services(&refs), expected);
}

#[test]
fn a_service_without_ports_or_spec_gives_nothing() {
    let mut no_ports = service("a", "", "1.1.1.1", &[]);
    assert!(from_services(&[&no_ports]).is_empty());
    no_ports.spec = None;
    assert!(from_services(&[&no_ports]).is_empty());
}

/// Upstream `TestMakeEnvironmentVariables`'s services.
fn upstream_services() -> Vec<Arc<Service>> {
    vec![
        build("kubernetes", "default", "1.2.3.1", 8081),
        build("test", "test1", "1.2.3.3", 8083),
        build("kubernetes", "test2", "1.2.3.4", 8084),
        build("test", "test2", "1.2.3.5", 8085),
        build("test", "test2", "None", 8085),
        build("test", "test2", "", 8085),
        build("not-special", "default", "1.2.3.8", 8088),
        build("not-special", "default", "None", 8088),
        build("not-special", "default", "", 8088),
    ]
}

fn vars_of(prefix: &str, ip: &str, port: &str) -> Vec<(String, String)> {
    let url = format!("tcp://{ip}:{port}");
    let p = format!("{prefix}_PORT_{port}_TCP");
    vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_owned()),
        (format!("{prefix}_SERVICE_PORT"), port.to_owned()),
        (format!("{prefix}_PORT"), url.clone()),
        (p.clone(), url),
        (format!("{p}_PROTO"), "tcp".to_owned()),
        (format!("{p}_PORT"), port.to_owned()),
        (format!("{p}_ADDR"), ip.to_owned()),
    ]
}

fn map(parts: Vec<Vec<(String, String)>>) -> BTreeMap<String, String> {
    parts.into_iter().flatten().collect()
}

#[test]
fn service_env_var_map_matches_upstream_cases() {
    let services = upstream_services();
    let kubernetes = || vars_of("KUBERNETES", "1.2.3.1", "8081");
    // "api server = N; kubelet = Y": links off, only the master service.
    assert_eq!(
        service_env_var_map(&services, "test1", false),
        map(vec![kubernetes()])
    );
    // "… service env vars": links on, the namespace's services too.
    assert_eq!(
        service_env_var_map(&services, "test1", true),
        map(vec![vars_of("TEST", "1.2.3.3", "8083"), kubernetes()])
    );
    // "master service in pod ns": links off, the master service of `default`.
    assert_eq!(
        service_env_var_map(&services, "test2", false),
        map(vec![kubernetes()])
    );
    // "master service in pod ns, service env vars": the namespace's `kubernetes` wins; the
    // headless and IP-less `test` are skipped.
    assert_eq!(
        service_env_var_map(&services, "test2", true),
        map(vec![
            vars_of("TEST", "1.2.3.5", "8085"),
            vars_of("KUBERNETES", "1.2.3.4", "8084"),
        ])
    );
    // Whatever the listing order.
    let mut reversed = services.clone();
    reversed.reverse();
    assert_eq!(
        service_env_var_map(&reversed, "test2", true),
        service_env_var_map(&services, "test2", true)
    );
    // "pod in master service ns" without and with links.
    assert_eq!(
        service_env_var_map(&services, "default", false),
        map(vec![kubernetes()])
    );
    assert_eq!(
        service_env_var_map(&services, "default", true),
        map(vec![
            vars_of("NOT_SPECIAL", "1.2.3.8", "8088"),
            kubernetes()
        ])
    );
    // No services: nothing.
    assert!(service_env_var_map(&[], "default", true).is_empty());
}
