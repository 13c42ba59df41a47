//! Batched UDP I/O (crate::udp) on real sockets over 127.0.0.1: GSO and sendmmsg on send,
//! GRO and recvmmsg on receive, and the fallbacks when the kernel refuses them. Every
//! packet must arrive as its own datagram, whole and in order, whichever path carried it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tquic::PacketInfo;
use tquic_perf::udp::{BatchOpts, BatchReport, RecvMode, Refuse, SendMode, Toggle, UdpIo};

fn opts(gso: Toggle, gro: Toggle, mmsg: bool, refuse: Refuse) -> BatchOpts {
    BatchOpts {
        gso,
        gro,
        mmsg,
        refuse,
    }
}

const AUTO: BatchOpts = BatchOpts {
    gso: Toggle::Auto,
    gro: Toggle::Auto,
    mmsg: true,
    refuse: Refuse {
        gso: false,
        gro: false,
        mmsg: false,
    },
};

fn bound(o: BatchOpts) -> UdpIo {
    bound_at("127.0.0.1:0", o)
}

fn bound_at(addr: &str, o: BatchOpts) -> UdpIo {
    let s = tquic_perf::net::udp_socket(addr.parse().unwrap()).unwrap();
    UdpIo::new(s, false, o).expect("socket set up")
}

/// tquic-like batches: 64 packets to `dst`, full-size but for a short one now and then,
/// each filled with its sequence number and a position pattern.
fn packets(n: usize, dst: SocketAddr) -> Vec<(Vec<u8>, PacketInfo)> {
    (0..n)
        .map(|i| {
            let len = if i % 29 == 28 { 300 + i % 7 } else { 1200 };
            let mut p: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
            p[..4].copy_from_slice(&(i as u32).to_be_bytes());
            let info = PacketInfo {
                src: dst,
                dst,
                time: Instant::now(),
            };
            (p, info)
        })
        .collect()
}

/// Sends `pkts` in tquic's batches of 64, each retried until the socket took it all.
fn send_all(tx: &UdpIo, pkts: &[(Vec<u8>, PacketInfo)]) {
    for batch in pkts.chunks(64) {
        let mut done = 0;
        let t0 = Instant::now();
        while done < batch.len() {
            let n = tx.send_packets(&batch[done..]);
            assert!(tx.fatal().is_none(), "{:?}", tx.fatal());
            done += n;
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "send stuck at {done}"
            );
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert!(tx.take_send_error().is_none());
}

/// Receives until `n` packets arrived (or 5 s passed); returns them in arrival order.
fn recv_n(rx: &UdpIo, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < n && t0.elapsed() < Duration::from_secs(5) {
        match rx.recv_batch(|buf, _src| got.push(buf.to_vec())) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("receive: {e}"),
        }
    }
    got
}

/// Sends 320 packets from a socket with `tx_opts` to one with `rx_opts`; checks every
/// packet arrived once, as sent, in order; returns both reports.
fn transfer(tx_opts: BatchOpts, rx_opts: BatchOpts) -> (BatchReport, BatchReport) {
    transfer_at("127.0.0.1:0", tx_opts, rx_opts)
}

fn transfer_at(addr: &str, tx_opts: BatchOpts, rx_opts: BatchOpts) -> (BatchReport, BatchReport) {
    let rx = bound_at(addr, rx_opts);
    let tx = bound_at(addr, tx_opts);
    let pkts = packets(320, rx.local_addr().unwrap());
    send_all(&tx, &pkts);
    let got = recv_n(&rx, pkts.len());
    assert_eq!(got.len(), pkts.len(), "packets lost or split wrongly");
    for (i, (g, (p, _))) in got.iter().zip(&pkts).enumerate() {
        assert_eq!(
            g,
            p,
            "packet {i} differs (length {} vs {})",
            g.len(),
            p.len()
        );
    }
    let (t, r) = (tx.report(), rx.report());
    assert_eq!(t.send.packets, pkts.len() as u64);
    assert_eq!(r.recv.packets, pkts.len() as u64);
    (t, r)
}

#[test]
fn gso_sends_a_batch_in_few_syscalls_and_every_packet_arrives_whole_in_order() {
    let (t, r) = transfer(AUTO, AUTO);
    let s = &t.send;
    assert_eq!(
        (s.requested, s.mode),
        (SendMode::Gso, SendMode::Gso),
        "{s:?}"
    );
    assert_eq!(s.fallback_reason, None);
    // 5 batches of 64: one sendmmsg each (several GSO messages per call).
    assert!(s.syscalls <= 5, "{s:?}");
    assert!(s.gso_messages > 0 && s.gso_max_segments > 1, "{s:?}");
    assert!(s.gso_max_segments as usize <= tquic_perf::udp::MAX_GSO_SEGMENTS);
    // Loopback keeps a GSO message whole; GRO hands it over in one piece, cut back here.
    let rr = &r.recv;
    assert_eq!(rr.mode, RecvMode::Gro, "{rr:?}");
    assert!(rr.datagrams < rr.packets, "{rr:?}");
    assert!(rr.syscalls < rr.packets / 10, "{rr:?}");
}

