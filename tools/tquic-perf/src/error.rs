//! Domain errors: each message names the value or peer and what happened.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve { host: String, reason: String },

    #[error("cannot reach {addr}: {cause}")]
    Unreachable {
        addr: SocketAddr,
        cause: std::io::Error,
    },

    #[error("no QUIC server answered at {addr} within {timeout_ms} ms (handshake timeout)")]
    HandshakeTimeout { addr: SocketAddr, timeout_ms: u64 },

    #[error(
        "server {addr} went silent: no packets for {timeout_ms} ms (idle timeout) \
         after {bytes} bytes, {elapsed_s:.3} s into a {duration_s} s transfer"
    )]
    PeerVanished {
        addr: SocketAddr,
        timeout_ms: u64,
        bytes: u64,
        elapsed_s: f64,
        duration_s: f64,
    },

    #[error("server {addr} closed the connection after {bytes} bytes, before the {duration_s} s transfer ended ({reason})")]
    ClosedEarly {
        addr: SocketAddr,
        bytes: u64,
        duration_s: f64,
        reason: String,
    },

    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        addr: SocketAddr,
        cause: std::io::Error,
    },

    #[error("TLS setup failed: {0}")]
    Tls(String),

    #[error("QUIC error: {0}")]
    Quic(String),

    #[error(transparent)]
    Refused(#[from] crate::udp::Refused),
}
