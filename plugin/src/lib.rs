//! ebpf-masq: a chained CNI plugin that masquerades pod and tunnel traffic in eBPF.
//!
//! The binary (src/main.rs) speaks CNI when CNI_COMMAND is set and is the
//! operator CLI otherwise; the modules are a library so integration tests
//! (BPF_PROG_TEST_RUN, fuzzing) reach the same code.
//!
//! Layers point down only (tests/layers.rs checks it, and that no import circle
//! remains; `LAYERS_PRINT=1 cargo test --test layers -- --nocapture` lists
//! every room and what it imports). A room is a file, or a folder's child:
//!   `cni`, `cli::*`                     verbs and commands (cli/explain/, cli/install/ are rooms)
//!   `node::*`                           node-wide state: reconcile, policy maps, uplinks, ports,
//!                                       adopt an older layout, teardown
//!   `pod`                               one pod attachment
//!   `bpf::*`, `netlink::*`, `prevresult`  the data plane's ABI, pins, loader, maps and NAT tables;
//!                                       the kernel's netlink (links, routes, addresses, tc,
//!                                       netns, sysctl); CNI results
//!   `config::*`, `logging`              the config as data (a leaf), the log
//!   `error`

pub mod bpf;
pub mod cli;
pub mod cni;
pub mod config;
pub mod error;
pub mod logging;
pub mod netlink;
pub mod node;
pub mod pod;
pub mod prevresult;
