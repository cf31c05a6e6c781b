//! podPortLimit and the annotation ebpf-masq.io/port-limit: the limit in force
//! for a pod (the lower of the two given), and each refusal naming the annotation.

use super::*;
use crate::error::code;
use serde_json::json;

#[test]
fn the_annotation_sets_or_lowers_the_networks_limit() {
    assert_eq!(effective_port_limit(None, None).unwrap(), None, "neither: no limit");
    assert_eq!(effective_port_limit(Some(200), None).unwrap(), Some(200), "the network's, for every pod");
    assert_eq!(effective_port_limit(None, Some("50")).unwrap(), Some(50), "the annotation alone sets it");
    assert_eq!(effective_port_limit(Some(200), Some("50")).unwrap(), Some(50), "the lower of the two");
    assert_eq!(effective_port_limit(Some(200), Some("200")).unwrap(), Some(200));
    assert_eq!(effective_port_limit(None, Some("65535")).unwrap(), Some(65535));
    assert_eq!(effective_port_limit(Some(1), Some("1")).unwrap(), Some(1));
    assert_eq!(effective_port_limit(None, Some("007")).unwrap(), Some(7), "a decimal string");
}

#[test]
fn a_bad_annotation_fails_naming_it() {
    let head = format!("annotation \"{PORT_LIMIT_ANNOTATION}\": ");
    for (network, ann, want) in [
        (Some(200), "201", "201 is above the network's podPortLimit 200; an annotation may only lower it"),
        (Some(1), "65535", "65535 is above the network's podPortLimit 1; an annotation may only lower it"),
        (None, "", "\"\" is not a port limit; expected a whole number of ports 1-65535"),
        (None, "abc", "\"abc\" is not a port limit"),
        (None, "-5", "\"-5\" is not a port limit"),
        (None, "+5", "\"+5\" is not a port limit"),
        (None, " 50", "\" 50\" is not a port limit"),
        (None, "12.5", "\"12.5\" is not a port limit"),
        (Some(200), "0", "\"0\" is out of range; a port limit is 1-65535 ports"),
        (None, "65536", "\"65536\" is out of range"),
        (None, "99999999999999999999999", "is out of range"),
    ] {
        let e = effective_port_limit(network, Some(ann)).expect_err(ann);
        assert_eq!(e.code, code::INVALID_CONFIG, "{ann}: {}", e.msg);
        assert!(e.msg.starts_with(&head) && e.msg.contains(want), "{ann}: {:?} lacks {want:?}", e.msg);
    }
}

#[test]
fn the_network_key_round_trips() {
    let c = json!({"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "podPortLimit": 128,
                   "runtimeConfig": {CAP_POD_ANNOTATIONS: {PORT_LIMIT_ANNOTATION: "64"}}});
    let c = parse_netconf(c.to_string().as_bytes()).unwrap();
    assert_eq!(c.masq.pod_port_limit, Some(128));
    // The annotation is kept with the others; only ADD weighs it against the network's limit.
    let ann = c.pod_annotations.get(PORT_LIMIT_ANNOTATION).map(String::as_str);
    assert_eq!(effective_port_limit(c.masq.pod_port_limit, ann).unwrap(), Some(64));
    assert_eq!(masq_to_json(&c.masq)["podPortLimit"], json!(128));
    assert_eq!(masq_to_json(&MasqOptions::default()).get("podPortLimit"), None);
}
