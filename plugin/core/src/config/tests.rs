use super::*;
use super::diag::suggest;
use super::keys::MASQ_KEYS;
use crate::error::code;
use serde_json::json;

fn base() -> Value {
    json!({"cniVersion": "1.0.0", "name": "podnet", "type": "ebpf-masq"})
}

pub(super) const REMOVE: &str = "<remove>";

/// `base()` with `extra` merged in (a value of `REMOVE` removes the key).
pub(super) fn with(extra: Value) -> Vec<u8> {
    let mut b = base();
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v == REMOVE {
                o.remove(k);
            } else {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::to_vec(&b).expect("serialize")
}

pub(super) fn parse_ok(bytes: &[u8]) -> NetConf {
    match parse_netconf(bytes) {
        Ok(c) => c,
        Err(e) => panic!(
            "expected success for {}: {e}",
            String::from_utf8_lossy(bytes)
        ),
    }
}

pub(super) fn cidr(s: &str) -> IpNetwork {
    s.parse().expect("test CIDR")
}

#[test]
fn defaults() {
    let c = parse_ok(&with(json!({})));
    assert_eq!(c.cni_version, "1.0.0");
    assert_eq!(c.name, "podnet");
    assert_eq!(c.plugin_type, "ebpf-masq");
    assert_eq!(c.prev_result, None);
    assert_eq!(c.valid_attachments, None);
    assert_eq!(c.masq, MasqOptions::default());
    let d = MasqOptions::default();
    assert!(d.nat_outgoing);
    assert!(d.native_routing_cidrs.is_empty() && d.non_masquerade_cidrs.is_empty());
    assert!(!d.masq_link_local && !d.masq_link_local_ipv6 && !d.fast_path);
    assert_eq!(d.egress_interfaces, None);
    assert_eq!(
        (d.masquerade_address_v4, d.masquerade_address_v6),
        (None, None)
    );
    // iptables MASQUERADE's space; NodePorts (Kubernetes' default range) never handed out.
    assert_eq!(d.port_range, (1024, 65535));
    assert_eq!(d.node_port_range, Some((30000, 32767)));
    assert_eq!(d.pin_path, PathBuf::from("/sys/fs/bpf/ebpf-masq"));
    assert_eq!(d.log_level, log::LevelFilter::Info);
    assert_eq!(d.log_file, None);
    assert!(d.masquerade_rules.is_empty() && d.service_cidrs.is_empty());
    assert_eq!(d.nat_max_entries, 1 << 20);
    assert_eq!(d.pod_port_limit, None, "no port limit unless asked for");
    // The RFCs' floors: RFC 5382 REQ-5 (2 h 4 min established, 4 min transitory),
    // RFC 4787 REQ-5 (UDP 2 min), RFC 5508 REQ-1 b (ICMP query 60 s).
    let t = d.nat_timeouts;
    assert!(t.tcp >= 7440 && t.tcp_closing >= 240 && t.udp >= 120 && t.icmp >= 60, "{t:?}");
    // The default config emits nothing but its type.
    assert_eq!(masq_to_json(&d), json!({"type": "ebpf-masq"}));
}

#[test]
fn good_configs() {
    type Check = fn(&NetConf);
    let cases: Vec<(Value, Check)> = vec![
        (json!({"cniVersion": "0.4.0"}), |c| {
            assert_eq!(c.cni_version, "0.4.0")
        }),
        (
            json!({"cniVersion": "1.1.0", "cniVersions": ["1.0.0", "1.1.0"]}),
            |c| assert_eq!(c.cni_version, "1.1.0"),
        ),
        (json!({"natOutgoing": false}), |c| {
            assert!(!c.masq.nat_outgoing)
        }),
        (json!({"nativeRoutingCIDR": "10.0.0.0/8"}), |c| {
            assert_eq!(c.masq.native_routing_cidrs, vec![cidr("10.0.0.0/8")])
        }),
        (
            json!({"nativeRoutingCIDR": ["10.0.0.0/8", "fd00::/8"]}),
            |c| {
                assert_eq!(
                    c.masq.native_routing_cidrs,
                    vec![cidr("10.0.0.0/8"), cidr("fd00::/8")]
                )
            },
        ),
        (json!({"nativeRoutingCIDR": []}), |c| {
            assert!(c.masq.native_routing_cidrs.is_empty())
        }),
        (
            json!({"nonMasqueradeCIDRs": ["192.168.0.0/16", "0.0.0.0/0", "2001:db8::/32", "10.1.2.3/32"]}),
            |c| {
                assert_eq!(c.masq.non_masquerade_cidrs.len(), 4);
                assert_eq!(c.masq.non_masquerade_cidrs[1].prefix(), 0);
            },
        ),
        (
            json!({"masqLinkLocal": true, "masqLinkLocalIPv6": true, "fastPath": true}),
            |c| {
                assert!(
                    c.masq.masq_link_local && c.masq.masq_link_local_ipv6 && c.masq.fast_path
                )
            },
        ),
        (
            json!({"egressInterfaces": ["eth0", "bond0.100", "enp0s31f6", "wg-tunnel_12345"]}),
            |c| assert_eq!(c.masq.egress_interfaces.as_ref().map(Vec::len), Some(4)),
        ),
        (json!({"masqueradeAddress": "192.0.2.10"}), |c| {
            assert_eq!(
                c.masq.masquerade_address_v4,
                Some(Ipv4Addr::new(192, 0, 2, 10))
            );
            assert_eq!(c.masq.masquerade_address_v6, None);
        }),
        (
            json!({"masqueradeAddress": ["2001:db8::10", "192.0.2.10"]}),
            |c| {
                assert_eq!(
                    c.masq.masquerade_address_v4,
                    Some(Ipv4Addr::new(192, 0, 2, 10))
                );
                assert_eq!(c.masq.masquerade_address_v6, "2001:db8::10".parse().ok());
            },
        ),
        (json!({"masqueradeAddress": ["192.0.2.10", "2001:db8::10", "192.0.2.11"]}), |c| {
            let m = &c.masq;
            assert_eq!(m.masquerade_pool_v4, [Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)]);
            assert_eq!((m.masquerade_address_v4, m.masquerade_pool_v6.len()), (Some(Ipv4Addr::new(192, 0, 2, 10)), 1));
        }),
        (json!({"masqueradeAddress": ["192.0.2.8/30", "192.0.2.1/32"]}), |c| {
            let p: Vec<String> = c.masq.masquerade_pool_v4.iter().map(|a| a.to_string()).collect();
            assert_eq!(p, ["192.0.2.8", "192.0.2.9", "192.0.2.10", "192.0.2.11", "192.0.2.1"]);
        }),
        (json!({"portRange": "40000-40000"}), |c| {
            assert_eq!(c.masq.port_range, (40000, 40000))
        }),
        (json!({"portRange": "1-65535"}), |c| {
            assert_eq!(c.masq.port_range, (1, 65535))
        }),
        (json!({"nodePortRange": ""}), |c| assert_eq!(c.masq.node_port_range, None)),
        (json!({"nodePortRange": "30000-30100"}), |c| {
            assert_eq!(c.masq.node_port_range, Some((30000, 30100)))
        }),
        // Part of portRange skipped is fine (some ports stay).
        (json!({"portRange": "30000-40000"}), |c| {
            assert_eq!((c.masq.port_range, c.masq.node_port_range), ((30000, 40000), Some((30000, 32767))))
        }),
        (json!({"pinPath": "/sys/fs/bpf/other/"}), |c| {
            assert_eq!(c.masq.pin_path, PathBuf::from("/sys/fs/bpf/other"))
        }),
        (
            json!({"logLevel": "DEBUG", "logFile": "/var/log/ebpf-masq.log"}),
            |c| {
                assert_eq!(c.masq.log_level, log::LevelFilter::Debug);
                assert_eq!(
                    c.masq.log_file,
                    Some(PathBuf::from("/var/log/ebpf-masq.log"))
                );
            },
        ),
        (json!({"logLevel": "off"}), |c| {
            assert_eq!(c.masq.log_level, log::LevelFilter::Off)
        }),
        (json!({"logLevel": "Trace"}), |c| {
            assert_eq!(c.masq.log_level, log::LevelFilter::Trace)
        }),
        (json!({"natMaxEntries": 1024}), |c| {
            assert_eq!(c.masq.nat_max_entries, 1024)
        }),
        (json!({"natTimeouts": {"udp": 10}}), |c| {
            assert_eq!((c.masq.nat_timeouts.udp, c.masq.nat_timeouts.udp_one_shot), (10, 10), "one-shot follows a short udp")
        }),
        (json!({"natTimeouts": {"udpOneShot": 5}}), |c| {
            assert_eq!((c.masq.nat_timeouts.udp, c.masq.nat_timeouts.udp_one_shot), (120, 5))
        }),
        (json!({"natTimeouts": {"udp": 300, "tcpClosing": 30}}), |c| {
            let t = c.masq.nat_timeouts;
            assert_eq!((t.tcp, t.tcp_closing, t.udp, t.icmp), (7440, 30, 300, 60), "the rest keep their defaults")
        }),
        (json!({"natFiltering": "endpoint-independent"}), |c| {
            assert_eq!(c.masq.nat_filtering, NatFiltering::EndpointIndependent)
        }),
        (json!({"natFiltering": "address-dependent"}), |c| {
            assert_eq!(c.masq.nat_filtering, NatFiltering::AddressDependent)
        }),
        (json!({"natTimeouts": {}}), |c| {
            assert_eq!(c.masq.nat_timeouts, NatTimeouts::default())
        }),
        (json!({"natMaxEntries": 16_777_216}), |c| {
            assert_eq!(c.masq.nat_max_entries, 16_777_216)
        }),
        (json!({"podPortLimit": 1}), |c| assert_eq!(c.masq.pod_port_limit, Some(1))),
        (json!({"podPortLimit": 64}), |c| assert_eq!(c.masq.pod_port_limit, Some(64))),
        (json!({"podPortLimit": 65_535}), |c| assert_eq!(c.masq.pod_port_limit, Some(65_535))),
        (
            json!({"serviceCIDRs": ["10.96.0.0/12", "fd00:10:96::/112"]}),
            |c| {
                assert_eq!(
                    c.masq.service_cidrs,
                    vec![cidr("10.96.0.0/12"), cidr("fd00:10:96::/112")]
                )
            },
        ),
        (
            json!({"masqueradeRules": [
                {"source": "10.244.0.0/16", "outInterface": "eth1", "except": ["10.244.5.0/24"], "toAddress": "192.0.2.7"},
                {"source": "fd00:244::/64", "outInterface": "wg0"}
            ]}),
            |c| {
                let r = &c.masq.masquerade_rules;
                assert_eq!(r.len(), 2);
                assert_eq!(r[0].source, cidr("10.244.0.0/16"));
                assert_eq!(r[0].out_interface, "eth1");
                assert_eq!(r[0].except, vec![cidr("10.244.5.0/24")]);
                assert_eq!(r[0].to_address, "192.0.2.7".parse().ok());
                assert_eq!(r[1].except, vec![]);
                assert_eq!(r[1].to_address, None);
            },
        ),
        (
            json!({"prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.22.0.5/16"}], "dns": {}}}),
            |c| {
                assert_eq!(
                    c.prev_result
                        .as_ref()
                        .map(|p| p["ips"][0]["address"].clone()),
                    Some(json!("10.22.0.5/16"))
                )
            },
        ),
        (
            // Standard keys are accepted and ignored; duplicates inside them are not ours.
            json!({"runtimeConfig": {"portMappings": []}, "capabilities": {"portMappings": true}, "args": {"cni": {}},
                   "dns": {"nameservers": ["10.96.0.10"]}, "ipam": {}, "disableCheck": true, "disableGC": "false",
                   "prevResult": null}),
            |c| assert_eq!(c.prev_result, None),
        ),
        (
            json!({"cni.dev/valid-attachments": [{"containerID": "abc", "ifname": "eth0"}, {"containerID": "def", "ifname": "net1"}],
                   "cni.dev/attachments": [{"containerID": "abc", "ifname": "eth0"}, {"containerID": "ghi", "ifname": "eth0", "extra": 1}]}),
            |c| {
                let v = c.valid_attachments.as_ref().map(|v| {
                    v.iter()
                        .map(|a| a.container_id.as_str())
                        .collect::<Vec<_>>()
                });
                assert_eq!(v, Some(vec!["abc", "def", "ghi"]));
            },
        ),
        (json!({"cni.dev/valid-attachments": []}), |c| {
            assert_eq!(c.valid_attachments, Some(vec![]))
        }),
    ];
    for (extra, check) in cases {
        let c = parse_ok(&with(extra));
        check(&c);
    }
    // Duplicates inside keys that are not ours do not matter.
    let raw = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","prevResult":{"ips":[],"ips":[]}}"#;
    assert!(parse_ok(raw).prev_result.is_some());
}