#[test]
fn gso_off_sends_one_sendmmsg_per_batch() {
    let no_gso = BatchOpts {
        gso: Toggle::Off,
        ..AUTO
    };
    let no_gro = BatchOpts {
        gro: Toggle::Off,
        ..AUTO
    };
    let (t, r) = transfer(no_gso, no_gro);
    let s = &t.send;
    assert_eq!(
        (s.gso, s.requested, s.mode),
        (Toggle::Off, SendMode::Sendmmsg, SendMode::Sendmmsg)
    );
    assert_eq!((s.fallback_reason.as_deref(), s.gso_messages), (None, 0));
    assert_eq!(s.syscalls, 5, "{s:?}");
    // recvmmsg: many datagrams per call.
    let rr = &r.recv;
    assert_eq!(
        (rr.requested, rr.mode),
        (RecvMode::Recvmmsg, RecvMode::Recvmmsg)
    );
    assert_eq!(rr.datagrams, rr.packets);
    assert!(rr.syscalls < rr.packets / 10, "{rr:?}");
}

#[test]
fn a_kernel_refusing_gso_gets_sendmmsg_and_the_report_says_why() {
    // The kernel itself refuses: GSO on a socket without UDP checksums is EINVAL.
    let refuse = Refuse {
        gso: true,
        ..Refuse::default()
    };
    let (t, _) = transfer(opts(Toggle::Auto, Toggle::Auto, true, refuse), AUTO);
    let s = &t.send;
    assert_eq!((s.requested, s.mode), (SendMode::Gso, SendMode::Sendmmsg));
    let why = s.fallback_reason.as_deref().expect("a fallback reason");
    assert!(
        why.contains("GSO refused") && why.contains("os error 22"),
        "{why}"
    );
    assert_eq!(s.gso_messages, 0);
    // The refused call, then one sendmmsg per batch.
    assert_eq!(s.syscalls, 6, "{s:?}");
}

#[test]
fn over_ipv6_too_gso_and_its_refusal() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    }
    let (t, _) = transfer_at("[::1]:0", AUTO, AUTO);
    assert_eq!(t.send.mode, SendMode::Gso);
    assert!(t.send.syscalls <= 5, "{:?}", t.send);
    // Both ends refuse (the receiver must accept the zero UDP checksums IPv6 forbids).
    let refuse = opts(
        Toggle::Auto,
        Toggle::Auto,
        true,
        Refuse {
            gso: true,
            ..Refuse::default()
        },
    );
    let (t, _) = transfer_at("[::1]:0", refuse, refuse);
    assert_eq!(t.send.mode, SendMode::Sendmmsg);
    assert!(t.send.fallback_reason.unwrap().contains("GSO refused"));
}

#[test]
fn gso_on_and_refused_is_an_error_not_a_fallback() {
    let refuse = Refuse {
        gso: true,
        ..Refuse::default()
    };
    let rx = bound(AUTO);
    let tx = bound(opts(Toggle::On, Toggle::Auto, true, refuse));
    let pkts = packets(64, rx.local_addr().unwrap());
    assert_eq!(tx.send_packets(&pkts), 0, "nothing may be reported sent");
    let e = tx.fatal().expect("a refusal");
    assert_eq!(e.flag, "gso");
    assert!(e.to_string().contains("-gso on"), "{e}");
    assert_eq!(tx.report().send.mode, SendMode::Gso);
}

#[test]
fn without_mmsg_gro_and_gso_it_is_one_syscall_per_datagram() {
    let refuse = Refuse {
        gso: true,
        gro: true,
        mmsg: true,
    };
    let all = opts(Toggle::Auto, Toggle::Auto, true, refuse);
    let (t, r) = transfer(all, all);
    let s = &t.send;
    assert_eq!((s.requested, s.mode), (SendMode::Gso, SendMode::Sendmsg));
    let why = s.fallback_reason.as_deref().unwrap();
    assert!(
        why.contains("sendmmsg refused") && why.contains("GSO refused"),
        "{why}"
    );
    // The two refused calls, then one per packet.
    assert_eq!(s.syscalls, 320 + 2, "{s:?}");
    let rr = &r.recv;
    assert_eq!((rr.requested, rr.mode), (RecvMode::Gro, RecvMode::Recvmsg));
    let why = rr.fallback_reason.as_deref().unwrap();
    assert!(
        why.contains("UDP_GRO") && why.contains("recvmmsg refused"),
        "{why}"
    );
    assert!(rr.syscalls > rr.packets, "{rr:?}");
}

