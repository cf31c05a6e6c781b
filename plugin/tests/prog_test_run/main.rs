//! The BPF_PROG_TEST_RUN tests: the real pinned programs (uplink egress/ingress,
//! veth ingress) run on crafted packets. One test binary with a module per
//! subject, so `support` compiles and links once (cargo builds every file
//! directly in `tests/` as a crate of its own). Every test loads its own data
//! plane under a unique /sys/fs/bpf directory (the process id and a counter
//! shared by all modules), so tests of any module run side by side; a test's
//! data plane is put back as it was after its load and kept for the next test
//! (support/pool.rs), since the verifier is most of a load's time.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.
//!
//! One module: `cargo test --release --test prog_test_run -- mapping::`.

mod support;

mod core;
mod direction;
mod egress_policy;
mod events;
mod expiry;
mod fastpath;
mod filtering;
mod host;
mod icmp_frag;
mod kept;
mod mapping;
mod ports;
mod protocols;
mod v6;