#[test]
fn conflist() {
    let list = json!({
        "cniVersion": "1.1.0",
        "name": "k8s-pod-network",
        "disableCheck": false,
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "ebpf-masq", "nativeRoutingCIDR": "10.22.0.0/16", "portRange": "2000-3000"}
        ]
    });
    let c = parse_conf_file(&serde_json::to_vec(&list).expect("ser")).expect("conflist parses");
    assert_eq!(c.cni_version, "1.1.0");
    assert_eq!(c.name, "k8s-pod-network");
    assert_eq!(c.masq.native_routing_cidrs, vec![cidr("10.22.0.0/16")]);
    assert_eq!(c.masq.port_range, (2000, 3000));

    // A single plugin config is accepted too.
    let single = with(json!({"fastPath": true}));
    assert!(parse_conf_file(&single).expect("single").masq.fast_path);

    let err = |v: Value| {
        parse_conf_file(&serde_json::to_vec(&v).expect("ser")).expect_err("must fail")
    };
    let zero = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]});
    let e = err(zero);
    assert_eq!(e.code, code::INVALID_CONFIG);
    assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
    let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}));
    assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
    let two = json!({"cniVersion": "1.0.0", "name": "n",
                     "plugins": [{"type": "ebpf-masq"}, {"type": "bridge"}, {"type": "ebpf-masq"}]});
    let e = err(two);
    assert!(
        e.msg.contains("\"plugins\"") && e.msg.contains("plugins[2]"),
        "{}",
        e.msg
    );
    // Errors in our entry name the full path.
    let e = err(json!({"cniVersion": "1.0.0", "name": "n",
                       "plugins": [{"type": "bridge"}, {"type": "ebpf-masq", "portRange": "9-1"}]}));
    assert!(
        e.msg
            .starts_with("invalid config key \"plugins[1].portRange\""),
        "{}",
        e.msg
    );
    let e = err(json!({"cniVersion": "1.0.0", "name": "n",
                       "plugins": [{"type": "ebpf-masq", "masqueradeRules": [{"source": "10.0.0.0/8"}]}]}));
    assert!(
        e.msg
            .contains("\"plugins[0].masqueradeRules[0].outInterface\""),
        "{}",
        e.msg
    );
    // List-level problems.
    let e =
        err(json!({"cniVersion": "0.2.0", "name": "n", "plugins": [{"type": "ebpf-masq"}]}));
    assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
    let e = err(json!({"cniVersion": "1.0.0", "plugins": [{"type": "ebpf-masq"}]}));
    assert!(e.msg.contains("\"name\""), "{}", e.msg);
    let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": {"type": "ebpf-masq"}}));
    assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
    let e =
        err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ebpf-masq"}, 3]}));
    assert!(e.msg.contains("\"plugins[1]\""), "{}", e.msg);
    let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"bridge": "cni0"}]}));
    assert!(e.msg.contains("\"plugins[0].type\""), "{}", e.msg);
    // Duplicates: in our entry → error; in another plugin's entry → none of our business.
    let dup_ours = br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"ebpf-masq","fastPath":true,"fastPath":false}]}"#;
    let e = parse_conf_file(dup_ours).expect_err("dup");
    assert!(e.msg.contains("\"plugins[1].fastPath\""), "{}", e.msg);
    let dup_other = br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","mtu":1,"mtu":2},{"type":"ebpf-masq"}]}"#;
    assert!(parse_conf_file(dup_other).is_ok());
}

