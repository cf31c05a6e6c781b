//! The kernel's netlink and its per-netns knobs: links (`link`), routes
//! (`route`), addresses (`addr`), tc filters (`tc`), network namespaces
//! (`netns`) and sysctls (`sysctl`). Touches only the kernel and `crate::error`.
//!
//! Verbs follow netavark's `netlink_route.rs` (`get_link`, `dump_*`). tokio is
//! an implementation detail: every public function builds a current-thread
//! runtime, opens a fresh rtnetlink socket, blocks on the request and tears
//! both down again. Building a current-thread runtime costs an epoll fd and an
//! eventfd, which is negligible for a CNI plugin making a handful of calls, and
//! avoids keeping runtimes in thread-locals (whose destructors run at thread
//! exit, which `in_netns` threads do all the time). If a function is called
//! from inside a tokio runtime it runs on a helper thread instead of panicking.
//!
//! # Network namespaces are per *thread*
//!
//! On Linux the network namespace is an attribute of each thread, not of the
//! process (`unshare(CLONE_NEWNET)` / `setns(.., CLONE_NEWNET)` change only
//! the calling thread; new threads and forked children inherit the netns of
//! the thread that created them). What that means here:
//!
//! * A netlink socket is bound to the netns of the thread that creates it.
//!   Because every call here opens its own socket on the calling thread,
//!   every function operates on the **calling thread's** netns.
//! * `/proc/sys/net/...` is also resolved against the **calling thread's**
//!   netns: the sysctl root's lookup uses `current->nsproxy->net_ns` (and
//!   cached dentries are revalidated per netns), so opening
//!   `/proc/sys/net/ipv4/ip_local_reserved_ports` from a thread that entered
//!   another netns reads/writes that netns' value, even though the process'
//!   main thread is elsewhere. There is no `/proc/thread-self/sys`; plain
//!   `/proc/sys` is the per-thread view. (The test
//!   `sysctl_is_per_thread_netns` checks this.) An fd keeps referring to
//!   the netns it was opened in.
//! * By contrast `/proc/net` is a symlink to `/proc/self/net`, which shows the
//!   netns of the process' **main thread** (thread-group leader); use
//!   `/proc/thread-self/net` for the calling thread's view. `/sys/class/net`
//!   shows the netns sysfs was mounted in, regardless of thread.
//! * `in_netns` therefore runs its closure on a fresh OS thread that enters
//!   the target netns and then exits, so no thread is ever left in a foreign
//!   netns and the caller's netns never changes.

use std::future::Future;

use futures::future::Either;

use crate::error::{code, Context, Error, Result};

mod addr;
mod link;
mod netns;
mod route;
mod sysctl;
mod tc;

pub use addr::get_addresses;
pub use link::{dump_links, get_link_by_index, get_link_by_name, LinkInfo, ARPHRD_ETHER, ARPHRD_NONE};
pub use netns::{in_netns, veth_peer, veth_peer_ifindex, VethPeer};
pub use route::{default_route_interfaces, route_oif};
pub use sysctl::{read_sysctl, write_sysctl};
pub use tc::has_tc_filter;

// ---------------------------------------------------------------------------
// runtime / connection plumbing

/// Run `work` against a fresh rtnetlink connection opened on the calling
/// thread (hence in the calling thread's netns), blocking until it is done.
fn run<T, F, Fut>(work: F) -> Result<T>
where
    T: Send,
    F: FnOnce(rtnetlink::Handle) -> Fut + Send,
    Fut: Future<Output = Result<T>>,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        // block_on inside a runtime would panic; a helper thread inherits our
        // netns, so the result is the same.
        return std::thread::scope(|s| match s.spawn(move || run_here(work)).join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        });
    }
    run_here(work)
}

fn run_here<T, F, Fut>(work: F) -> Result<T>
where
    F: FnOnce(rtnetlink::Handle) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ctx(code::NETLINK, "cannot create runtime for netlink")?;
    rt.block_on(async move {
        let (conn, handle, _messages) =
            rtnetlink::new_connection().ctx(code::NETLINK, "cannot open rtnetlink socket")?;
        let work = Box::pin(work(handle));
        match futures::future::select(work, Box::pin(conn)).await {
            Either::Left((r, _conn)) => r,
            Either::Right(((), _)) => {
                Err(Error::netlink("rtnetlink connection closed unexpectedly"))
            }
        }
    })
}

/// Negative errno carried by a netlink error reply, as a positive errno.
fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

fn nl_err(what: impl std::fmt::Display, e: rtnetlink::Error) -> Error {
    match &e {
        rtnetlink::Error::NetlinkError(m) => Error::netlink(format!("{what}: {}", m.to_io())),
        _ => Error::netlink(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests;
