//! Rust's view of bpf/include/masq_abi.h, generated at build time by bindgen
//! (plugin/core/build.rs): every struct under its C name, every #define and enum member.
//! Network-order fields (`__be16`, `__be32`, `struct in6_addr`) are byte arrays, as
//! the maps hold them, and `struct bpf_timer` two words; C's `char` is a byte (the ABI's strings are byte strings).

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code)]
#![allow(clippy::all)]

/// C's integer types, as bindgen names them (`ctypes_prefix`).
pub mod ctypes {
    pub type c_char = u8;
    pub type c_schar = i8;
    pub type c_uchar = u8;
    pub type c_short = i16;
    pub type c_ushort = u16;
    pub type c_int = i32;
    pub type c_uint = u32;
    pub type c_long = i64;
    pub type c_ulong = u64;
    pub type c_longlong = i64;
    pub type c_ulonglong = u64;
}

pub type __be16 = [u8; 2];
pub type __be32 = [u8; 4];
pub type in6_addr = [u8; 16];
/// Opaque to everyone but the kernel (two 64-bit words, aligned as C's): reads as zeros.
pub type bpf_timer = [u64; 2];

include!(concat!(env!("OUT_DIR"), "/abi.rs"));
