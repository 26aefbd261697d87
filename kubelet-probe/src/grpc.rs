//! gRPC probes (upstream `pkg/probe/grpc`): `grpc.health.v1.Health/Check` with the probe's
//! service name; `SERVING` is success, anything else (or an RPC error) a failure.

use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

use crate::prober::Outcome;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    /// The service to check; empty for the server as a whole.
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    /// `ServingStatus`: 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `ServingStatus::SERVING`.
pub const SERVING: i32 = 1;

fn status_name(s: i32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "INVALID",
    }
}

/// Calls `Health/Check` on `host:port` for `service`, all within `timeout`.
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = crate::http::join_host_port(host, port);
    match tokio::time::timeout(timeout, check(&addr, service, timeout)).await {
        Ok(o) => o,
        Err(_) => Outcome::failure(format!(
            "timeout: health rpc did not complete within {timeout:?}"
        )),
    }
}

async fn check(addr: &str, service: &str, timeout: Duration) -> Outcome {
    let endpoint = match Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.connect_timeout(timeout),
        Err(e) => return Outcome::failure(format!("invalid address {addr}: {e}")),
    };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            return Outcome::failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout:?}: {e}"
            ));
        }
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        return Outcome::failure(format!("service {addr:?} not ready: {e}"));
    }
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    match grpc.unary(req, path, codec).await {
        Ok(resp) if resp.get_ref().status == SERVING => Outcome::success(String::new()),
        Ok(resp) => Outcome::failure(format!(
            "service unhealthy (responded with {:?})",
            status_name(resp.get_ref().status)
        )),
        Err(s) if s.code() == tonic::Code::Unimplemented => Outcome::failure(format!(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        )),
        Err(s) => Outcome::failure(format!(
            "health rpc failed: {:?}: {}",
            s.code(),
            s.message()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serving_and_not_serving() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("shop", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("cart", tonic_health::ServingStatus::NotServing)
            .await;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
        );
        let t = Duration::from_secs(2);
        let o = probe("127.0.0.1", port, "shop", t).await;
        assert!(o.success, "{o:?}");
        // The empty service is the server as a whole (SERVING by default).
        assert!(probe("127.0.0.1", port, "", t).await.success);
        let o = probe("127.0.0.1", port, "cart", t).await;
        assert!(!o.success && o.output.contains("NOT_SERVING"), "{o:?}");
        let o = probe("127.0.0.1", port, "nope", t).await;
        assert!(!o.success, "{o:?}");
        reporter
            .set_service_status("cart", tonic_health::ServingStatus::Serving)
            .await;
        assert!(probe("127.0.0.1", port, "cart", t).await.success);
    }

    #[tokio::test]
    async fn refused_is_failure() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        drop(l);
        let o = probe("127.0.0.1", port, "", Duration::from_secs(1)).await;
        assert!(
            !o.success && o.output.contains("failed to connect"),
            "{o:?}"
        );
    }
}
