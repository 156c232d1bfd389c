//! Connections: the accept loop, with the limits `axum::serve` does not set.
//!
//! A client that opens connections and sends headers a byte at a time
//! (slowloris) would otherwise hold a task and a socket forever: every
//! connection here must finish its request head within
//! [`HEADER_READ_TIMEOUT`] (idle keep-alive connections included), at most
//! [`MAX_CONNECTIONS`] are served at once, and on shutdown open connections
//! finish their request and close.

use std::future::Future;
use std::net::SocketAddr;
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

/// The two ends of a TCP connection, a request extension: a login looks
/// up who owns the far end ([`crate::shared::peer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    /// The daemon's end.
    pub local: SocketAddr,
    /// The client's end.
    pub peer: SocketAddr,
}

/// A connection that may know its two ends.
pub trait Addressed {
    /// Its ends, for TCP.
    fn ends(&self) -> Option<Ends>;
}

impl Addressed for tokio::net::TcpStream {
    fn ends(&self) -> Option<Ends> {
        Some(Ends {
            local: self.local_addr().ok()?,
            peer: self.peer_addr().ok()?,
        })
    }
}

impl Addressed for tokio::net::UnixStream {
    fn ends(&self) -> Option<Ends> {
        None
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open
/// connections finish their request (the caller bounds how long).
pub async fn serve<L>(mut listener: L, router: Router, shutdown: impl Future<Output = ()>)
where
    L: Listener,
    L::Io: Addressed,
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
        // Each request of the connection carries its ends (`Option<Ends>`).
        let service = TowerToHyperService::new(tower_layer::Layer::layer(
            &axum::Extension(io.ends()),
            router.clone(),
        ));
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
