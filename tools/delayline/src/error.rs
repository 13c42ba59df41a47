//! Domain errors: each names the bad value and what to do about it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum DelaylineError {
    #[error("interface {name:?} does not exist in this network namespace (interfaces here: {available})")]
    NoSuchInterface { name: String, available: String },

    #[error("--iface-a and --iface-b are both {0:?}; give two different interfaces")]
    SameInterface(String),

    #[error("interface {0:?} is down; bring it up first: ip link set {0} up")]
    InterfaceDown(String),

    #[error(
        "opening an AF_PACKET socket was refused ({source}); delayline needs root or CAP_NET_RAW"
    )]
    NotPermitted {
        #[source]
        source: std::io::Error,
    },

    #[error(
        "interface {iface:?} has offloads on ({features}); frames would be merged or lack checksums. \
         Turn them off with: ethtool -K {iface} tx off rx off tso off gso off gro off \
         (on this interface and on its peer), or pass --allow-offload"
    )]
    OffloadOn { iface: String, features: String },

    #[error("{what} on interface {iface:?}")]
    Io {
        what: &'static str,
        iface: String,
        #[source]
        source: std::io::Error,
    },
}
