//! ebpf-masq: a chained CNI plugin that masquerades pod and tunnel traffic in eBPF.
//!
//! The binary (src/main.rs) speaks CNI when CNI_COMMAND is set and is the
//! operator CLI otherwise. The code lives in three crates (the workspace's
//! Cargo.toml): ebpf-masq-core (`bpf`, `config`, `netlink`, `node`, `pod`, ...),
//! ebpf-masq-cni (`cni`, the CNI verbs) and ebpf-masq-tools (`cli`, the operators'
//! commands). This library names them under one root, so the integration tests
//! (BPF_PROG_TEST_RUN, fuzzing) reach the same code by the same paths.

pub use ebpf_masq_cni as cni;
pub use ebpf_masq_core::{bpf, config, error, logging, netlink, node, pod, prevresult};
pub use ebpf_masq_tools as cli;
