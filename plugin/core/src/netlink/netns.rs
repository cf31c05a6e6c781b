//! Network namespaces: run a closure inside one (on its own thread), and find
//! a container veth's host-side peer.

use std::fs::File;
use std::path::Path;

use nix::sched::{setns, CloneFlags};

use super::get_link_by_name;
use crate::error::{code, Error, Result};

fn netns_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(code::INVALID_ENV, format!("cannot enter netns {}: {e}", path.display()))
}

fn in_netns_file<T: Send, F: FnOnce() -> Result<T> + Send>(
    path: &Path,
    ns: File,
    f: F,
) -> Result<T> {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("ebpf-masq-netns".into())
            .spawn_scoped(s, move || {
                setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| netns_err(path, e))?;
                drop(ns);
                f()
            })
            .map_err(|e| {
                Error::new(
                    code::IO_FAILURE,
                    format!("cannot start thread to enter netns {}: {e}", path.display()),
                )
            })?;
        match thread.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// Run `f` on a new OS thread that has entered the network namespace at
/// `netns_path` (setns(CLONE_NEWNET)), and return its result. The calling
/// thread's netns is never changed; panics in `f` are propagated. Only the
/// netns is switched: mount namespace, and hence /sys, stay the caller's.
pub fn in_netns<T: Send, F: FnOnce() -> Result<T> + Send>(netns_path: &Path, f: F) -> Result<T> {
    let ns = File::open(netns_path).map_err(|e| netns_err(netns_path, e))?;
    in_netns_file(netns_path, ns, f)
}

/// For a container interface `ifname` inside netns `netns_path` that is one
/// end of a veth pair, the host-side peer's ifindex (IFLA_LINK of the
/// container end; an ifindex in the netns the peer lives in, normally the
/// caller's). Returns Ok(None) if the netns path or the interface does not
/// exist, the interface is not a veth, or it has no peer.
pub fn veth_peer_ifindex(netns_path: &Path, ifname: &str) -> Result<Option<u32>> {
    Ok(veth_peer(netns_path, ifname)?.map(|p| p.peer_ifindex))
}

/// Both ends' ifindexes of a veth seen from inside the container netns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VethPeer {
    /// The other end's ifindex, in the peer's netns.
    pub peer_ifindex: u32,
    /// The container end's own ifindex, in the container netns.
    pub own_ifindex: u32,
}

/// Like `veth_peer_ifindex`, but only when the peer lives in another netns
/// (IFLA_LINK_NETNSID present): a veth whose two ends are both inside the
/// container has no host side, and its peer's ifindex means nothing on the node.
pub fn veth_peer(netns_path: &Path, ifname: &str) -> Result<Option<VethPeer>> {
    let ns = match File::open(netns_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(netns_err(netns_path, e)),
    };
    in_netns_file(netns_path, ns, || {
        Ok(get_link_by_name(ifname)?
            .filter(|l| l.kind.as_deref() == Some("veth") && l.link_netnsid.is_some())
            .and_then(|l| l.peer_ifindex.map(|peer_ifindex| VethPeer { peer_ifindex, own_ifindex: l.index })))
    })
}
