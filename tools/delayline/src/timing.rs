//! Monotonic time in nanoseconds and a precise "sleep until": an absolute
//! `clock_nanosleep` to shortly before the deadline, then a short busy-wait.

use std::time::Duration;

/// Oldest kernel receive timestamp still trusted (ns before the frame was read). Older
/// ones mean the wall clock was stepped (or the host stalled for longer than any delay
/// here matters for); the frame then gets the user-space time.
pub const MAX_RX_AGE_NS: u64 = 1_000_000_000;

/// A timespec in nanoseconds.
// time_t and c_long are i64 here but i32 on 32-bit targets: the casts are for those.
#[allow(clippy::unnecessary_cast)]
pub fn timespec_ns(ts: &libc::timespec) -> i64 {
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; both clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    timespec_ns(&ts)
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

/// CLOCK_REALTIME in nanoseconds since the epoch (the clock of SO_TIMESTAMPNS).
pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The CLOCK_MONOTONIC time at which the kernel received a frame, from its CLOCK_REALTIME
/// receive timestamp `kernel_rt_ns` and the two clocks read just after the frame was
/// read (`real_now_ns`, then `mono_now_ns`), by the frame's age:
/// `mono_now - (real_now - kernel_ts)`.
///
/// A slightly negative age (the clocks are read one after the other, a wall-clock step
/// back) counts as 0. `None` when the age is beyond `max_age_ns` either way (a wall-clock
/// step or a bogus timestamp): the caller then uses `mono_now_ns`. Reading the realtime
/// clock first means a preemption between the two reads can only make the result later,
/// never earlier, so a frame is never released early because of it.
pub fn kernel_rx_mono_ns(
    kernel_rt_ns: i64,
    real_now_ns: i64,
    mono_now_ns: u64,
    max_age_ns: u64,
) -> Option<u64> {
    let age = (real_now_ns as i128) - (kernel_rt_ns as i128);
    if age.unsigned_abs() > max_age_ns as u128 {
        return None;
    }
    let age = age.max(0) as u64;
    Some(mono_now_ns.saturating_sub(age))
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

/// Waits until CLOCK_MONOTONIC reaches `deadline_ns` or one of `fds` becomes readable,
/// whichever comes first; returns true if a descriptor ended the wait. With no
/// descriptors this is [`sleep_until`] (absolute, so the deadline does not drift);
/// with some, a `ppoll` to `deadline_ns - spin` and then the spin, checking nothing
/// (a frame that arrives during the spin is read right after it).
pub fn wait_until(deadline_ns: u64, spin: Duration, fds: &mut [libc::pollfd]) -> bool {
    if fds.is_empty() {
        sleep_until(deadline_ns, spin);
        return false;
    }
    let wake_ns = deadline_ns.saturating_sub(spin.as_nanos() as u64);
    let now = now_ns();
    let rel = wake_ns.saturating_sub(now);
    let ts = libc::timespec {
        tv_sec: (rel / 1_000_000_000) as libc::time_t,
        tv_nsec: (rel % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: fds is a valid slice of pollfd; the timespec lives across the call; no mask.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc > 0 {
        return true;
    }
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
    false
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

    const S: i64 = 1_000_000_000;

    #[test]
    fn kernel_timestamp_converts_by_age() {
        let real_now = 1_700_000_000 * S + 123_456_789;
        let mono_now = 5_000 * S as u64;
        // Received 250 µs before it was read.
        assert_eq!(
            kernel_rx_mono_ns(real_now - 250_000, real_now, mono_now, MAX_RX_AGE_NS),
            Some(mono_now - 250_000)
        );
        // Read at once: age 0.
        assert_eq!(
            kernel_rx_mono_ns(real_now, real_now, mono_now, MAX_RX_AGE_NS),
            Some(mono_now)
        );
        // Exactly the largest age trusted, and just beyond it.
        assert_eq!(
            kernel_rx_mono_ns(real_now - S, real_now, mono_now, MAX_RX_AGE_NS),
            Some(mono_now - S as u64)
        );
        assert_eq!(
            kernel_rx_mono_ns(real_now - S - 1, real_now, mono_now, MAX_RX_AGE_NS),
            None
        );
    }

    #[test]
    fn kernel_timestamp_in_the_future_or_absurd() {
        let real_now = 1_700_000_000 * S;
        let mono_now = 42 * S as u64;
        // A timestamp slightly after "now" (wall clock stepped back a little): age 0.
        assert_eq!(
            kernel_rx_mono_ns(real_now + 30_000, real_now, mono_now, MAX_RX_AGE_NS),
            Some(mono_now)
        );
        // Far in the future or the past (clock stepped, or a zero timestamp): not trusted.
        assert_eq!(
            kernel_rx_mono_ns(real_now + 3600 * S, real_now, mono_now, MAX_RX_AGE_NS),
            None
        );
        assert_eq!(
            kernel_rx_mono_ns(0, real_now, mono_now, MAX_RX_AGE_NS),
            None
        );
        assert_eq!(
            kernel_rx_mono_ns(i64::MIN, i64::MAX, mono_now, MAX_RX_AGE_NS),
            None
        );
        // Monotonic time just after boot: never wraps below zero.
        assert_eq!(
            kernel_rx_mono_ns(real_now - 500_000, real_now, 100_000, MAX_RX_AGE_NS),
            Some(0)
        );
    }

    #[test]
    fn live_clocks_agree() {
        // A timestamp taken now converts to (about) monotonic now.
        let k = realtime_ns();
        let (r, m) = (realtime_ns(), now_ns());
        let t = kernel_rx_mono_ns(k, r, m, MAX_RX_AGE_NS).unwrap();
        assert!(t <= m && m - t < 50_000_000, "t={t} m={m}");
    }
}
