//! Service-account tokens from the API server (upstream `pkg/kubelet/token/token_manager.go`
//! `getToken`: `CoreV1().ServiceAccounts(ns).CreateToken`, and the request that
//! `pkg/volume/projected/projected.go` builds for a `serviceAccountToken` source).
//!
//! [`ApiTokenSource`] POSTs a `TokenRequest` to `serviceaccounts/<sa>/token` with the
//! audience (none: the API server's), `expirationSeconds` and a `boundObjectRef` to the pod
//! (`v1` `Pod`, name and uid), which is what lets a `system:node` kubelet ask at all: the
//! Node authorizer and NodeRestriction allow only tokens bound to a pod on the node that runs
//! as that service account. A missing service account (404) is `Ok(None)`; transport
//! failures, throttling and server errors are retried a few times with exponential backoff
//! before the error goes back to the volume set-up, which the pod's next sync retries.
//! Caching and refresh are the volume manager's (`kubelet_volumes::token::TokenCache`).
//!
//! In cluster mode the node's object source is
//! [`WithTokens`](kubelet_core::objects::WithTokens) of the configMap/secret source and this.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest as ApiTokenRequest, TokenRequestSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use kubelet_core::objects::{self, ServiceAccountToken, TokenRequest, TokenSource};
use tracing::debug;

use super::client::retryable;

/// How many times a failed TokenRequest is sent before the error is returned.
pub const ATTEMPTS: u32 = 4;
/// The wait after the first failure; doubled after each further one.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// Service-account tokens through the TokenRequest API (see the [module docs](self)).
#[derive(Clone)]
pub struct ApiTokenSource {
    client: kube::Client,
}

impl std::fmt::Debug for ApiTokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTokenSource").finish_non_exhaustive()
    }
}

/// The TokenRequest body of `request` (upstream projected volume's `getServiceAccountToken`
/// arguments).
pub fn token_request(request: &TokenRequest) -> ApiTokenRequest {
    let audiences = if request.audience.is_empty() {
        Vec::new()
    } else {
        vec![request.audience.clone()]
    };
    ApiTokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(request.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(request.pod_name.clone()),
                uid: Some(request.pod_uid.clone()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn to_system_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    let millis = t.0.as_millisecond();
    match u64::try_from(millis) {
        Ok(m) => SystemTime::UNIX_EPOCH + Duration::from_millis(m),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

fn to_objects_error(e: &kube::Error) -> objects::Error {
    if retryable(e) {
        objects::Error::Unavailable(format!("failed to fetch token: {e}"))
    } else {
        objects::Error::Other(format!("failed to fetch token: {e}"))
    }
}

impl ApiTokenSource {
    /// Tokens requested through `client` (the kubelet's main, rate-limited client).
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl TokenSource for ApiTokenSource {
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> objects::Result<Option<ServiceAccountToken>> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &request.namespace);
        let body = token_request(request);
        let mut backoff = INITIAL_BACKOFF;
        let mut attempt = 1;
        let answer = loop {
            match api
                .create_token_request(&request.service_account, &PostParams::default(), &body)
                .await
            {
                Ok(answer) => break answer,
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
                Err(e) if attempt < ATTEMPTS && retryable(&e) => {
                    debug!(
                        namespace = %request.namespace,
                        service_account = %request.service_account,
                        error = %e,
                        "TokenRequest failed; retrying in {backoff:?}"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(to_objects_error(&e)),
            }
        };
        let status = answer.status.unwrap_or_default();
        let Some(token) = status.token.filter(|t| !t.is_empty()) else {
            return Err(objects::Error::Other(
                "failed to fetch token: the TokenRequest answer has no token".into(),
            ));
        };
        Ok(Some(ServiceAccountToken {
            token,
            expiration: status.expiration_timestamp.as_ref().map(to_system_time),
            expiration_seconds: answer.spec.and_then(|s| s.expiration_seconds),
        }))
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