#[test]
fn mmsg_false_is_the_tool_before_batching() {
    let old = opts(Toggle::Off, Toggle::Off, false, Refuse::default());
    let (t, r) = transfer(old, old);
    assert_eq!(
        (t.send.mode, t.send.fallback_reason.as_deref()),
        (SendMode::Sendmsg, None)
    );
    assert_eq!(t.send.syscalls, 320);
    assert_eq!(r.recv.mode, RecvMode::Recvmsg);
    assert!(r.recv.syscalls >= 320);
}

#[test]
fn gro_on_and_refused_is_an_error_at_set_up() {
    let s = tquic_perf::net::udp_socket("127.0.0.1:0".parse().unwrap()).unwrap();
    let refuse = Refuse {
        gro: true,
        ..Refuse::default()
    };
    let e = UdpIo::new(s, false, opts(Toggle::Auto, Toggle::On, true, refuse))
        .err()
        .expect("a refusal");
    assert_eq!(e.flag, "gro");
}

// ---- end to end: the tool's JSON report ----

fn tool_opts(args: &[&str]) -> tquic_perf::Opts {
    let mut v = vec!["tquic-perf"];
    v.extend_from_slice(args);
    tquic_perf::cli::parse_args(v).expect("valid arguments")
}

fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// A one-second loopback transfer with `extra` flags on both ends: (sender, receiver) JSON.
fn tool_transfer(name: &str, extra: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("tquic-perf-batch-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port().to_string();
    let (sjson, cjson) = (dir.join("sender.json"), dir.join("receiver.json"));
    let mut sargs = vec![
        "-mode",
        "server",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-once",
    ];
    sargs.extend_from_slice(&["-json", sjson.to_str().unwrap()]);
    sargs.extend_from_slice(extra);
    let server_opts = tool_opts(&sargs);
    let server = std::thread::spawn(move || tquic_perf::run(server_opts));
    // The server is up once its port is taken (its TLS set-up takes a while in a debug build).
    let t0 = Instant::now();
    while std::net::UdpSocket::bind(format!("127.0.0.1:{port}")).is_ok() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the server did not bind"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut cargs = vec!["-mode", "client", "-host", "127.0.0.1", "-port", &port];
    cargs.extend_from_slice(&["-duration", "1", "-json", cjson.to_str().unwrap()]);
    cargs.extend_from_slice(extra);
    tquic_perf::run(tool_opts(&cargs)).expect("client run");
    server.join().unwrap().expect("server run");
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let out = (read(&sjson), read(&cjson));
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

#[test]
fn the_tool_reports_gso_and_fewer_send_syscalls_than_packets() {
    let (s, c) = tool_transfer("auto", &[]);
    assert_eq!(s["format_version"], 3);
    let b = &s["batching"]["send"];
    assert_eq!(b["requested"], "gso", "{b}");
    assert_eq!(b["mode"], "gso", "{b}");
    assert!(b["fallback_reason"].is_null());
    let (calls, pkts) = (
        b["syscalls"].as_u64().unwrap(),
        b["packets"].as_u64().unwrap(),
    );
    assert!(pkts > 1000 && calls * 4 < pkts, "{b}");
    // What the receiver got, it read in fewer calls than packets, and every byte is there.
    let r = &c["batching"]["recv"];
    assert!(
        r["syscalls"].as_u64().unwrap() < r["packets"].as_u64().unwrap(),
        "{r}"
    );
    assert!(s["bytes"].as_u64().unwrap() >= c["bytes"].as_u64().unwrap());
    assert!(c["bytes"].as_u64().unwrap() > 100_000);
}

#[test]
fn the_tool_reports_gso_off_and_a_refused_gso() {
    let (s, _) = tool_transfer("off", &["-gso", "off"]);
    let b = &s["batching"]["send"];
    assert_eq!(
        (b["gso"].as_str(), b["mode"].as_str()),
        (Some("off"), Some("sendmmsg"))
    );
    assert!(b["fallback_reason"].is_null(), "{b}");

    let (s, c) = tool_transfer("refused", &["-test_refuse", "gso"]);
    for (who, v) in [("sender", &s), ("receiver", &c)] {
        let b = &v["batching"]["send"];
        assert_eq!(b["requested"], "gso", "{who}: {b}");
        assert_eq!(b["mode"], "sendmmsg", "{who}: {b}");
        let why = b["fallback_reason"].as_str().unwrap_or_default();
        assert!(why.contains("GSO refused"), "{who}: {b}");
    }
    assert!(c["bytes"].as_u64().unwrap() > 100_000);
}
