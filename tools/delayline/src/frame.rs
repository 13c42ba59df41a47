//! Pure frame handling: VLAN tag restoration and the oversize test.

/// Ethernet header without a VLAN tag.
pub const ETH_HLEN: usize = 14;
/// One 802.1Q tag.
pub const VLAN_HLEN: usize = 4;
/// Default VLAN TPID (802.1Q).
pub const ETH_P_8021Q: u16 = 0x8100;

/// Writes `frame` into `out`, re-inserting the VLAN tag that the kernel stripped into
/// packet auxdata (`tp_vlan_tci`), so the frame leaves exactly as it arrived on the wire.
/// Frames shorter than the two MAC addresses are copied unchanged.
pub fn restore_vlan(frame: &[u8], tpid: u16, tci: u16, out: &mut Vec<u8>) {
    out.clear();
    if frame.len() < 12 {
        out.extend_from_slice(frame);
        return;
    }
    out.reserve(frame.len() + VLAN_HLEN);
    out.extend_from_slice(&frame[..12]);
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&tci.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
}

/// Largest frame (bytes, Ethernet header included, no FCS) that fits an interface with
/// `mtu`, allowing for one VLAN tag.
pub fn max_frame_bytes(mtu: u32) -> usize {
    mtu as usize + ETH_HLEN + VLAN_HLEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_tag_goes_after_macs() {
        let frame: Vec<u8> = (0u8..20).collect();
        let mut out = Vec::new();
        restore_vlan(&frame, ETH_P_8021Q, 0x0123, &mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[..12], &frame[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x01, 0x23]);
        assert_eq!(&out[16..], &frame[12..]);
        restore_vlan(&frame[..5], ETH_P_8021Q, 1, &mut out);
        assert_eq!(out, &frame[..5]);
    }

    #[test]
    fn max_frame_allows_header_and_tag() {
        assert_eq!(max_frame_bytes(1500), 1518);
    }
}
