//! Monotonic time in nanoseconds and a precise "sleep until": an absolute
//! `clock_nanosleep` to shortly before the deadline, then a short busy-wait.

use std::time::Duration;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Asks the kernel to wake this thread's timers with 1 ns slack instead of the default
/// 50 µs, so sleeps end as close to their deadline as the scheduler allows.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value; no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Puts the calling thread in SCHED_FIFO at `priority` (1..=99); 0 leaves it alone.
pub fn set_realtime(priority: u8) -> std::io::Result<()> {
    if priority == 0 {
        return Ok(());
    }
    let param = libc::sched_param {
        sched_priority: priority as libc::c_int,
    };
    // SAFETY: valid sched_param for the calling thread.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`: kernel sleep until
/// `deadline_ns - spin`, then busy-wait. Returns at once if the deadline has passed.
pub fn sleep_until(deadline_ns: u64, spin: Duration) {
    let spin_ns = spin.as_nanos() as u64;
    let wake_ns = deadline_ns.saturating_sub(spin_ns);
    if now_ns() < wake_ns {
        let ts = libc::timespec {
            tv_sec: (wake_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wake_ns % 1_000_000_000) as libc::c_long,
        };
        loop {
            // SAFETY: valid timespec; absolute sleep, remaining-time pointer unused.
            let rc = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if rc != libc::EINTR {
                break;
            }
        }
    }
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_returns_early() {
        for spin_us in [0u64, 50, 2000] {
            let start = now_ns();
            let deadline = start + 3_000_000;
            sleep_until(deadline, Duration::from_micros(spin_us));
            assert!(now_ns() >= deadline);
        }
        // A past deadline returns immediately (no sleep, no spin).
        sleep_until(0, Duration::from_micros(50));
    }
}