#[test]
fn masq_to_json_round_trip() {
    let full = MasqOptions {
        nat_outgoing: false,
        native_routing_cidrs: vec![cidr("10.0.0.0/8"), cidr("fd00::/8")],
        non_masquerade_cidrs: vec![cidr("192.168.0.0/16")],
        pod_cidrs: vec![cidr("10.244.1.0/24"), cidr("fd00:10:244:1::/64")],
        masq_link_local: true,
        masq_link_local_ipv6: true,
        egress_interfaces: Some(vec!["eth0".into(), "eth1".into()]),
        masquerade_address_v4: Some(Ipv4Addr::new(192, 0, 2, 1)),
        masquerade_address_v6: "2001:db8::1".parse().ok(),
        masquerade_pool_v4: vec![Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)],
        masquerade_pool_v6: vec!["2001:db8::1".parse().unwrap()],
        port_range: (5000, 6000),
        node_port_range: None,
        pin_path: PathBuf::from("/sys/fs/bpf/masq2"),
        log_level: log::LevelFilter::Warn,
        log_file: Some(PathBuf::from("/var/log/masq.log")),
        masquerade_rules: vec![
            MasqRule {
                source: cidr("10.244.0.0/16"),
                out_interface: "wg0".into(),
                except: vec![cidr("10.244.1.0/24")],
                to_address: "10.1.1.1".parse().ok(),
                nat_filtering: NatFiltering::EndpointIndependent,
            },
            MasqRule {
                source: cidr("fd00:1::/64"),
                out_interface: "eth0".into(),
                except: vec![],
                to_address: None,
                nat_filtering: NatFiltering::default(),
            },
        ],
        nat_max_entries: 4096,
        fast_path: true,
        service_cidrs: vec![cidr("10.96.0.0/12")],
        nat_timeouts: NatTimeouts { tcp: 3600, tcp_closing: 60, udp: 300, udp_one_shot: 20, icmp: 90 },
        nat_filtering: NatFiltering::AddressDependent,
        egress_policies: Vec::new(),
        ip_masq_agent: Some(IpMasqAgent {
            file: PathBuf::from("/etc/config/ip-masq-agent"),
            file_absent: true,
            file_refused: false,
            non_masquerade_cidrs: vec![cidr("10.0.0.0/8"), cidr("fd00::/8")],
            masq_link_local: false,
            masq_link_local_ipv6: true,
        }),
        pod_port_limit: Some(200),
        nat_log: Some(crate::config::NatLogConf {
            ipfix: Some("collector.example:4739".into()),
            file: Some(PathBuf::from("/var/log/ebpf-masq/natlog.json")),
            file_max_mb: 10,
            domain: 3,
        }),
    };
    let only_v6 = MasqOptions {
        masquerade_address_v6: "2001:db8::2".parse().ok(),
        masquerade_pool_v6: vec!["2001:db8::2".parse().unwrap()],
        ..MasqOptions::default()
    };
    let only_v4 = MasqOptions {
        masquerade_address_v4: Some(Ipv4Addr::new(198, 51, 100, 1)),
        masquerade_pool_v4: vec![Ipv4Addr::new(198, 51, 100, 1)],
        ..MasqOptions::default()
    };
    for m in [MasqOptions::default(), full, only_v4, only_v6] {
        let mut v = masq_to_json(&m);
        assert_eq!(v["type"], "ebpf-masq");
        v["cniVersion"] = json!("1.0.0");
        v["name"] = json!("n");
        let back =
            parse_netconf(&serde_json::to_vec(&v).expect("ser")).expect("round trip parses");
        assert_eq!(back.masq, m, "{v}");
    }
}

