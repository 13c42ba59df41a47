//! The queue sampler of local trials: `latency_divide.testbed.qsampler --fifo` in a native
//! process (README.md). A Python process woken ten times a second costs about 360 µs of CPU
//! per sample on this project's virtual machines, where the same sample costs 24 µs in a loop:
//! the cost is the cold interpreter at every wake-up, not the dump.

pub mod netlink;

/// The FIFO kinds `--fifo` accepts (the Python sampler's FIFO_KINDS).
pub const FIFO_KINDS: [&str; 3] = ["bfifo", "pfifo", "pfifo_head_drop"];

/// A CLOCK_REALTIME time in ns as the Python sampler writes it: `json.dumps(round(t, 3))`, the
/// shortest decimal of the ms-rounded seconds (at least one digit after the point).
pub fn t_unix_ms(ns: i64) -> String {
    let ms = (ns + 500_000).div_euclid(1_000_000);
    let (s, frac) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    if frac == 0 {
        return format!("{s}.0");
    }
    let f = format!("{frac:03}");
    format!("{s}.{}", f.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::netlink::{parse_qdisc, parse_reply, tc_classid, Fifo};
    use super::*;

    #[test]
    fn t_unix_is_what_python_prints() {
        // python3: json.dumps(round(ns / 1e9, 3))
        for (ns, want) in [
            (1795935029275895000, "1795935029.276"),
            (1795935029000000000, "1795935029.0"),
            (1795935029100400000, "1795935029.1"),
            (1795935029999600000, "1795935030.0"),
            (1795935029120000000, "1795935029.12"),
            (1795935029001000000, "1795935029.001"),
            (1795935029000499999, "1795935029.0"),
        ] {
            assert_eq!(t_unix_ms(ns), want, "{ns}");
        }
    }

    #[test]
    fn classids_print_as_tc_prints_them() {
        assert_eq!(tc_classid(0x0001_0003), "1:3");
        assert_eq!(tc_classid(0x0001_0000), "1:");
        assert_eq!(tc_classid(0x0000_0003), ":3");
        assert_eq!(tc_classid(0xFFFF_FFFF), "root");
    }

    fn attr(t: u16, p: &[u8]) -> Vec<u8> {
        let mut v = ((4 + p.len()) as u16).to_ne_bytes().to_vec();
        v.extend(t.to_ne_bytes());
        v.extend(p);
        v.resize((v.len() + 3) & !3, 0);
        v
    }

    /// An RTM_NEWQDISC message as the kernel sends it (TCA_STATS2 nested, flag set).
    fn qdisc_msg(seq: u32, ifindex: i32, handle: u32, parent: u32, kind: &str) -> Vec<u8> {
        let mut body = vec![0u8; 4];
        body.extend(ifindex.to_ne_bytes());
        body.extend(handle.to_ne_bytes());
        body.extend(parent.to_ne_bytes());
        body.extend(1u32.to_ne_bytes());
        body.extend(attr(1, format!("{kind}\0").as_bytes()));
        let mut basic = 123_456u64.to_ne_bytes().to_vec();
        basic.extend(99u32.to_ne_bytes());
        let queue: Vec<u8> = [7u32, 9000, 3, 0, 5]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut st = attr(1, &basic);
        st.extend(attr(3, &queue));
        body.extend(attr(7 | 0x8000, &st));
        let mut m = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend(36u16.to_ne_bytes());
        m.extend(2u16.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend(body);
        m
    }

    fn done(seq: u32) -> Vec<u8> {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend(3u16.to_ne_bytes());
        m.extend(2u16.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend([0u8; 8]);
        m
    }

    #[test]
    fn a_reply_keeps_our_devices_fifo_only() {
        let mut b = qdisc_msg(5, 2, 0x0001_0000, 0xFFFF_FFFF, "htb");
        b.extend(qdisc_msg(5, 2, 0x0010_0000, 0x0001_0003, "bfifo"));
        b.extend(qdisc_msg(5, 3, 0x0010_0000, 0x0001_0003, "bfifo")); // another device
        b.extend(qdisc_msg(4, 2, 0x0020_0000, 0x0001_0003, "bfifo")); // a stale reply
        let mut out = Vec::new();
        assert!(!parse_reply(&b, 5, 2, "bfifo", &mut out).unwrap());
        assert!(parse_reply(&done(5), 5, 2, "bfifo", &mut out).unwrap());
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].to_json(),
            r#"{"kind":"bfifo","handle":"10:","parent":"1:3","bytes":123456,"backlog":9000,"qlen":7,"drops":3}"#
        );
    }

    #[test]
    fn a_root_fifo_has_no_parent_and_a_bare_one_no_counters() {
        let (_, q) =
            parse_qdisc(&qdisc_msg(1, 2, 0x0010_0000, 0xFFFF_FFFF, "bfifo")[16..]).unwrap();
        assert!(!q.to_json().contains("parent"));
        let bare = Fifo {
            kind: "pfifo".into(),
            handle: 0x0010_0000,
            ..Fifo::default()
        };
        assert_eq!(bare.to_json(), r#"{"kind":"pfifo","handle":"10:"}"#);
    }

    #[test]
    fn a_kernel_error_and_a_broken_message_are_errors() {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend(2u16.to_ne_bytes());
        m.extend(0u16.to_ne_bytes());
        m.extend(5u32.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend((-libc::EINVAL).to_ne_bytes());
        let e = parse_reply(&m, 5, 2, "bfifo", &mut Vec::new()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let mut short = qdisc_msg(5, 2, 0x0010_0000, 0x0001_0003, "bfifo");
        short.truncate(30);
        short[0..4].copy_from_slice(&40u32.to_ne_bytes());
        assert!(parse_reply(&short, 5, 2, "bfifo", &mut Vec::new()).is_err());
    }
}
