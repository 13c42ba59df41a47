//! Domain errors: each names the bad value and what is allowed.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum HostError {
    #[error("{what} {value:?}: {why}")]
    BadValue {
        what: &'static str,
        value: String,
        why: String,
    },

    #[error("CPU {cpu} is not one this process may run on (allowed: {allowed})")]
    UnknownCpu { cpu: usize, allowed: String },

    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl HostError {
    pub fn bad(what: &'static str, value: &str, why: impl Into<String>) -> Self {
        HostError::BadValue {
            what,
            value: value.to_string(),
            why: why.into(),
        }
    }

    pub fn sys(what: impl Into<String>, source: std::io::Error) -> Self {
        HostError::Sys {
            what: what.into(),
            source,
        }
    }
}
