//! ebpf-masq: a chained CNI plugin that masquerades pod and tunnel traffic in eBPF.
//!
//! The binary (src/main.rs) speaks CNI when CNI_COMMAND is set and is the
//! operator CLI otherwise; the modules are a library so integration tests
//! (BPF_PROG_TEST_RUN, fuzzing) reach the same code.

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
pub mod upgrade;