#[test]
fn never_panics_on_mangled_input() {
    let good = with(json!({
        "nativeRoutingCIDR": ["10.0.0.0/8"], "portRange": "1024-2048", "egressInterfaces": ["eth0"],
        "masqueradeAddress": ["192.0.2.1", "2001:db8::1"], "natMaxEntries": 4096, "logLevel": "debug",
        "masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": ["10.1.0.0/16"], "toAddress": "192.0.2.9"}],
        "prevResult": {"ips": [{"address": "10.0.0.5/8"}]},
    }));
    assert!(parse_netconf(&good).is_ok());
    // Every truncation, and pseudo-random byte flips.
    for n in 0..good.len() {
        let _ = parse_netconf(&good[..n]);
        let _ = parse_conf_file(&good[..n]);
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let alphabet = b"{}[]\",:0123456789./-abcdefnrstul \\\x00\xff";
    for _ in 0..3000 {
        let mut b = good.clone();
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pos = (x as usize) % b.len();
            b[pos] = alphabet[((x >> 32) as usize) % alphabet.len()];
        }
        let _ = parse_netconf(&b);
        let _ = parse_conf_file(&b);
    }
    // Deep nesting hits serde_json's recursion limit, not the stack.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(
        parse_netconf(deep.as_bytes()).map_err(|e| e.code),
        Err(code::DECODE_FAILURE)
    );
}

#[test]
fn helpers() {
    assert!(check_ifname("eth0").is_ok());
    assert!(check_ifname("123456789012345").is_ok());
    assert!(check_ifname("1234567890123456").is_err());
    assert!(check_ifname(".").is_err());
    assert!(check_ifname("a:b").is_err());
    assert!(check_ifname("a\tb").is_err());
    assert_eq!(
        suggest("egressinterface", MASQ_KEYS.iter().copied()),
        Some("egressInterfaces")
    );
    assert_eq!(
        suggest("completelydifferent", MASQ_KEYS.iter().copied()),
        None
    );
    let e = parse_netconf(&with(json!({"nativeRoutingCIDR": "10.1.2.3/16"})))
        .expect_err("host bits");
    assert!(e.msg.contains("10.1.0.0/16"), "{}", e.msg);
}
