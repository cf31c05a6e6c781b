//! ebpf-masq: a chained CNI plugin that masquerades pod and tunnel traffic in eBPF.
//!
//! With CNI_COMMAND set the binary speaks CNI on stdin/stdout; without it, it is
//! the operator CLI (`ebpf-masq --help`).

mod bpf;
mod cli;
mod cni;
mod config;
mod error;
mod logging;
mod netlink;
mod node;
mod pod;
mod prevresult;

fn main() {
    let code = if std::env::var_os("CNI_COMMAND").is_some() { cni::main() } else { cli::main() };
    std::process::exit(code);
}
