//! ebpf-masq: a chained CNI plugin that masquerades pod and tunnel traffic in eBPF.
//!
//! The binary (src/main.rs) speaks CNI when CNI_COMMAND is set and is the
//! operator CLI otherwise; the modules are a library so integration tests
//! (BPF_PROG_TEST_RUN, fuzzing) reach the same code.
//!
//! Layers point down only (tests/layers.rs checks it, and that no import circle
//! remains):
//!   `cni`, `cli::*`              verbs and commands
//!   `node`                       node-wide state: reconcile, adopt an older layout, teardown
//!   `pod`                        one pod attachment
//!   `bpf::*`, `netlink`, `prevresult`   the data plane's maps and programs, the kernel's netlink, CNI results
//!   `config`, `logging`          data types of the config (a leaf), the log
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
