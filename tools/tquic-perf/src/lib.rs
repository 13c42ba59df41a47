//! tquic-perf: an mvfst-`tperf`-compatible QUIC bulk-transfer tool built on `tquic`.
//! See README.md for usage and output formats.

#[macro_use]
pub mod glog;
pub mod cli;
pub mod client;
pub mod error;
pub mod net;
pub mod report;
pub mod rtt;
pub mod server;
pub mod udp;

pub use cli::{Mode, Opts};
pub use error::PerfError;

/// Runs the tool in the role `opts.mode` says.
pub fn run(opts: Opts) -> anyhow::Result<()> {
    match opts.mode {
        Mode::Server => server::run(&opts),
        Mode::Client => client::run(&opts),
    }
}
