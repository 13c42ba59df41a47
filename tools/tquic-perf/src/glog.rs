//! glog-style log lines on stderr, as mvfst's tperf writes them:
//! `I<mmdd> <hh:mm:ss.micro> <thread> <file:line>] msg` (local time, like glog).
//! One `write_all` per line, so lines from different threads never interleave.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Formats the glog prefix for severity `sev` ('I', 'W', 'E') at `now`.
pub fn prefix(sev: char, now: SystemTime, tid: i64, file: &str, line: u32) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as libc::time_t;
    // SAFETY: localtime_r only writes into the tm we pass; both pointers are valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&secs, &mut tm) };
    let base = file.rsplit('/').next().unwrap_or(file);
    format!(
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {} {}:{}] ",
        sev,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since.subsec_micros(),
        tid,
        base,
        line
    )
}

/// The kernel thread id, as glog prints it.
pub fn thread_id() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i64 }
}

pub fn emit(sev: char, file: &str, line: u32, msg: std::fmt::Arguments<'_>) {
    let mut s = prefix(sev, SystemTime::now(), thread_id(), file, line);
    s.push_str(&msg.to_string());
    s.push('\n');
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

/// `glog!('I', "fmt", args..)`: one glog-prefixed line on stderr.
#[macro_export]
macro_rules! glog {
    ($sev:expr, $($arg:tt)*) => {
        $crate::glog::emit($sev, file!(), line!(), format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn prefix_shape() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_042);
        let p = prefix('I', t, 4242, "src/client.rs", 77);
        // I<mmdd> <hh:mm:ss.micro> <thread> <file:line>]
        let parts: Vec<&str> = p.split(' ').collect();
        assert_eq!(parts.len(), 5, "{p}");
        assert!(parts[0].starts_with('I') && parts[0].len() == 5, "{p}");
        assert_eq!(parts[1].len(), 15, "{p}");
        assert!(parts[1].ends_with(".000042"), "{p}");
        assert_eq!(parts[2], "4242");
        assert_eq!(parts[3], "client.rs:77]");
        assert_eq!(parts[4], "");
    }
}
