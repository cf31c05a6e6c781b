//! Compiles the C data plane in ../bpf with clang (-target bpf) into OUT_DIR;
//! src/bpf/loader.rs embeds the objects with include_bytes!.

use std::{env, path::PathBuf, process::Command};

const PROGRAMS: &[&str] = &["veth", "uplink", "placeholder"];

fn main() {
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../bpf");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps asm/ under the multiarch include dir, which -target bpf does not search.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");

    for entry in ["include", "lib"] {
        for f in std::fs::read_dir(bpf_dir.join(entry)).expect("read bpf dir") {
            println!("cargo:rerun-if-changed={}", f.unwrap().path().display());
        }
    }
    for prog in PROGRAMS {
        let src = bpf_dir.join(format!("{prog}.c"));
        let obj = out_dir.join(format!("{prog}.o"));
        println!("cargo:rerun-if-changed={}", src.display());
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
            .arg(format!("-I{multiarch}"))
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {clang} (install clang and libbpf-dev): {e}"));
        assert!(status.success(), "clang failed on {}", src.display());
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
