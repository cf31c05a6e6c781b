//! ebpf-masq's core: everything below the CNI verbs and the operators' tools.
//!
//! Layers point down only (tests/layers.rs checks it, and that no import circle
//! remains; `LAYERS_PRINT=1 cargo test --test layers -- --nocapture` lists
//! every room and what it imports). A room is a file, or a folder's child:
//!   `node::*`                           node-wide state: reconcile, policy maps, uplinks, ports,
//!                                       adopt an older layout, teardown
//!   `pod`                               one pod attachment
//!   `bpf::*`, `netlink::*`, `prevresult`  the data plane's ABI, pins, loader, maps and NAT tables;
//!                                       the kernel's netlink (links, routes, addresses, tc,
//!                                       netns, sysctl); CNI results
//!   `config::*`, `logging`              the config as data (a leaf), the log
//!   `error`
//! The crates above it, ebpf-masq-cni (`cni`) and ebpf-masq-tools (`cli::*`), each
//! depend on this one and never on each other: the crate boundary holds that layer.

pub mod bpf;
pub mod config;
pub mod error;
pub mod logging;
pub mod netlink;
pub mod node;
pub mod pod;
pub mod prevresult;
