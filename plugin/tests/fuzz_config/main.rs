//! Property tests (proptest) for everything the plugin parses from untrusted input:
//! the network config (`parse_netconf`, `parse_conf_file`), the prevResult
//! (`parse_prev_result`) and, end to end, the real binary's stdin on a CNI ADD.
//!
//! Properties:
//! * no input panics;
//! * every error is a CNI error with code 1 (version), 6 (decode) or 7 (config),
//!   and its `to_cni_json` is a JSON object with that code and a non-empty msg;
//! * every config that parses round-trips through `masq_to_json` (also as a
//!   conflist entry through `parse_conf_file`);
//! * `CNI_COMMAND=ADD` with garbage on stdin prints exactly one JSON error object
//!   on stdout and exits 1.
//!
//! Case counts are bounded so the whole file runs in a few seconds with
//! `cargo test --release`; EBPF_MASQ_FUZZ_CASES_MULT multiplies them for a soak.
//! Needs no privileges: nothing here touches bpffs or the network (binary runs
//! only get inputs the parser rejects, so they stop before any side effect).

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};

use ebpf_masq::config::{self, masq_to_json, parse_conf_file, parse_netconf, NetConf};
use ebpf_masq::error::Error;
use ebpf_masq::prevresult::parse_prev_result;
use ipnetwork::IpNetwork;
use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;
use serde_json::{json, Map, Value};

mod strategies;
use strategies::*;

/// Codes a parse error may carry: incompatible version, decode failure, invalid config.
const PARSE_CODES: [u32; 3] = [1, 6, 7];

fn cases(base: u32) -> PtConfig {
    let mult: u32 = std::env::var("EBPF_MASQ_FUZZ_CASES_MULT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    PtConfig {
        cases: base.saturating_mul(mult),
        // Never write proptest-regressions/ files into the source tree; a failure
        // prints its minimal input, which belongs in a unit test.
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..PtConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Checks shared by every property.

/// The error is one a parser may return, and its CNI JSON is well formed.
fn check_error(e: &Error, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        PARSE_CODES.contains(&e.code),
        "{what}: unexpected code {} ({})",
        e.code,
        e.msg
    );
    prop_assert!(!e.msg.is_empty(), "{what}: empty message");
    for version in config::SUPPORTED_CNI_VERSIONS {
        let text = serde_json::to_string(&e.to_cni_json(version))
            .map_err(|x| TestCaseError::fail(format!("{what}: to_cni_json not serializable: {x}")))?;
        let back: Value = serde_json::from_str(&text)
            .map_err(|x| TestCaseError::fail(format!("{what}: to_cni_json not JSON: {x}: {text}")))?;
        prop_assert_eq!(back["code"].as_u64(), Some(u64::from(e.code)), "{}: {}", what, text);
        prop_assert_eq!(back["msg"].as_str(), Some(e.msg.as_str()), "{}: {}", what, text);
        prop_assert_eq!(back["cniVersion"].as_str(), Some(*version), "{}: {}", what, text);
    }
    Ok(())
}

/// A parsed config survives masq_to_json -> parse, alone and as a conflist entry.
fn check_round_trip(c: &NetConf, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(c.plugin_type.as_str(), config::PLUGIN_TYPE);
    let mut entry = masq_to_json(&c.masq);
    prop_assert_eq!(&entry["type"], "ebpf-masq");

    let mut single = entry.clone();
    single["cniVersion"] = json!(c.cni_version);
    single["name"] = json!(c.name);
    let bytes = serde_json::to_vec(&single).expect("serialize");
    match parse_netconf(&bytes) {
        Ok(back) => {
            prop_assert_eq!(&back.masq, &c.masq, "{}: {}", what, single);
            prop_assert_eq!(&back.name, &c.name);
            prop_assert_eq!(&back.cni_version, &c.cni_version);
        }
        Err(e) => return Err(TestCaseError::fail(format!("{what}: round trip rejected: {e}: {single}"))),
    }

    // The same entry inside a conflist, after another plugin (libcni's layout).
    if let Some(o) = entry.as_object_mut() {
        o.insert("cniVersion".into(), json!("0.4.0")); // overridden by the list's
    }
    let list = json!({
        "cniVersion": c.cni_version, "name": c.name,
        "plugins": [{"type": "bridge", "bridge": "cni0"}, entry],
    });
    match parse_conf_file(&serde_json::to_vec(&list).expect("serialize")) {
        Ok(back) => {
            prop_assert_eq!(&back.masq, &c.masq, "{}: {}", what, list);
            prop_assert_eq!(&back.name, &c.name);
            prop_assert_eq!(&back.cni_version, &c.cni_version);
        }
        Err(e) => return Err(TestCaseError::fail(format!("{what}: conflist round trip rejected: {e}: {list}"))),
    }
    Ok(())
}

/// Run both config parsers on bytes and check whatever they return.
fn check_config_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let shown = String::from_utf8_lossy(bytes);
    match parse_netconf(bytes) {
        Ok(c) => check_round_trip(&c, &format!("parse_netconf({shown})"))?,
        Err(e) => check_error(&e, &format!("parse_netconf({shown})"))?,
    }
    match parse_conf_file(bytes) {
        Ok(c) => check_round_trip(&c, &format!("parse_conf_file({shown})"))?,
        Err(e) => check_error(&e, &format!("parse_conf_file({shown})"))?,
    }
    Ok(())
}

