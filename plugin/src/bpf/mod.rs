//! The Rust side of the data plane: ABI mirror, loader/attach, typed maps.
pub mod abi;
pub mod loader;
pub mod maps;
pub mod nat;
pub mod pins;
pub mod sys;
