//! Startup check that the offloads which break a raw-socket bridge are off.
//!
//! With tx checksum offload on, frames reach a packet socket before their checksum is
//! filled in; with TSO/GSO/GRO on, several wire frames arrive as one super-frame larger
//! than the MTU. Either way the frames delayline forwards would be wrong or unsendable.

use crate::error::DelaylineError;
use crate::sys;

/// The offloads checked, as (ethtool's name, legacy ethtool ioctl command).
pub const CHECKED: [(&str, u32); 4] = [
    ("tx-checksumming", sys::ETHTOOL_GTXCSUM),
    ("tcp-segmentation-offload", sys::ETHTOOL_GTSO),
    ("generic-segmentation-offload", sys::ETHTOOL_GGSO),
    ("generic-receive-offload", sys::ETHTOOL_GGRO),
];

/// Names of the features that are on; unsupported queries (`None`) count as off.
pub fn enabled(states: &[(&'static str, Option<bool>)]) -> Vec<&'static str> {
    states
        .iter()
        .filter(|(_, on)| *on == Some(true))
        .map(|(name, _)| *name)
        .collect()
}

/// Queries the interface and returns the offloads that are on.
pub fn enabled_on(iface: &str) -> Result<Vec<&'static str>, DelaylineError> {
    let mut states = Vec::with_capacity(CHECKED.len());
    for (name, cmd) in CHECKED {
        states.push((name, sys::ethtool_get(iface, cmd)?));
    }
    Ok(enabled(&states))
}

/// Fails with the exact ethtool command if any checked offload is on.
pub fn require_off(iface: &str) -> Result<(), DelaylineError> {
    let on = enabled_on(iface)?;
    if on.is_empty() {
        Ok(())
    } else {
        Err(DelaylineError::OffloadOn {
            iface: iface.to_string(),
            features: on.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_features_that_are_on() {
        let s = [
            ("tx-checksumming", Some(true)),
            ("tcp-segmentation-offload", Some(false)),
            ("generic-segmentation-offload", None),
            ("generic-receive-offload", Some(true)),
        ];
        assert_eq!(
            enabled(&s),
            vec!["tx-checksumming", "generic-receive-offload"]
        );
        assert!(enabled(&s[1..3]).is_empty());
    }

    #[test]
    fn error_names_interface_and_command() {
        let e = DelaylineError::OffloadOn {
            iface: "ld12ab34da".into(),
            features: "generic-receive-offload".into(),
        }
        .to_string();
        assert!(e.contains("\"ld12ab34da\""), "{e}");
        assert!(
            e.contains("ethtool -K ld12ab34da tx off rx off tso off gso off gro off"),
            "{e}"
        );
        assert!(e.contains("--allow-offload"), "{e}");
    }

    #[test]
    fn loopback_query_works() {
        // `lo` exists in every network namespace and answers the legacy queries.
        let on = enabled_on("lo").expect("ethtool ioctl on lo");
        assert!(on.iter().all(|n| CHECKED.iter().any(|(c, _)| c == n)));
    }
}
