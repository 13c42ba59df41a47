//! The few system calls both tools need: clocks, pinning a thread to a CPU, SCHED_FIFO,
//! absolute sleeps, and what /proc and uname say about the host (parsed by pure functions).

use std::io;

/// A clock's time in ns (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, ...).
pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub fn mono_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time (user + system) in ns.
pub fn thread_cpu_ns() -> i64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Sleeps until CLOCK_MONOTONIC reaches `t_ns` (TIMER_ABSTIME); Err(EINTR) when a signal
/// cut it short.
pub fn sleep_until(t_ns: i64) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: t_ns / 1_000_000_000,
        tv_nsec: t_ns % 1_000_000_000,
    };
    // SAFETY: a valid pointer to a local; no remainder wanted (absolute time).
    let rc = unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// The CPUs this process may run on (sched_getaffinity), sorted.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; a valid pointer and its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: as above; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Puts the calling thread in SCHED_FIFO at `priority` (1..=99).
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a valid sched_param for the calling thread.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &p) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Back to the normal scheduler (SCHED_OTHER).
pub fn set_normal() {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_OTHER, &p) };
}

/// Whether this thread may use SCHED_FIFO at `priority`: tried, then undone.
pub fn fifo_allowed(priority: i32) -> Result<(), io::Error> {
    set_fifo(priority)?;
    set_normal();
    Ok(())
}

/// (steal, total) jiffies of /proc/stat's aggregate `cpu` line. The total is user + nice +
/// system + idle + iowait + irq + softirq + steal: guest and guest_nice are already counted
/// in user and nice.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    if v.len() < 8 {
        return None;
    }
    Some((v[7], v[..8].iter().sum()))
}

pub fn read_proc_stat() -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Steal in % of all CPU time between two /proc/stat readings (0 when no time passed).
pub fn steal_pct(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1);
    if total == 0 {
        return 0.0;
    }
    100.0 * after.0.saturating_sub(before.0) as f64 / total as f64
}

/// The first `model name` of /proc/cpuinfo ("unknown" where there is none, e.g. on ARM).
pub fn parse_cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn cpu_model() -> String {
    parse_cpu_model(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

/// The kernel's release (uname -r).
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain data; uname fills NUL-terminated fields.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// A blocking eventfd (closed on drop).
pub struct EventFd(i32);

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }

    pub fn signal(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: 8 bytes from a local.
        let n = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
        if n == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Blocks until signalled (a signal's EINTR is retried).
    pub fn wait(&self) -> io::Result<u64> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: 8 bytes into a local.
            let n = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(v);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_column_over_the_first_eight() {
        let a = "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n";
        assert_eq!(parse_proc_stat(a), Some((35, 1000)));
        let b = "cpu  200 0 100 1600 20 0 10 70 40 0\n";
        assert_eq!(steal_pct((35, 1000), parse_proc_stat(b).unwrap()), 3.5);
        assert_eq!(steal_pct((35, 1000), (35, 1000)), 0.0);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None);
    }

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let t = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: X\n";
        assert_eq!(parse_cpu_model(t), "AMD EPYC 7B13");
        assert_eq!(parse_cpu_model("processor : 0\n"), "unknown");
    }

    #[test]
    fn the_host_facts_are_read() {
        assert!(!allowed_cpus().unwrap().is_empty());
        assert!(!kernel_release().is_empty());
        let (steal, total) = read_proc_stat().unwrap();
        assert!(total > 0 && steal <= total);
    }

    #[test]
    fn an_absolute_sleep_wakes_at_or_after_its_deadline() {
        let t = mono_ns() + 2_000_000;
        sleep_until(t).unwrap();
        assert!(mono_ns() >= t);
    }
}
