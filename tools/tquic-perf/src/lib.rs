//! tquic-perf: an mvfst-`tperf`-compatible QUIC bulk-transfer tool built on `tquic`, with a
//! live-video mode (`-app live`: crate::live, crate::live_rx).
//! See README.md for usage and output formats.

#[macro_use]
pub mod glog;
pub mod abr;
pub mod cli;
pub mod client;
pub mod encoder;
pub mod error;
pub mod live;
pub mod live_rx;
pub mod livestats;
pub mod net;
pub mod report;
pub mod rtt;
pub mod server;
pub mod udp;
pub mod wire;

pub use cli::{Mode, Opts};
pub use error::PerfError;

/// Runs the tool in the role `opts.mode` says.
pub fn run(opts: Opts) -> anyhow::Result<()> {
    match opts.mode {
        Mode::Server => server::run(&opts),
        Mode::Client => client::run(&opts),
    }
}
