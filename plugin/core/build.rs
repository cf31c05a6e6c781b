//! Compiles the C data plane in ../../bpf with clang (-target bpf) into OUT_DIR;
//! src/bpf/loader.rs embeds the objects with include_bytes!. Generates Rust's view
//! of the ABI headers (bpf/include/masq_abi.h and what it includes) with bindgen
//! into OUT_DIR/abi.rs, which src/bpf/abi/generated.rs includes.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
};

use bindgen::callbacks::{DeriveTrait, EnumVariantValue, ImplementsTrait, IntKind, ParseCallbacks};

const PROGRAMS: &[&str] = &["veth", "uplink", "placeholder"];

fn main() {
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps asm/ under the multiarch include dir, which -target bpf does not search.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");

    for entry in ["include", "lib"] {
        rerun_if_any_changed(&bpf_dir.join(entry));
    }
    // Extra clang arguments, for measuring builds only (e.g. -DMASQ_NO_EVENTS: the
    // events compiled out, docs/monitor.md); a release never sets it.
    let extra = env::var("EBPF_MASQ_BPF_CFLAGS").unwrap_or_default();
    for prog in PROGRAMS {
        let src = bpf_dir.join(format!("{prog}.c"));
        let obj = out_dir.join(format!("{prog}.o"));
        println!("cargo:rerun-if-changed={}", src.display());
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
            .arg(format!("-I{multiarch}"))
            .args(extra.split_whitespace())
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {clang} (install clang and libbpf-dev): {e}"));
        assert!(status.success(), "clang failed on {}", src.display());
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=EBPF_MASQ_BPF_CFLAGS");
    generate_abi(&bpf_dir.join("include"), &multiarch, &out_dir);
}

/// What the generator learns while bindgen walks the headers, for the tables
/// it appends: every struct's fields (the BTF test's layouts) and every integer
/// macro it emitted (the test that none was dropped).
#[derive(Debug, Default)]
struct Seen {
    fields: Vec<(String, String)>,
    macros: Vec<String>,
}

/// How the Rust view differs from plain bindgen output, in one place.
#[derive(Debug)]
struct AbiCallbacks(Arc<Mutex<Seen>>);

impl ParseCallbacks for AbiCallbacks {
    /// Flags of a u8 `flags`/`close` field are u8; the sweep's `armed` bits and a
    /// pair generation's taken bit u64; lengths and counts that size Rust arrays
    /// usize; the rest u32.
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        let mut seen = self.0.lock().unwrap();
        if !seen.macros.iter().any(|m| m == name) {
            seen.macros.push(name.to_string());
        }
        let usize_kind = IntKind::Custom { name: "usize", is_signed: false };
        Some(match name {
            n if n.starts_with("NAT_F_") || n.starts_with("NAT_C_") => IntKind::U8,
            "NAT_GC_WALK6" => IntKind::U32,
            n if n.starts_with("NAT_GC_") => IntKind::U64,
            "EVENTS_LEASE_NS" | "NAT_GEN_TAKEN" => IntKind::U64,
            n if n.ends_with("_LEN") => usize_kind,
            "MASQ_POOL_MAX" | "ATT_MAX_ADDRS" | "POD_HOST_PORTS_MAX" => usize_kind,
            _ => IntKind::U32,
        })
    }

    /// Counters and drop reasons go in modules named for the map (`counter::NAT_CREATED`),
    /// so their C prefix would only repeat it.
    fn enum_variant_name(&self, enum_name: Option<&str>, name: &str, _: EnumVariantValue) -> Option<String> {
        let prefix = match enum_name? {
            "enum masq_counter" => "CNT_",
            "enum masq_drop_reason" => "DROP_",
            _ => return None,
        };
        name.strip_prefix(prefix).map(str::to_string)
    }

    /// The array stand-ins for `__be16`, `__be32`, `struct in6_addr` and `struct
    /// bpf_timer` (see generated.rs) derive everything an array does.
    fn blocklisted_type_implements_trait(&self, _name: &str, _t: DeriveTrait) -> Option<ImplementsTrait> {
        Some(ImplementsTrait::Yes)
    }

    fn field_visibility(&self, info: bindgen::callbacks::FieldInfo<'_>) -> Option<bindgen::FieldVisibilityKind> {
        let field = (info.type_name.to_string(), info.field_name.to_string());
        let mut seen = self.0.lock().unwrap();
        if !seen.fields.contains(&field) {
            seen.fields.push(field);
        }
        None
    }
}

