//! The live mode end to end over loopback: a real sender (server) and receiver (client) in
//! one process, a short broadcast with each ABR; the reports' live fields present and in
//! range.

use std::time::Duration;

fn opts(args: &[&str]) -> tquic_perf::Opts {
    let mut v = vec!["tquic-perf"];
    v.extend_from_slice(args);
    tquic_perf::cli::parse_args(v).expect("valid arguments")
}

fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

fn broadcast(abr: &str, slack_ms: &str) -> (serde_json::Value, serde_json::Value) {
    // Tests run in parallel threads of one process: a directory per broadcast.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "tquic-perf-live-{abr}-{slack_ms}-{}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port().to_string();
    let (sjson, cjson) = (dir.join("sender.json"), dir.join("receiver.json"));
    let live = [
        "-app",
        "live",
        "-abr",
        abr,
        "-ping_interval_ms",
        "500",
        "-frame_slack_ms",
        slack_ms,
    ];
    let mut sargs = vec![
        "-mode",
        "server",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-once",
    ];
    sargs.extend_from_slice(&live);
    sargs.extend_from_slice(&["-json", sjson.to_str().unwrap()]);
    let server_opts = opts(&sargs);
    let server = std::thread::spawn(move || tquic_perf::run(server_opts));
    std::thread::sleep(Duration::from_millis(300));
    let mut cargs = vec!["-mode", "client", "-host", "127.0.0.1", "-port", &port];
    cargs.extend_from_slice(&live);
    cargs.extend_from_slice(&["-duration", "2.5", "-window", "4194304"]);
    cargs.extend_from_slice(&["-interval_ms", "0", "-json", cjson.to_str().unwrap()]);
    tquic_perf::run(opts(&cargs)).expect("client run");
    server.join().unwrap().expect("server run");
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let out = (read(&sjson), read(&cjson));
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing or not a number: {v}"))
}

#[test]
fn live_broadcast_over_loopback_reports_its_metrics_with_each_abr() {
    for abr in ["backlog", "rate"] {
        let (s, c) = broadcast(abr, "4");
        let l = &s["live"];
        assert_eq!(l["app"], "live");
        assert_eq!(l["abr"], abr);
        let d = f(l, "broadcast_s");
        assert!((2.4..4.0).contains(&d), "{l}");
        // 30 fps for ~2.5 s; nothing to drop on an unshaped loopback.
        let produced = f(l, "frames_produced");
        assert!((70.0..=120.0).contains(&produced), "{l}");
        assert!(f(l, "frames_sent") <= produced && f(l, "frames_acked") <= f(l, "frames_sent"));
        assert_eq!(f(l, "frames_dropped"), 0.0, "{l}");
        // The ABR ends at a rung of the ladder, the mean between the lowest and the top.
        let ladder: Vec<f64> = l["ladder_kbps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let mean = f(l, "bitrate_mean_kbps");
        assert!(ladder[0] <= mean && mean <= ladder[6], "{l}");
        let tl = l["bitrate_timeline"].as_array().unwrap();
        assert_eq!(tl.len() as f64, f(l, "bitrate_switches") + 1.0, "{l}");
        let at_rungs: f64 = l["time_at_rung_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[1].as_f64().unwrap())
            .sum();
        assert!((at_rungs - d).abs() < 0.01, "{l}");
        // Goodput as Facebook defines it: acknowledged app bytes over the broadcast.
        let g = f(l, "goodput_fb_kbps");
        assert!((g - f(l, "app_bytes_acked") * 8.0 / d / 1000.0).abs() < 1e-6 * g.max(1.0));
        assert!(g > 0.5 * ladder[0] && g < 1.5 * ladder[6], "{l}");
        // Pings every 500 ms, both kinds echoed; RTTs positive and below a second.
        for k in ["app_rtt_ms", "app_rtt_inband_ms"] {
            let r = &l[k];
            assert!(f(r, "samples") >= 3.0, "{k}: {r}");
            assert!(f(r, "mean_ms") > 0.0 && f(r, "p95_ms") < 1000.0, "{k}: {r}");
            assert_eq!(
                r["series"].as_array().unwrap().len() as f64,
                f(r, "samples")
            );
        }
        assert!(f(l, "transport_rtt_mean_ms") > 0.0 && f(l, "transport_rtt_samples") > 10.0);
        assert!(f(l, "transport_bytes_acked") >= f(l, "app_bytes_acked"));
        assert_eq!(
            f(l, "rtx_overhead"),
            f(l, "transport_bytes_lost") / f(l, "transport_bytes_acked")
        );
        // The bulk fields stay: bytes = app bytes handed to the transport.
        assert_eq!(f(&s, "bytes"), f(l, "app_bytes_sent"));
        // The receiver: frames with their latency, per-second rows.
        let r = &c["live"];
        assert!(f(r, "frames_received") >= f(l, "frames_acked") - 5.0, "{r}");
        assert!(f(r, "key_frames_received") >= 1.0, "{r}");
        let fl = &r["frame_latency_ms"];
        assert!(
            f(fl, "p50_ms") > 0.0 && f(fl, "p50_ms") <= f(fl, "p95_ms"),
            "{r}"
        );
        assert!(f(fl, "p95_ms") < 1000.0, "{r}");
        assert!(
            r["frame_latency_per_s"].as_array().unwrap().len() >= 2,
            "{r}"
        );
        assert!(f(r, "pings_echoed") >= 6.0, "{r}");
        assert!(f(r, "goodput_fb_kbps") > 0.0);
    }
}

/// Frames are made at a wake-up within the slack after their capture time (or, with no slack,
/// at it): every frame's lateness is recorded, and the median stays within the slack plus the
/// event loop's 1-ms timer resolution (and a margin for a busy host).
#[test]
fn frames_are_made_within_the_slack_after_their_capture() {
    for (slack, limit_ms) in [("0", 3.0), ("4", 7.0)] {
        let (s, c) = broadcast("rate", slack);
        let l = &s["live"];
        assert_eq!(l["frame_slack_ms"].as_u64(), Some(slack.parse().unwrap()));
        let late = &l["frame_lateness_ms"];
        assert_eq!(f(late, "samples"), f(l, "frames_produced"), "{late}");
        assert!(f(late, "p50_ms") >= 0.0, "{late}");
        assert!(f(late, "p50_ms") <= limit_ms, "slack {slack}: {late}");
        // The frames still arrive, each with its latency from its capture.
        assert!(f(&c["live"], "frames_received") >= 50.0, "{c}");
    }
}

#[test]
fn bulk_reports_have_no_live_object() {
    let dir = std::env::temp_dir().join(format!("tquic-perf-bulk-nolive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port().to_string();
    let sjson = dir.join("sender.json");
    let server_opts = opts(&[
        "-mode",
        "server",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-once",
        "-json",
        sjson.to_str().unwrap(),
    ]);
    let server = std::thread::spawn(move || tquic_perf::run(server_opts));
    std::thread::sleep(Duration::from_millis(300));
    tquic_perf::run(opts(&[
        "-mode",
        "client",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-duration",
        "0.5",
    ]))
    .unwrap();
    server.join().unwrap().unwrap();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sjson).unwrap()).unwrap();
    assert!(s.get("live").is_none(), "{s}");
    assert_eq!(s["format_version"], 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
