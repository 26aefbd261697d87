//! The secure port's auth filter (upstream `pkg/kubelet/server/server.go`
//! `InstallAuthFilter`), in front of every route:
//!
//! - not authenticated → `401` `Unauthorized`;
//! - an attribute set allowed → the route;
//! - a review failed → `500` `Authorization error (user=…, verb=…, resource=…, subresource=…)`;
//! - none allowed → `403` `Forbidden (user=…, verb=…, resource=nodes, subresource(s)=[pods
//!   proxy])` and a newline.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::authn::Authenticator;
use super::authz::{self, Attributes, Authorizer, Decision};
use super::listener::Peer;

/// What the filter needs: the node's name, the authenticator and the authorizer (upstream
/// `KubeletAuth`).
#[derive(Debug)]
pub struct KubeletAuth {
    /// The node's name (the `nodes` object requests are authorized on).
    pub node_name: String,
    /// Who the request is from.
    pub authenticator: Authenticator,
    /// What it may do.
    pub authorizer: Authorizer,
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The 401 response.
pub(crate) fn unauthorized() -> Response {
    text(StatusCode::UNAUTHORIZED, "Unauthorized".into())
}

/// The 403 response for these attribute sets (they differ only by subresource).
pub(crate) fn forbidden(attrs: &[Attributes]) -> Response {
    let subresources: Vec<&str> = attrs.iter().map(|a| a.subresource).collect();
    let (user, verb) = attrs
        .first()
        .map_or(("", ""), |a| (a.user.name.as_str(), a.verb));
    text(
        StatusCode::FORBIDDEN,
        format!(
            "Forbidden (user={user}, verb={verb}, resource={}, subresource(s)=[{}])\n",
            Attributes::RESOURCE,
            subresources.join(" ")
        ),
    )
}

fn authorization_error(attrs: &Attributes) -> Response {
    text(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            "Authorization error (user={}, verb={}, resource={}, subresource={})",
            attrs.user.name,
            attrs.verb,
            Attributes::RESOURCE,
            attrs.subresource
        ),
    )
}

/// The middleware: authenticates, authorizes, then runs the route.
pub(crate) async fn auth_filter(
    State(auth): State<Arc<KubeletAuth>>,
    mut request: Request,
    next: Next,
) -> Response {
    let certificates = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(peer)| peer.certificates.clone())
        .unwrap_or_else(|| Arc::from([]));
    let user = match auth
        .authenticator
        .authenticate(&certificates, request.headers_mut())
        .await
    {
        Ok(Some(user)) => user,
        Ok(None) => return unauthorized(),
        Err(e) => {
            tracing::info!(error = %e, "unable to authenticate the request");
            return unauthorized();
        }
    };
    let attrs = authz::request_attributes(
        &auth.node_name,
        &user,
        request.method(),
        request.uri().path(),
    );
    for attr in &attrs {
        match auth.authorizer.authorize(attr).await {
            Ok(Decision::Allow) => return next.run(request).await,
            Ok(Decision::Deny | Decision::NoOpinion) => {}
            Err(e) => {
                tracing::error!(error = %e, user = %attr.user.name, verb = attr.verb, subresource = attr.subresource, "authorization error");
                return authorization_error(attr);
            }
        }
    }
    tracing::debug!(user = %user.name, path = request.uri().path(), "forbidden");
    forbidden(&attrs)
}