fn check_prev_result(v: &Value) -> Result<(), TestCaseError> {
    match parse_prev_result(v) {
        Ok(r) => {
            // Accessors never panic and stay within what was parsed.
            for ifname in ["eth0", "net1", ""] {
                let ips = r.container_ips(ifname);
                for a in &ips {
                    prop_assert!(r.ips.iter().any(|i| i.address.ip() == *a));
                }
                let mut dedup = ips.clone();
                dedup.dedup();
                prop_assert_eq!(dedup.len(), ips.len());
            }
            for h in r.host_interfaces() {
                prop_assert!(r.interfaces.iter().any(|i| i.name == h && i.sandbox.is_none()));
            }
            for ip in &r.ips {
                if let Some(i) = ip.interface {
                    prop_assert!(i < r.interfaces.len(), "interface index {} out of range", i);
                }
            }
        }
        Err(e) => check_error(&e, &format!("parse_prev_result({v})"))?,
    }
    // Embedded in an otherwise valid plugin config: the config parser must not choke either.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "prevResult": v});
    check_config_bytes(&serde_json::to_vec(&conf).expect("serialize"))
}

// ---------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn arbitrary_json_config(v in arb_json(CONFIG_KEYS)) {
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
    }

    /// Objects that already carry the required keys get past the first checks.
    #[test]
    fn arbitrary_object_with_required_keys(
        mut v in proptest::collection::vec((key_string(CONFIG_KEYS), arb_json(CONFIG_KEYS)), 0..8)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ver in proptest::sample::select(vec!["1.0.0", "0.4.0", "1.1.0", "9.9.9"]),
    ) {
        if let Some(o) = v.as_object_mut() {
            o.entry("cniVersion").or_insert(json!(ver));
            o.entry("name").or_insert(json!("net"));
            o.entry("type").or_insert(json!("ebpf-masq"));
        }
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
        // The same keys as the ebpf-masq entry of a conflist.
        let list = json!({"cniVersion": ver, "name": "net", "plugins": [v]});
        check_config_bytes(&serde_json::to_vec(&list).expect("serialize"))?;
    }

    #[test]
    fn arbitrary_bytes_config(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_config_bytes(&b)?;
    }

    #[test]
    fn valid_configs_parse_and_round_trip(v in valid_config()) {
        let bytes = serde_json::to_vec(&v).expect("serialize");
        match parse_netconf(&bytes) {
            Ok(c) => check_round_trip(&c, &v.to_string())?,
            Err(e) => return Err(TestCaseError::fail(format!("valid config rejected: {e}: {v}"))),
        }
        // Pretty-printed is the same config.
        let pretty = serde_json::to_vec_pretty(&v).expect("serialize");
        prop_assert_eq!(
            parse_netconf(&pretty).map(|c| c.masq).ok(),
            parse_netconf(&bytes).map(|c| c.masq).ok()
        );
    }

    #[test]
    fn mutated_valid_configs(v in valid_config(), ms in proptest::collection::vec(mutation(), 1..4)) {
        let mut v = v;
        for m in &ms {
            apply(&mut v, m);
        }
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
    }

    #[test]
    fn byte_damaged_valid_configs(v in valid_config(), es in proptest::collection::vec(byte_edit(), 1..4)) {
        let mut b = serde_json::to_vec(&v).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        check_config_bytes(&b)?;
        if let Some(ByteEdit::DuplicateKey(k, _)) = es.last() {
            // A repeated top-level key never parses: it must not silently win or lose.
            if b.first() == Some(&b'{') && es.len() == 1 && v.get(k.as_str()).is_some() {
                let r = parse_netconf(&b);
                prop_assert!(r.is_err(), "duplicate {:?} accepted: {}", k, String::from_utf8_lossy(&b));
            }
        }
    }

    #[test]
    fn arbitrary_prev_result(v in arb_json(PREV_KEYS)) {
        check_prev_result(&v)?;
    }

    #[test]
    fn structured_prev_result(v in prev_result_like(), ms in proptest::collection::vec(mutation(), 0..2)) {
        let mut v = v;
        for m in &ms {
            apply(&mut v, m);
        }
        check_prev_result(&v)?;
    }
}

// ---------------------------------------------------------------------------
// The real binary on garbage stdin.

