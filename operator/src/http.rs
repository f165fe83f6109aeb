//! The operator's HTTP endpoints: `/metrics`, `/healthz`, `/readyz` — `/metrics` optionally on an
//! address of its own (e.g. loopback, for a scraping sidecar or node agent only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::future::IntoFuture;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::context::Context;

/// State of the endpoints.
pub struct Endpoints {
    /// The reconcile context (for metrics).
    pub ctx: Arc<Context>,
    /// Controllers run (or wait for the lease).
    pub ready: AtomicBool,
}

async fn metrics(State(e): State<Arc<Endpoints>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        e.ctx.metrics.encode(),
    )
}

async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok")
}

async fn readyz(State(e): State<Arc<Endpoints>>) -> impl IntoResponse {
    if e.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// The routes: probes, and `/metrics` unless it is served elsewhere.
pub fn router(endpoints: Arc<Endpoints>, with_metrics: bool) -> Router {
    let probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let app = if with_metrics {
        probes.route("/metrics", get(metrics))
    } else {
        probes
    };
    app.with_state(endpoints)
}

/// Serves the endpoints until the process ends: the probes on `addr`, `/metrics` there too or,
/// with `metrics_addr` (e.g. a loopback address), only there.
pub async fn serve(
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    endpoints: Arc<Endpoints>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let Some(metrics_addr) = metrics_addr else {
        tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
        return axum::serve(listener, router(endpoints, true)).await;
    };
    let metrics_listener = tokio::net::TcpListener::bind(metrics_addr).await?;
    tracing::info!(%addr, %metrics_addr, "serving /healthz, /readyz; /metrics apart");
    let only_metrics = Router::new()
        .route("/metrics", get(metrics))
        .with_state(endpoints.clone());
    tokio::try_join!(
        axum::serve(listener, router(endpoints, false)).into_future(),
        axum::serve(metrics_listener, only_metrics).into_future(),
    )
    .map(|_| ())
}
