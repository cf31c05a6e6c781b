//! Shared helpers for the BPF_PROG_TEST_RUN tests.
pub mod harness;
pub mod harness6;
pub mod pairs;
pub mod policy;
pub mod pool;
pub mod clock;
pub mod packet;
pub mod packet6;
pub mod icmp;
pub mod lab;
pub mod node;