/// Run `ebpf-masq` as a runtime would for ADD, with `stdin`; (exit code, stdout, stderr).
fn run_add(stdin: &[u8]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebpf-masq"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "fuzz-config-0")
        .env("CNI_NETNS", "/nonexistent/ebpf-masq-fuzz")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ebpf-masq");
    {
        let mut w = child.stdin.take().expect("stdin");
        // The plugin may exit before reading everything; a broken pipe is fine.
        let _ = w.write_all(stdin);
    }
    let out = child.wait_with_output().expect("wait ebpf-masq");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check_binary_rejects(stdin: &[u8]) -> Result<(), TestCaseError> {
    // Only inputs the parser rejects: a valid config would make ADD act on the node.
    let want = match parse_netconf(stdin) {
        Ok(_) => return Err(TestCaseError::reject("input is a valid config")),
        Err(e) => e,
    };
    let (rc, out, err) = run_add(stdin);
    let shown = String::from_utf8_lossy(stdin);
    prop_assert_eq!(rc, Some(1), "exit code for {:?}; stdout {:?} stderr {:?}", shown, out, err);
    // Exactly one JSON value on stdout, an object, and nothing else.
    let mut values = serde_json::Deserializer::from_str(&out).into_iter::<Value>();
    let first = match values.next() {
        Some(Ok(v)) => v,
        other => return Err(TestCaseError::fail(format!("stdout is not JSON ({other:?}): {out:?}"))),
    };
    prop_assert!(values.next().is_none(), "more than one JSON value on stdout: {:?}", out);
    prop_assert_eq!(out.trim_end().lines().count(), 1, "stdout is not one line: {:?}", out);
    let o = first.as_object().ok_or_else(|| TestCaseError::fail(format!("not an object: {out}")))?;
    let code = o.get("code").and_then(Value::as_u64);
    prop_assert!(code.is_some_and(|c| PARSE_CODES.contains(&(c as u32))), "code: {}", out);
    prop_assert_eq!(code, Some(u64::from(want.code)), "binary and library disagree: {}", out);
    prop_assert!(o.get("msg").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "msg: {}", out);
    prop_assert!(o.get("cniVersion").and_then(Value::as_str).is_some(), "cniVersion: {}", out);
    Ok(())
}

proptest! {
    #![proptest_config(cases(12))]

    #[test]
    fn binary_add_random_stdin(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_binary_rejects(&b)?;
    }

    #[test]
    fn binary_add_damaged_config(v in valid_config(), es in proptest::collection::vec(byte_edit(), 1..3)) {
        let mut b = serde_json::to_vec(&v).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        check_binary_rejects(&b)?;
    }
}

#[test]
fn binary_add_fixed_garbage() {
    let cases: &[&[u8]] = &[
        b"",
        b"\0",
        b"null",
        b"[]",
        b"{}",
        b"{\"cniVersion\":\"1.0.0\"}",
        b"{\"cniVersion\":\"9.9.9\",\"name\":\"n\",\"type\":\"ebpf-masq\"}",
        b"{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"type\":\"ebpf-masq\",\"portRange\":\"0-1\"}",
        b"{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"type\":\"ebpf-masq\",\"bogus\":1}",
        b"\xef\xbb\xbf{}",
        b"\xff\xfe\xfd",
    ];
    for c in cases {
        if let Err(e) = check_binary_rejects(c) {
            panic!("{:?}: {e}", String::from_utf8_lossy(c));
        }
    }
    // Deep nesting and a large body: still one error object, no crash.
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    check_binary_rejects(deep.as_bytes()).expect("deep nesting");
    let big = format!("{{\"cniVersion\":\"1.0.0\",\"name\":\"{}\"", "x".repeat(4 << 20));
    check_binary_rejects(big.as_bytes()).expect("4 MiB truncated config");
}

/// The generators are worth their time: mutated configs reach every outcome (accepted,
/// and each error code), so the properties above are not only checking early exits.
#[test]
fn generators_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let json_mut = (valid_config(), proptest::collection::vec(mutation(), 1..3));
    let byte_mut = (valid_config(), proptest::collection::vec(byte_edit(), 1..3));
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..400 {
        let (mut v, ms) = json_mut.new_tree(&mut runner).expect("tree").current();
        for m in &ms {
            apply(&mut v, m);
        }
        let (v2, es) = byte_mut.new_tree(&mut runner).expect("tree").current();
        let mut b = serde_json::to_vec(&v2).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        for bytes in [serde_json::to_vec(&v).expect("serialize"), b] {
            let k = match parse_netconf(&bytes) {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("code {}", e.code),
            };
            *seen.entry(k).or_default() += 1;
        }
    }
    for (want, min) in [("ok", 20), ("code 1", 1), ("code 6", 20), ("code 7", 20)] {
        assert!(seen.get(want).copied().unwrap_or(0) >= min, "{want} reached too rarely: {seen:?}");
    }
}
