//! The Rust side of the data plane: `abi` (the one mirror of
//! bpf/include/masq_abi.h, checked against it and the objects' BTF), `pins`
//! (where a layout's pins live), `loader` (load and verify once, attach from
//! pins, TCX or tc), `maps` (typed access to pinned maps), `nat` (the NAT tables:
//! pairs, shards, their removal), `events` (the data plane's event rings and
//! their leases), `refusals` and `port_counts` (per pod address,
//! forgotten at its DEL), `memory` (what the NAT tables cost), `sweep` (the expiry sweep's timer, primed at
//! load) and `sys` (every raw bpf(2) call: the
//! commands aya 0.14 has no API for, and maps typed only at run time). May use `netlink` and `error`; knows nothing of pods or config.
pub mod abi;
pub mod events;
pub mod loader;
pub mod maps;
pub mod memory;
pub mod nat;
pub mod nat_hot;
pub mod pins;
pub mod port_counts;
pub mod refusals;
pub mod sweep;
pub mod sys;
