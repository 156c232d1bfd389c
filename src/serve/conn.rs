//! Connections: the accept loop, with the limits `axum::serve` does not set.
//!
//! A client that opens connections and sends headers a byte at a time
//! (slowloris) would otherwise hold a task and a socket forever: every
//! connection here must finish its request head within
//! [`HEADER_READ_TIMEOUT`] (idle keep-alive connections included), at most
//! [`MAX_CONNECTIONS`] are served at once, and on shutdown open connections
//! finish their request and close.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

/// Time a connection has to send a whole request head, and how long an idle
/// keep-alive connection stays open.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections served at once; further ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 512;

/// Largest request head, in bytes (hyper's read buffer).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves `router` on `listener` until `shutdown` completes, then lets open
/// connections finish their request (the caller bounds how long).
pub async fn serve<L>(mut listener: L, router: Router, shutdown: impl Future<Output = ()>)
where
    L: Listener,
{
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        // axum's Listener retries transient accept errors (EMFILE) itself.
        let (io, _) = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
