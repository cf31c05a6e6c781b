//! The expiry sweep's bpf_timer, primed by the loader: one run of the uplink
//! egress program (`BPF_PROG_TEST_RUN`, `NAT_GC_PRIME_MARK` in `cb[0]`) gives the
//! timer its memory and its callback, so a packet only ever starts it
//! (bpf/lib/nat/gc.h, `nat_gc_prime`).

use aya::programs::SchedClassifier;

use super::{abi, pins::{Pins, PROG_UPLINK_EGRESS}};
use crate::error::{Context, Error, Result};

/// `__sk_buff.cb[0]`'s offset (linux/bpf.h), the end of the context a prime run passes.
const SKB_CB0: usize = 48;

/// Give the expiry sweep's bpf_timer its memory and its callback now, with one
/// run of the uplink egress program (masq_abi.h, NAT_GC_PRIME_MARK), so a new
/// pair only starts it. bpf_timer_init allocates without waiting and may fail
/// for a moment: tried again for up to ~100 ms. Every later prime is a no-op.
pub fn prime(egress: &SchedClassifier) -> Result<()> {
    use aya::programs::{TestRun, TestRunOptions};
    let mut ctx = [0u8; SKB_CB0 + 4];
    ctx[SKB_CB0..].copy_from_slice(&(abi::NAT_GC_PRIME_MARK as u32).to_ne_bytes());
    let frame = [0u8; 14]; // an Ethernet header: the least BPF_PROG_TEST_RUN takes
    let mut last = 0;
    for attempt in 0..50 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let run = egress
            .test_run(TestRunOptions { data_in: Some(&frame), ctx_in: Some(&ctx), ..Default::default() })
            .bpf_ctx("prime the expiry sweep's timer (BPF_PROG_TEST_RUN)")?;
        last = run.return_value as i32;
        match last - abi::NAT_GC_PRIME_RET as i32 {
            0 => return Ok(()),
            libc::ENOMEM => continue,
            errno if errno > 0 => {
                let e = std::io::Error::from_raw_os_error(errno);
                return Err(Error::bpf(format!("prime the expiry sweep's timer: {e}")));
            }
            _ => break, // a program without the prime run (it passed the packet)
        }
    }
    let why = match last - abi::NAT_GC_PRIME_RET as i32 {
        libc::ENOMEM => format!("{} (50 tries)", std::io::Error::from_raw_os_error(libc::ENOMEM)),
        _ => format!("the program returned {last}, not a prime run's answer"),
    };
    Err(Error::bpf(format!("prime the expiry sweep's timer: {why}")))
}

/// `prime` with the pinned uplink egress program of `pins`.
pub fn prime_pinned(pins: &Pins) -> Result<()> {
    let egress = SchedClassifier::from_pin(pins.prog(PROG_UPLINK_EGRESS)).bpf_ctx("open the uplink egress program")?;
    prime(&egress)
}
