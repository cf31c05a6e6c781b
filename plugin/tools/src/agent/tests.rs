use super::*;

fn applied() -> State {
    let bytes = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq"}"#.to_vec();
    let conf = config::parse_conf_file(&bytes).unwrap();
    let entry = install::entry_from(Some(&bytes), None).unwrap();
    State {
        in_force: Some((Input { conf: bytes, ip_masq_agent: None }, conf, entry)),
        discovered: true,
        ..State::default()
    }
}

#[test]
fn not_ready_until_the_cache_is_read_and_every_pod_found_is_registered() {
    let mut st = applied();
    st.discovered = false;
    let (code, body) = st.health();
    assert_eq!(code, 503);
    assert!(body.contains("pods: the CNI cache has not been read yet"), "{body}");
    st.discovered = true;
    st.discovery = Some("1 found in the CNI cache but not registered: shop/web-0 (c1/eth0): bad".into());
    let (code, body) = st.health();
    assert_eq!(code, 503);
    assert!(body.contains("pods: 1 found in the CNI cache but not registered: shop/web-0"), "{body}");
    st.discovery = None;
    st.pods_found = 3;
    assert_eq!(st.health().0, 200);
    assert!(st.render().contains("ebpf_masq_agent_pods_found_total 3\n"));
}

#[test]
fn health_is_503_with_the_reason_until_everything_is_in_place() {
    let st = State::default();
    let (code, body) = st.health();
    assert_eq!(code, 503);
    assert!(body.contains("no config applied yet"), "{body}");

    let mut st = applied();
    assert_eq!(st.health(), (200, "ok\n".to_string()));
    st.chain = Some("/etc/cni/net.d/10-x.conflist does not chain ebpf-masq".into());
    let (code, body) = st.health();
    assert_eq!(code, 503);
    assert!(body.contains("chain: /etc/cni/net.d/10-x.conflist does not chain"), "{body}");
}

#[test]
fn a_refused_update_is_reported_but_keeps_the_node_healthy() {
    let mut st = applied();
    st.rejected = Some((Input::default(), "\"portRange\": bad (code 7)".into()));
    let (code, body) = st.health();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("config update rejected") && body.contains("portRange"), "{body}");
    assert!(st.render().contains("ebpf_masq_agent_config_valid 0\n"));
    st.rejected = None;
    assert!(st.render().contains("ebpf_masq_agent_config_valid 1\n"));
    // With no config ever in force, a refusal is a failure.
    let st = State { rejected: Some((Input::default(), "bad".into())), ..State::default() };
    assert_eq!(st.health().0, 503);
    assert!(st.health().1.contains("no valid config: bad"));
}

#[test]
fn answer_routes() {
    let st = Mutex::new(applied());
    assert_eq!(answer(&tiny_http::Method::Get, "/healthz", &st).0, 200);
    assert_eq!(answer(&tiny_http::Method::Get, "/nope", &st).0, 404);
    assert_eq!(answer(&tiny_http::Method::Post, "/healthz", &st).0, 405);
}
