//! The fetcher's HTTP endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::replicator::Handles;

/// Longest silence of the replication loop before `/healthz` fails.
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(60);

async fn metrics(State(h): State<Arc<Handles>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

async fn healthz(State(h): State<Arc<Handles>>) -> impl IntoResponse {
    if h.health.is_alive(LIVENESS_WINDOW) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "replication loop stalled")
    }
}

async fn readyz(State(h): State<Arc<Handles>>) -> impl IntoResponse {
    if h.health.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// The router serving the endpoints.
pub fn router(handles: Handles) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(handles))
}

/// Serves the endpoints on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, handles: Handles) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, router(handles)).await
}
