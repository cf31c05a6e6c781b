//! `ebpf-masq apply --conf FILE`: reconcile node-wide state with no pod involved
//! (boot, tunnel-only nodes). Idempotent.

use std::path::Path;

use ebpf_masq_core::{bpf::loader::Pins, config, error::{code, Error, Result}, logging, node};

pub fn run(conf_path: &Path) -> Result<()> {
    let bytes = std::fs::read(conf_path)
        .map_err(|e| Error::new(code::IO_FAILURE, format!("read {}: {e}", conf_path.display())))?;
    let conf = config::parse_conf_file(&bytes)?;
    logging::init(conf.masq.log_level, conf.masq.log_file.as_deref());
    let pins = Pins::new(&conf.masq.pin_path);
    let _lock = node::lock(&pins)?;
    let uplinks = node::reconcile(&pins, &conf.masq)?;
    let names: Vec<&str> = uplinks.iter().map(|u| u.name.as_str()).collect();
    log::info!("verb=apply conf={} uplinks={} result=ok", conf_path.display(), names.join(","));
    println!(
        "applied {}: uplinks [{}], {} rule(s), pins under {}",
        conf_path.display(),
        names.join(", "),
        conf.masq.masquerade_rules.len(),
        pins.root.display()
    );
    Ok(())
}
