//! With CNI_COMMAND set the binary speaks CNI on stdin/stdout; without it, it is
//! the operator CLI (`ebpf-masq --help`).

fn main() {
    let code = if std::env::var_os("CNI_COMMAND").is_some() { ebpf_masq::cni::main() } else { ebpf_masq::cli::main() };
    std::process::exit(code);
}
