//! The library end to end over loopback: a real server and client in one process.

use std::time::{Duration, Instant};

fn opts(args: &[&str]) -> tquic_perf::Opts {
    let mut v = vec!["tquic-perf"];
    v.extend_from_slice(args);
    tquic_perf::cli::parse_args(v).expect("valid arguments")
}

fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

#[test]
fn transfer_over_loopback_writes_both_summaries() {
    let dir = std::env::temp_dir().join(format!("tquic-perf-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_udp_port().to_string();
    let sjson = dir.join("sender.json");
    let cjson = dir.join("receiver.json");

    let server_opts = opts(&[
        "-mode",
        "server",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-once",
        "-congestion",
        "copa",
        "-latency_factor",
        "0.2",
        "-json",
        sjson.to_str().unwrap(),
    ]);
    let server = std::thread::spawn(move || tquic_perf::run(server_opts));
    std::thread::sleep(Duration::from_millis(300));

    let t0 = Instant::now();
    tquic_perf::run(opts(&[
        "-mode",
        "client",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-duration",
        "1",
        "-json",
        cjson.to_str().unwrap(),
    ]))
    .expect("client run");
    assert!(t0.elapsed() < Duration::from_secs(5));
    server.join().unwrap().expect("server run");

    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cjson).unwrap()).unwrap();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sjson).unwrap()).unwrap();
    let bytes = c["bytes"].as_u64().unwrap();
    assert!(bytes > 100_000, "{c}");
    let d = c["duration_s"].as_f64().unwrap();
    assert!((1.0..1.5).contains(&d), "{c}");
    assert_eq!(s["role"], "server");
    assert_eq!(s["cc"], "copa");
    assert_eq!(s["latency_factor"], 0.2);
    assert!(s["bytes"].as_u64().unwrap() >= bytes);
    assert!(s["sender"]["packets_sent"].as_u64().unwrap() > bytes / 1200);
    // The transport's RTT samples: about one per ACK (the client ACKs every 2nd packet).
    let x = &s["sender"];
    let samples = x["rtt_samples"].as_u64().unwrap();
    assert!(samples > 10, "{x}");
    assert!(samples <= x["packets_sent"].as_u64().unwrap(), "{x}");
    let ms = |k: &str| x[k].as_f64().unwrap();
    let (min, mean, p50, p90) = (
        ms("min_rtt_ms"),
        ms("rtt_mean_ms"),
        ms("rtt_p50_ms"),
        ms("rtt_p90_ms"),
    );
    assert!(min <= mean && mean < 1000.0, "{x}");
    assert!(min * 0.99 <= p50 && p50 <= p90 * 1.01, "{x}");
    assert!(c["sender"]["rtt_samples"].is_null(), "{c}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn client_without_server_fails_with_the_address() {
    let port = free_udp_port().to_string();
    let err = tquic_perf::run(opts(&[
        "-mode",
        "client",
        "-host",
        "127.0.0.1",
        "-port",
        &port,
        "-duration",
        "1",
        "-idle_timeout_ms",
        "500",
    ]))
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
}
