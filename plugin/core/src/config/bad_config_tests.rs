//! Configs the parser refuses: each with its CNI error code and a message naming the key.

use super::tests::{with, REMOVE};
use super::*;
use crate::error::code;
use serde_json::json;

#[test]
fn bad_configs() {
    use code::{DECODE_FAILURE as D, INCOMPATIBLE_VERSION as V, INVALID_CONFIG as C};
    let raw: Vec<(&[u8], u32, &str)> = vec![
        (b"", D, "decode"),
        (b"{not json", D, "decode"),
        (b"{\"cniVersion\":\"1.0.0\"} trailing", D, "decode"),
        (b"[]", C, "JSON object"),
        (b"\"ebpf-masq\"", C, "JSON object"),
        (
            br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","portRange":"1-2","portRange":"3-4"}"#,
            C,
            "\"portRange\"",
        ),
        (
            br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","masqueradeRules":[{"source":"10.0.0.0/8","outInterface":"eth0","source":"10.1.0.0/16"}]}"#,
            C,
            "\"masqueradeRules[0].source\"",
        ),
    ];
    for (bytes, want_code, want) in raw {
        let e = parse_netconf(bytes).expect_err(&String::from_utf8_lossy(bytes));
        assert_eq!(
            e.code,
            want_code,
            "{}: {}",
            String::from_utf8_lossy(bytes),
            e.msg
        );
        assert!(
            e.msg.contains(want),
            "{}: {:?} lacks {want:?}",
            String::from_utf8_lossy(bytes),
            e.msg
        );
    }

    let cases: Vec<(Value, u32, &str)> = vec![
        // versions, identity
        (json!({"cniVersion": REMOVE}), V, "cniVersion"),
        (json!({"cniVersion": null}), V, "cniVersion"),
        (json!({"cniVersion": "0.2.0"}), V, "cniVersion"),
        (json!({"cniVersion": "2.0.0"}), V, "cniVersion"),
        (json!({"cniVersion": 1}), C, "cniVersion"),
        (json!({"type": "bridge"}), C, "\"type\""),
        (json!({"type": REMOVE}), C, "\"type\""),
        (json!({"type": null}), C, "\"type\""),
        (json!({"type": 7}), C, "\"type\""),
        (json!({"name": REMOVE}), C, "\"name\""),
        (json!({"name": ""}), C, "\"name\""),
        (json!({"name": ["x"]}), C, "\"name\""),
        // unknown keys
        (json!({"natOutgoig": true}), C, "\"natOutgoig\""),
        (
            json!({"nativeRoutingCIDRs": ["10.0.0.0/8"]}),
            C,
            "\"nativeRoutingCIDRs\"",
        ),
        (json!({"PortRange": "1-2"}), C, "did you mean \"portRange\""),
        // standard keys of the wrong type
        (json!({"prevResult": []}), C, "\"prevResult\""),
        (json!({"runtimeConfig": "x"}), C, "\"runtimeConfig\""),
        (json!({"disableCheck": "maybe"}), C, "\"disableCheck\""),
        (
            json!({"cni.dev/valid-attachments": {}}),
            C,
            "\"cni.dev/valid-attachments\"",
        ),
        (
            json!({"cni.dev/valid-attachments": [{"ifname": "eth0"}]}),
            C,
            "\"cni.dev/valid-attachments[0].containerID\"",
        ),
        (
            json!({"cni.dev/attachments": [{"containerID": "abc", "ifname": 3}]}),
            C,
            "\"cni.dev/attachments[0].ifname\"",
        ),
        // booleans
        (json!({"natOutgoing": "true"}), C, "\"natOutgoing\""),
        (json!({"masqLinkLocal": 1}), C, "\"masqLinkLocal\""),
        (
            json!({"masqLinkLocalIPv6": null}),
            C,
            "\"masqLinkLocalIPv6\"",
        ),
        (json!({"fastPath": "yes"}), C, "\"fastPath\""),
        // CIDRs
        (json!({"nativeRoutingCIDR": ""}), C, "\"nativeRoutingCIDR\""),
        (
            json!({"nativeRoutingCIDR": "10.0.0.1/8"}),
            C,
            "the network is 10.0.0.0/8",
        ),
        (json!({"nativeRoutingCIDR": 10}), C, "\"nativeRoutingCIDR\""),
        (
            json!({"nativeRoutingCIDR": ["10.0.0.0/8", "fd00::1/8"]}),
            C,
            "\"nativeRoutingCIDR[1]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["10.0.0.0/33"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["fd00::/129"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["10.0.0.0"]}),
            C,
            "10.0.0.0/32",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["10.0.0.0/x"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["10.0.0.0/+8"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["10.0.0.0/255.0.0.0"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": ["300.0.0.0/8"]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": "10.0.0.0/8"}),
            C,
            "\"nonMasqueradeCIDRs\"",
        ),
        (
            json!({"nonMasqueradeCIDRs": [""]}),
            C,
            "\"nonMasqueradeCIDRs[0]\"",
        ),
        (
            json!({"serviceCIDRs": ["10.96.0.0/12", 5]}),
            C,
            "\"serviceCIDRs[1]\"",
        ),
        (
            json!({"serviceCIDRs": ["10.96.0.1/12"]}),
            C,
            "\"serviceCIDRs[0]\"",
        ),
        // portRange
        (json!({"portRange": "0-100"}), C, "\"portRange\""),
        (json!({"portRange": "2000-1000"}), C, "\"portRange\""),
        (json!({"portRange": "1024"}), C, "\"portRange\""),
        (json!({"portRange": "a-b"}), C, "\"portRange\""),
        (json!({"portRange": "1024-70000"}), C, "\"portRange\""),
        (json!({"portRange": "-1-100"}), C, "\"portRange\""),
        (json!({"portRange": " 1024-2000"}), C, "\"portRange\""),
        (json!({"portRange": "1024-2000-3000"}), C, "\"portRange\""),
        (json!({"nodePortRange": "32767-30000"}), C, "\"nodePortRange\""),
        (json!({"nodePortRange": 30000}), C, "\"nodePortRange\""),
        (json!({"nodePortRange": "30000"}), C, "\"nodePortRange\""),
        // Nothing left for masqueraded flows.
        (json!({"portRange": "30000-32767"}), C, "\"nodePortRange\""),
        (json!({"portRange": "2000-3000", "nodePortRange": "1024-65535"}), C, "\"nodePortRange\""),
        (json!({"portRange": [1024, 2000]}), C, "\"portRange\""),
        // egressInterfaces
        (json!({"egressInterfaces": []}), C, "\"egressInterfaces\""),
        (
            json!({"egressInterfaces": "eth0"}),
            C,
            "\"egressInterfaces\"",
        ),
        (
            json!({"egressInterfaces": ["eth0", "eth0"]}),
            C,
            "\"egressInterfaces[1]\"",
        ),
        (
            json!({"egressInterfaces": ["averyveryverylongname"]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        (
            json!({"egressInterfaces": ["eth/0"]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        (
            json!({"egressInterfaces": ["eth 0"]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        (
            json!({"egressInterfaces": [".."]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        (
            json!({"egressInterfaces": [""]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        (
            json!({"egressInterfaces": [1]}),
            C,
            "\"egressInterfaces[0]\"",
        ),
        // masqueradeAddress
        (
            json!({"masqueradeAddress": "not-an-ip"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (
            json!({"masqueradeAddress": "0.0.0.0"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (
            json!({"masqueradeAddress": "127.0.0.1"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (
            json!({"masqueradeAddress": "224.0.0.1"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (
            json!({"masqueradeAddress": "::1"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (
            json!({"masqueradeAddress": "::"}),
            C,
            "\"masqueradeAddress\"",
        ),
        (json!({"masqueradeAddress": ["192.0.2.1", "192.0.2.1"]}), C, "\"masqueradeAddress[1]\""),
        (json!({"masqueradeAddress": ["192.0.2.0/31", "192.0.2.1"]}), C, "\"masqueradeAddress[1]\""),
        (json!({"masqueradeAddress": "192.0.2.0/24"}), C, "\"masqueradeAddress\""),
        (json!({"masqueradeAddress": ["192.0.2.1/30"]}), C, "\"masqueradeAddress[0]\""),
        (json!({"masqueradeAddress": ["10.0.0.0/26", "10.0.1.1"]}), C, "\"masqueradeAddress[1]\""),
        (json!({"masqueradeAddress": ["2001:db8::/64"]}), C, "\"masqueradeAddress[0]\""),
        (json!({"masqueradeAddress": [5]}), C, "\"masqueradeAddress[0]\""),
        (json!({"masqueradeAddress": ["192.0.2.1", "127.0.0.1"]}), C, "\"masqueradeAddress[1]\""),
        (json!({"masqueradeAddress": []}), C, "\"masqueradeAddress\""),
        // paths, logging
        (json!({"pinPath": "relative/path"}), C, "\"pinPath\""),
        (json!({"pinPath": "/"}), C, "\"pinPath\""),
        (json!({"pinPath": "/sys/fs/bpf/../etc"}), C, "\"pinPath\""),
        (json!({"pinPath": ""}), C, "\"pinPath\""),
        (json!({"pinPath": "/sys/fs/bpf/a\u{0}b"}), C, "\"pinPath\""),
        (json!({"logFile": "var/log/x.log"}), C, "\"logFile\""),
        (json!({"logFile": "/var/log/"}), C, "\"logFile\""),
        (json!({"logLevel": "verbose"}), C, "\"logLevel\""),
        (json!({"logLevel": 3}), C, "\"logLevel\""),
        // natMaxEntries
        (json!({"natMaxEntries": 100}), C, "\"natMaxEntries\""),
        (json!({"natMaxEntries": 16_777_217}), C, "\"natMaxEntries\""),
        (json!({"natMaxEntries": -5}), C, "\"natMaxEntries\""),
        (json!({"natMaxEntries": 4096.5}), C, "\"natMaxEntries\""),
        (json!({"natMaxEntries": "65536"}), C, "\"natMaxEntries\""),
        // podPortLimit
        (json!({"podPortLimit": 0}), C, "\"podPortLimit\": must be between 1 and 65535 ports"),
        (json!({"podPortLimit": -1}), C, "\"podPortLimit\": must be between 1 and 65535 ports"),
        (json!({"podPortLimit": 65_536}), C, "\"podPortLimit\": must be between 1 and 65535 ports"),
        (json!({"podPortLimit": 64.5}), C, "\"podPortLimit\": expected an integer number of ports"),
        (json!({"podPortLimit": "64"}), C, "\"podPortLimit\": expected an integer number of ports"),
        (json!({"podPortLimit": null}), C, "\"podPortLimit\""),
        (json!({"podPortlimit": 64}), C, "did you mean \"podPortLimit\""),
        // natTimeouts
        (json!({"natTimeouts": 60}), C, "\"natTimeouts\""),
        (json!({"natTimeouts": {"tcp": 0}}), C, "\"natTimeouts.tcp\""),
        (json!({"natTimeouts": {"udp": -1}}), C, "\"natTimeouts.udp\""),
        (json!({"natTimeouts": {"icmp": 1.5}}), C, "\"natTimeouts.icmp\""),
        (json!({"natTimeouts": {"tcpClosing": "240"}}), C, "\"natTimeouts.tcpClosing\""),
        (json!({"natTimeouts": {"udpOneShot": 0}}), C, "\"natTimeouts.udpOneShot\""),
        (json!({"natTimeouts": {"udp": 60, "udpOneShot": 90}}), C, "\"natTimeouts.udpOneShot\""),
        (json!({"natTimeouts": {"tcp": 604_801}}), C, "\"natTimeouts.tcp\""),
        (json!({"natTimeouts": {"tcp_closing": 30}}), C, "did you mean \"tcpClosing\""),
        // natFiltering
        (json!({"natFiltering": "full-cone"}), C, "\"natFiltering\""),
        (json!({"natFiltering": true}), C, "\"natFiltering\""),
        (
            json!({"masqueradeRules": [{"source": "192.168.6.0/24", "outInterface": "eth0", "natFiltering": "cone"}]}),
            C,
            "\"masqueradeRules[0].natFiltering\"",
        ),
        // masqueradeRules
        (json!({"masqueradeRules": {}}), C, "\"masqueradeRules\""),
        (
            json!({"masqueradeRules": ["x"]}),
            C,
            "\"masqueradeRules[0]\"",
        ),
        (
            json!({"masqueradeRules": [{"outInterface": "eth0"}]}),
            C,
            "\"masqueradeRules[0].source\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8"}]}),
            C,
            "\"masqueradeRules[0].outInterface\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0"},
                                       {"source": "10.0.0.1/8", "outInterface": "eth0"}]}),
            C,
            "\"masqueradeRules[1].source\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "toInterface": "x"}]}),
            C,
            "\"masqueradeRules[0].toInterface\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0:1"}]}),
            C,
            "\"masqueradeRules[0].outInterface\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": ["fd00::/8"]}]}),
            C,
            "\"masqueradeRules[0].except[0]\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": "10.1.0.0/16"}]}),
            C,
            "\"masqueradeRules[0].except\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "fd00::/8", "outInterface": "eth0", "toAddress": "192.0.2.1"}]}),
            C,
            "\"masqueradeRules[0].toAddress\"",
        ),
        (
            json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "toAddress": "255.255.255.255"}]}),
            C,
            "\"masqueradeRules[0].toAddress\"",
        ),
        (
            json!({"masqueradeRules": vec![json!({"source": "10.0.0.0/8", "outInterface": "eth0"}); MAX_MASQ_RULES + 1]}),
            C,
            "\"masqueradeRules\"",
        ),
    ];
    assert!(cases.len() >= 25);
    for (extra, want_code, want) in cases {
        let bytes = with(extra.clone());
        let e = match parse_netconf(&bytes) {
            Ok(c) => panic!("expected an error for {extra}, got {c:?}"),
            Err(e) => e,
        };
        assert_eq!(e.code, want_code, "{extra}: {}", e.msg);
        assert!(
            e.msg.contains(want),
            "{extra}: message {:?} lacks {want:?}",
            e.msg
        );
        if e.code != code::DECODE_FAILURE {
            assert!(
                e.msg.starts_with("invalid config key \""),
                "{extra}: {:?}",
                e.msg
            );
        }
    }
}