/// Rust's view of bpf/include/masq_abi.h: its structs, #defines and enums, with
/// network-order fields as byte arrays (as the maps hold them), then LAYOUTS (each
/// struct's size and member offsets, for the BTF test) and MACROS (the integer
/// #defines bindgen emitted, for the test that it dropped none).
fn generate_abi(include: &Path, multiarch: &str, out_dir: &Path) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let header = include.join("masq_abi.h");
    let bindings = bindgen::Builder::default()
        .header(header.display().to_string())
        .clang_args(["-target", "bpf", &format!("-I{multiarch}")])
        .allowlist_file(format!("{}/.*", include.display()))
        // Network-order values stay bytes in Rust, as the maps hold them; the sweep's
        // timer is opaque (see generated.rs).
        .blocklist_type("__be16|__be32|in6_addr.*|bpf_timer")
        .ctypes_prefix("crate::bpf::abi::generated::ctypes")
        .use_core()
        .constified_enum("excl_reason|pod_net_origin")
        .constified_enum_module("masq_counter|masq_drop_reason")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .derive_ord(true)
        // Byte arrays stand in for aligned C types: sizes and offsets agree (the BTF
        // test holds every one), alignment does not, so bindgen's tests would fail.
        .layout_tests(false)
        // NAT_MAP_FLAGS is made of a kernel enum member, which only clang evaluates.
        .clang_macro_fallback()
        .clang_macro_fallback_build_dir(out_dir)
        .parse_callbacks(Box::new(AbiCallbacks(seen.clone())))
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on {}: {e}", header.display()));
    let mut code = bindings.to_string();
    let seen = seen.lock().unwrap();
    code.push_str("\n/// Every generated struct: C name, size and (member, offset), for the BTF test.\n");
    code.push_str("#[cfg(test)]\npub const LAYOUTS: &[(&str, usize, &[(&str, usize)])] = &[\n");
    let mut structs: Vec<&str> = seen.fields.iter().map(|(t, _)| t.as_str()).collect();
    structs.dedup(); // each struct's fields come together
    for s in structs {
        let fields: Vec<String> = seen
            .fields
            .iter()
            .filter(|(t, _)| t == s)
            .map(|(_, f)| format!("(\"{f}\", core::mem::offset_of!({s}, {f}))"))
            .collect();
        code.push_str(&format!("    (\"{s}\", core::mem::size_of::<{s}>(), &[{}]),\n", fields.join(", ")));
    }
    code.push_str("];\n/// Every integer #define bindgen emitted.\n#[cfg(test)]\npub const MACROS: &[&str] = &[");
    let emitted = |m: &&String| code.contains(&format!("pub const {m}: "));
    let macros: Vec<String> = seen.macros.iter().filter(emitted).map(|m| format!("\"{m}\"")).collect();
    code.push_str(&macros.join(", "));
    code.push_str("];\n");
    std::fs::write(out_dir.join("abi.rs"), code).expect("write abi.rs");
}

/// A rerun-if-changed line for every file under `dir`, sub-folders too (bpf/lib/nat/),
/// so an edited header rebuilds the objects by its own name.
fn rerun_if_any_changed(dir: &std::path::Path) {
    for f in std::fs::read_dir(dir).expect("read bpf dir") {
        let path = f.expect("read bpf dir entry").path();
        if path.is_dir() {
            rerun_if_any_changed(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
