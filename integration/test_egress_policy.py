"""Egress policies end to end: which address a namespace's or a pod's traffic
leaves with, per destination, checked where it arrives.

Topology: netlab.Topo, default configuration unless a case says otherwise (two cases
also with fastPath). The node owns
each policy address on its uplink eth0 (10.0.0.11 ... 10.0.0.23, ext's subnet, so ext's
replies find them by ARP); ext also holds 192.0.2.2/24, a "partner network" the node
reaches by its default route. Pods are added by cnitool (libcni) as the CRI plugins add
them: CNI_ARGS K8S_POD_NAMESPACE / K8S_POD_NAME, and the pod's annotations in CAP_ARGS
for the io.kubernetes.cri.pod-annotations capability the entry declares.

For every case TCP, UDP and ping leave the pod; ext's servers and a capture say which
source arrived, and `explain --json` (as in test_explain.py) must give the same address,
and the same policy when it names one.
"""
import json
import os
import time

import pytest

from lab import masqcli
from lab.lifelab import Reply, bridge, has_masq_filter, invoke_pod, network, registrations
from lab.netlab import CNI_BIN_DIR, Pod, Topo, cnitool_container_id, wait_for

EXT, NATIVE, NODE_IP, NODE_NATIVE = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT, Topo.NODE_NATIVE
PARTNER, PARTNER_NET = "192.0.2.2", "192.0.2.0/24"
A_ADDR, B_ADDR, PARTNER_ADDR, NEW_ADDR = "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"
POOL = ["10.0.0.21", "10.0.0.22", "10.0.0.23"]
CAP = "io.kubernetes.cri.pod-annotations"
ANNOTATION = "ebpf-masq.io/egress-policy"
BOTH_UPLINKS = {"egressInterfaces": ["eth0", "eth1"]}
TCP_PORT, UDP_PORT = 5000, 5001


# --- helpers ---------------------------------------------------------------------------------

def own(topo, *addrs):
    """The node owns addrs on its uplink eth0 (a policy's address must be on an egress interface)."""
    for a in addrs:
        topo.node.ip("addr", "add", f"{a}/24", "dev", "eth0")


def partner_network(topo):
    topo.ext.ip("addr", "add", f"{PARTNER}/24", "dev", "eth0")


def policy_net(topo, plugin, policies, **keys):
    """bridge + ebpf-masq with egressPolicies, declaring the annotations capability."""
    if policies is not None:
        keys["egressPolicies"] = policies
    return topo.masq_network(plugin, capabilities={CAP: True}, **keys)


def k8s_args(namespace, name):
    return f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};K8S_POD_UID=uid-{namespace}-{name}"


def add_pod(topo, net, short, namespace=None, name=None, annotations=None):
    """cnitool add with the pod's Kubernetes identity (CNI_ARGS) and annotations (CAP_ARGS)."""
    ns = topo.pod_ns(short)
    env = dict(net.env)
    if namespace is not None:
        env["CNI_ARGS"] = k8s_args(namespace, name)
    if annotations is not None:
        env["CAP_ARGS"] = json.dumps({CAP: annotations})
    p = topo.node.enter(["cnitool", "add", net.name, ns.path], env=env)
    net.pods.append(ns)
    return Pod(ns, json.loads(p.stdout))


def invoke_k8s(topo, plugin, conf, pod_ns, namespace, name):
    """A direct ADD as a CRI runtime makes it (CNI_ARGS with the pod's identity), addressing
    the attachment cnitool would make for pod_ns, so the reply's CNI error can be read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    env.update(CNI_COMMAND="ADD", CNI_ARGS=k8s_args(namespace, name), CNI_NETNS=pod_ns.path,
               CNI_CONTAINERID=cnitool_container_id(pod_ns.path), CNI_IFNAME="eth0",
               CNI_PATH=f"{CNI_BIN_DIR}:{topo.cni_bin}")
    p = topo.node.enter([plugin], env=env, input=json.dumps(conf), check=False)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return Reply(p.returncode, out, p.stdout, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")


def bridge_only_pod(topo, short="bare"):
    """A pod made by the bridge alone (its own address range), for direct ebpf-masq ADDs."""
    net = network(topo, [bridge(topo, 100, 120, "ipam-x")], "1.0.0")
    return net.add(topo.pod_ns(short))


def name_of(v):
    """A policy as explain / nat list / status give it: a name, or an object with one."""
    if isinstance(v, dict):
        return v.get("name")
    return v


class Servers:
    """TCP and UDP servers on a destination host; what source each exchange arrived with."""

    def __init__(self, host_ns):
        self.ns = host_ns
        self.tcp, self.udp = host_ns.server("tcp", TCP_PORT), host_ns.server("udp", UDP_PORT)

    def exchange(self, proto, pod_ns, dst, reply=True, **opts):
        srv, event = (self.tcp, "done") if proto == "tcp" else (self.udp, "dgram")
        n = len(srv.records(event))
        rc, res = pod_ns.client(proto, dst, srv.port, **({"timeout": 2} if not reply else {}), **opts)
        if reply:
            assert rc == 0, (proto, dst, res)
        else:
            wait_for(lambda: len(srv.records(event)) > n, what=f"{proto} at {dst}")
        return {r["addr"] for r in srv.records(event)[n:]}

    def ping(self, pod_ns, dst, reply=True):
        with self.ns.capture("eth0", f"icmp[icmptype] = icmp-echo and dst host {dst}") as cap:
            _, loss = pod_ns.ping(dst, count=2)
        if reply:
            assert loss == 0.0, (dst, loss)
        return set(cap.sources())


def explain_agrees(topo, plugin, src, dst, seen, policy=None):
    """explain's verdict for a new flow src -> dst (UDP, TCP, ICMP) is the address the
    destination saw; when explain names a policy, it is `policy` (None: no policy)."""
    for proto in (["udp", "--dport", UDP_PORT], ["tcp", "--dport", TCP_PORT], ["icmp"]):
        x = masqcli.explain(topo, plugin, "--src", src, "--dst", dst, "--proto", *proto)
        assert x["source_seen"] == seen, (proto, x)
        if seen == src:
            assert x["masqueraded"] is False, x
        else:
            assert x["masqueraded"] is True and x["address"] == seen, x
        assert name_of(x.get("policy")) == policy, (policy, x)


def leaves_with(topo, plugin, srvs, pod, dst, expect, policy=None, reply=True, udp_reply=None):
    """TCP, UDP and ping from pod to dst arrive from `expect`; explain agrees."""
    udp_reply = reply if udp_reply is None else udp_reply
    if reply:
        assert srvs.exchange("tcp", pod.ns, dst) == {expect}, (pod.ip, dst)
    assert srvs.exchange("udp", pod.ns, dst, reply=udp_reply) == {expect}, (pod.ip, dst)
    assert srvs.ping(pod.ns, dst, reply=reply) == {expect}, (pod.ip, dst)
    explain_agrees(topo, plugin, pod.ip, dst, expect, policy)


def flows_of(topo, plugin, pod):
    return [f for f in topo.nat_list(plugin) if f["pod_addr"] == pod.ip]


def assert_flow_policy(flows, addr, policy):
    assert flows and {f["nat_addr"] for f in flows} == {addr}, flows
    for f in flows:
        assert name_of(f["policy"]) == policy, f


def pod_row(topo, plugin, pod):
    [row] = [p for p in topo.status(plugin)["pods"] if pod.ip in p["addresses"]]
    return row


def assert_row_policies(topo, plugin, pod, names):
    """The pod's registration lists the policies selecting it."""
    row = pod_row(topo, plugin, pod)
    assert [name_of(p) for p in row["egress_policies"]] == names, row


# --- 1. two namespaces, two addresses, one destination -----------------------------------------

TWO_TEAMS = [
    {"name": "team-a", "namespaces": ["team-a"], "masqueradeAddress": A_ADDR},
    {"name": "team-b", "namespaces": ["team-b"], "masqueradeAddress": B_ADDR},
]


@pytest.mark.parametrize("fast", [False, True], ids=["default", "fastpath"])
def test_two_namespaces_leave_with_their_own_addresses(topo, plugin, fast):
    own(topo, A_ADDR, B_ADDR)
    net = policy_net(topo, plugin, TWO_TEAMS, **({"fastPath": True} if fast else {}))
    a = add_pod(topo, net, "a0", "team-a", "web-0")
    b = add_pod(topo, net, "b0", "team-b", "web-0")
    c = add_pod(topo, net, "c0", "team-c", "web-0")  # no policy selects team-c
    plain = add_pod(topo, net, "plain")  # no Kubernetes namespace: never selected
    srvs = Servers(topo.ext)
    leaves_with(topo, plugin, srvs, a, EXT, A_ADDR, "team-a")
    leaves_with(topo, plugin, srvs, b, EXT, B_ADDR, "team-b")
    leaves_with(topo, plugin, srvs, c, EXT, NODE_IP)
    leaves_with(topo, plugin, srvs, plain, EXT, NODE_IP)
    assert_flow_policy(flows_of(topo, plugin, a), A_ADDR, "team-a")
    assert_flow_policy(flows_of(topo, plugin, b), B_ADDR, "team-b")
    assert_flow_policy(flows_of(topo, plugin, c), NODE_IP, None)
    assert_row_policies(topo, plugin, a, ["team-a"])
    assert_row_policies(topo, plugin, b, ["team-b"])
    assert_row_policies(topo, plugin, c, [])
    s = topo.status(plugin)
    # the policies in force, in order, with their counters
    assert [name_of(p) for p in s["egress_policies"]] == ["team-a", "team-b"], s["egress_policies"]
    for p in s["egress_policies"]:
        assert all(p[k] > 0 for k in ("packets", "bytes", "flows")), p


# --- 2. an address towards one CIDR only ---------------------------------------------------------

def test_an_address_towards_one_cidr_only(topo, plugin):
    own(topo, PARTNER_ADDR)
    partner_network(topo)
    net = policy_net(topo, plugin, [{"name": "partner", "namespaces": ["team-a"], "destinations": [PARTNER_NET],
                                     "masqueradeAddress": PARTNER_ADDR}])
    a = add_pod(topo, net, "a0", "team-a", "web-0")
    b = add_pod(topo, net, "b0", "team-b", "web-0")
    srvs = Servers(topo.ext)
    # (ext's UDP server answers from 10.0.0.2 whatever address was asked: only the datagram counts there)
    leaves_with(topo, plugin, srvs, a, PARTNER, PARTNER_ADDR, "partner", udp_reply=False)
    leaves_with(topo, plugin, srvs, a, EXT, NODE_IP)
    leaves_with(topo, plugin, srvs, b, PARTNER, NODE_IP, udp_reply=False)
    flows = flows_of(topo, plugin, a)
    assert_flow_policy([f for f in flows if f["remote_addr"] == PARTNER], PARTNER_ADDR, "partner")
    assert_flow_policy([f for f in flows if f["remote_addr"] == EXT], NODE_IP, None)


# --- 3. a pod opted out by a natOutgoing: false policy ---------------------------------------------

def test_a_pod_opted_out_sends_its_own_address(topo, plugin):
    """native routes the pod range back to the node (test_core's native-routing setup), and
    both uplinks masquerade, so only the policy keeps db-0's address."""
    net = policy_net(topo, plugin, [{"name": "db-direct", "namespaces": ["team-c"], "pods": ["team-c/db-*"],
                                     "natOutgoing": False}], **BOTH_UPLINKS)
    db = add_pod(topo, net, "db0", "team-c", "db-0")
    web = add_pod(topo, net, "web0", "team-c", "web-0")
    native = Servers(topo.native)
    leaves_with(topo, plugin, native, db, NATIVE, db.ip, "db-direct")
    leaves_with(topo, plugin, native, web, NATIVE, NODE_NATIVE)
    # Towards ext too, which cannot answer the pod range: the pod's own address arrives.
    # (db last: ext's UDP server dies on its unroutable echo.)
    ext = Servers(topo.ext)
    leaves_with(topo, plugin, ext, web, EXT, NODE_IP)
    leaves_with(topo, plugin, ext, db, EXT, db.ip, "db-direct", reply=False)
    assert flows_of(topo, plugin, db) == []  # no pair for an opted-out pod
    assert flows_of(topo, plugin, web)
    assert_row_policies(topo, plugin, db, ["db-direct"])
    [p] = topo.status(plugin)["egress_policies"]  # counted, though never masqueraded
    assert p["unmasqueraded_packets"] > 0, p
    assert_row_policies(topo, plugin, web, [])


# --- 4. a pool spread across pods ---------------------------------------------------------------

@pytest.mark.parametrize("fast", [False, True], ids=["default", "fastpath"])
def test_a_policy_pool_pairs_each_pod_with_one_address(topo, plugin, fast):
    own(topo, *POOL)
    topo.ext.ip("addr", "add", "10.0.0.3/24", "dev", "eth0")  # a second remote address
    net = policy_net(topo, plugin, [{"name": "pool", "namespaces": ["team-p"], "masqueradeAddress": POOL}],
                     **({"fastPath": True} if fast else {}))
    pods = [add_pod(topo, net, f"p{i}", "team-p", f"web-{i}") for i in range(4)]
    srvs = Servers(topo.ext)
    seen = {}
    for rnd in range(2):  # two rounds of new flows: the same address each time
        for p in pods:
            got = set()
            got |= srvs.exchange("udp", p.ns, EXT)
            for remote in (EXT, "10.0.0.3"):
                got |= srvs.exchange("tcp", p.ns, remote)
            got |= srvs.ping(p.ns, EXT)
            got |= srvs.exchange("udp", p.ns, EXT, bind_port=40000 + rnd)
            assert len(got) == 1 and got <= set(POOL), (p.ip, got)
            seen.setdefault(p.ip, set()).update(got)
    assert all(len(a) == 1 for a in seen.values()), f"a pod left with more than one address: {seen}"
    assert set().union(*seen.values()) == set(POOL), seen
    for p in pods:
        [addr] = seen[p.ip]
        assert_flow_policy(flows_of(topo, plugin, p), addr, "pool")
        explain_agrees(topo, plugin, p.ip, EXT, addr, "pool")


# --- 5. the annotation narrows, never widens ---------------------------------------------------

ANNOTATED = [
    {"name": "partner", "namespaces": ["team-a"], "destinations": [PARTNER_NET], "masqueradeAddress": PARTNER_ADDR},
    {"name": "team-a", "namespaces": ["team-a"], "masqueradeAddress": A_ADDR},
    {"name": "team-b", "namespaces": ["team-b"], "masqueradeAddress": B_ADDR},
]


def test_the_annotation_selects_one_allowed_policy(topo, plugin):
    own(topo, PARTNER_ADDR, A_ADDR, B_ADDR)
    partner_network(topo)
    net = policy_net(topo, plugin, ANNOTATED)
    a0 = add_pod(topo, net, "a0", "team-a", "web-0")
    a1 = add_pod(topo, net, "a1", "team-a", "web-1", annotations={ANNOTATION: "partner", "example.com/x": "y"})
    srvs = Servers(topo.ext)
    # Without the annotation: every policy of the namespace, first match per destination.
    leaves_with(topo, plugin, srvs, a0, PARTNER, PARTNER_ADDR, "partner", udp_reply=False)
    leaves_with(topo, plugin, srvs, a0, EXT, A_ADDR, "team-a")
    # With it: that policy only; elsewhere the network's address, not team-a's.
    leaves_with(topo, plugin, srvs, a1, PARTNER, PARTNER_ADDR, "partner", udp_reply=False)
    leaves_with(topo, plugin, srvs, a1, EXT, NODE_IP)
    assert_row_policies(topo, plugin, a0, ["partner", "team-a"])
    assert_row_policies(topo, plugin, a1, ["partner"])
    assert pod_row(topo, plugin, a1)["annotations"] == {ANNOTATION: "partner"}


@pytest.mark.parametrize("wanted,why", [
    ("team-b", 'policy "team-b" does not select pod team-a/web-2 (its namespaces: team-b)'),
    ("nosuch", 'policy "nosuch" is not in egressPolicies'),
], ids=["other-namespace", "unknown"])
def test_a_refused_annotation_fails_the_add_and_leaves_nothing(topo, plugin, wanted, why):
    own(topo, PARTNER_ADDR, A_ADDR, B_ADDR)
    net = policy_net(topo, plugin, ANNOTATED)
    ok = add_pod(topo, net, "ok", "team-a", "web-0")  # a loaded node
    srvs = Servers(topo.ext)
    assert srvs.exchange("udp", ok.ns, EXT) == {A_ADDR}
    bare = bridge_only_pod(topo)
    before = (topo.node_tc_state(), registrations(topo, plugin))
    conf = {**net.plugin_conf(1, bare.result), "runtimeConfig": {CAP: {ANNOTATION: wanted}}}
    r = invoke_k8s(topo, plugin, conf, bare.ns, "team-a", "web-2")
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert f'annotation "{ANNOTATION}"' in r.out["msg"] and why in r.out["msg"], r.out
    # Nothing behind: no registration, no program on the pod's veth, no other hook changed.
    assert (topo.node_tc_state(), registrations(topo, plugin)) == before
    assert not has_masq_filter(topo, bare.host_veth), topo.node.bpf_hooks(bare.host_veth, "ingress")
    assert not [p for p in topo.status(plugin)["pods"] if bare.ip in p["addresses"]]
    # The runtime's DEL after a failed ADD succeeds; the other pod is untouched.
    conf.pop("runtimeConfig")
    assert invoke_pod(topo, plugin, "DEL", conf, bare.ns).rc == 0
    assert srvs.exchange("tcp", ok.ns, EXT) == {A_ADDR}


def test_a_refused_annotation_on_a_fresh_node_creates_nothing(topo, plugin):
    """The annotation is checked before anything is made: not even a data plane."""
    own(topo, PARTNER_ADDR, A_ADDR, B_ADDR)
    topo.link_plugin(plugin)
    bare = bridge_only_pod(topo)
    before = topo.node_tc_state()
    conf = {"cniVersion": "1.0.0", "name": f"{topo.lab.prefix}fresh", **topo.masq_entry(egressPolicies=ANNOTATED),
            "capabilities": {CAP: True}, "runtimeConfig": {CAP: {ANNOTATION: "team-a"}}, "prevResult": bare.result}
    r = invoke_k8s(topo, plugin, conf, bare.ns, "team-b", "web-0")
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert f'annotation "{ANNOTATION}": policy "team-a" does not select pod team-b/web-0' in r.out["msg"], r.out
    assert topo.node_tc_state() == before
    assert not os.path.exists(topo.lab.pin_path), os.listdir(topo.lab.pin_path)


# --- 6. bad configs ------------------------------------------------------------------------------

BAD = [
    ("not-owned", [{"name": "p", "namespaces": ["team-a"], "masqueradeAddress": "10.0.0.99"}],
     ["egressPolicies[0].masqueradeAddress", "10.0.0.99"]),
    ("not-on-an-uplink", [{"name": "p", "namespaces": ["team-a"], "masqueradeAddress": NODE_NATIVE}],
     ["egressPolicies[0].masqueradeAddress", NODE_NATIVE]),
    ("unknown-key", [{"name": "p", "namespaces": ["team-a"], "destination": [PARTNER_NET],
                      "masqueradeAddress": A_ADDR}],
     ["egressPolicies[0].destination", 'did you mean "destinations"']),
    ("duplicate-name", [{"name": "p", "namespaces": ["team-a"], "masqueradeAddress": A_ADDR},
                        {"name": "p", "namespaces": ["team-b"], "masqueradeAddress": A_ADDR}],
     ["egressPolicies[1].name", '"p"']),
    ("bad-glob", [{"name": "p", "namespaces": ["Team_A"], "masqueradeAddress": A_ADDR}],
     ["egressPolicies[0].namespaces[0]", "Team_A"]),
    ("no-action", [{"name": "p", "namespaces": ["team-a"]}], ["egressPolicies[0]"]),
    ("nat-outgoing-true", [{"name": "p", "namespaces": ["team-a"], "natOutgoing": True}], ["egressPolicies[0]"]),
]


@pytest.mark.parametrize("policies,fragments", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_policy_config_fails_the_add_with_code_7(topo, plugin, policies, fragments):
    own(topo, A_ADDR)
    topo.link_plugin(plugin)
    bare = bridge_only_pod(topo)
    before = topo.node_tc_state()
    conf = {"cniVersion": "1.0.0", "name": f"{topo.lab.prefix}bad",
            **topo.masq_entry(egressPolicies=policies), "prevResult": bare.result}
    r = invoke_k8s(topo, plugin, conf, bare.ns, "team-a", "web-0")
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    for frag in fragments:
        assert frag in r.out["msg"], (frag, r.out)
    assert topo.node_tc_state() == before
    assert not os.path.exists(topo.lab.pin_path), os.listdir(topo.lab.pin_path)


def test_apply_with_an_address_not_owned_fails_and_changes_nothing(topo, plugin):
    own(topo, A_ADDR)
    net = policy_net(topo, plugin, [{"name": "team-a", "namespaces": ["team-a"], "masqueradeAddress": A_ADDR}])
    a = add_pod(topo, net, "a0", "team-a", "web-0")
    srvs = Servers(topo.ext)
    assert srvs.exchange("udp", a.ns, EXT) == {A_ADDR}
    before = (topo.node_tc_state(), registrations(topo, plugin))
    conf = json.loads(json.dumps(net.conf))
    conf["plugins"][1]["egressPolicies"][0]["masqueradeAddress"] = "10.0.0.99"
    path = topo.lab.tmp / "bad-apply.conflist"
    path.write_text(json.dumps(conf))
    p = topo.node.enter([plugin, "apply", "--conf", path], check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "egressPolicies[0].masqueradeAddress" in out and "10.0.0.99" in out, out
    assert (topo.node_tc_state(), registrations(topo, plugin)) == before
    assert srvs.exchange("tcp", a.ns, EXT) == {A_ADDR}
    explain_agrees(topo, plugin, a.ip, EXT, A_ADDR, "team-a")


# --- 7. a config change re-evaluates running pods ----------------------------------------------

HOLD = 5  # seconds the held connection waits between connect and sending its data


@pytest.mark.parametrize("change", ["address-changed", "policy-removed"])
def test_apply_re_evaluates_running_pods(topo, plugin, change):
    own(topo, A_ADDR, NEW_ADDR)
    net = policy_net(topo, plugin, [{"name": "team-a", "namespaces": ["team-a"], "masqueradeAddress": A_ADDR}])
    a = add_pod(topo, net, "a0", "team-a", "web-0")
    srvs = Servers(topo.ext)
    # An established UDP flow (a fixed pod port) and a TCP connection open across the change.
    assert srvs.exchange("udp", a.ns, EXT, bind_port=40001) == {A_ADDR}
    n = len(srvs.tcp.records("accept"))
    held = a.ns.client_bg("tcp", EXT, TCP_PORT, hold=HOLD, bytes=200_000, timeout=30)
    wait_for(lambda: len(srvs.tcp.records("accept")) > n, what="the held connection at ext")
    held_since = time.monotonic()
    assert {r["addr"] for r in srvs.tcp.records("accept")[n:]} == {A_ADDR}

    entry = net.conf["plugins"][1]
    if change == "address-changed":
        entry["egressPolicies"][0]["masqueradeAddress"] = NEW_ADDR
        new, policy = NEW_ADDR, "team-a"
    else:
        del entry["egressPolicies"]
        new, policy = NODE_IP, None
    conf_file = net.dir / f"{net.name}.conflist"  # later ADDs see the same config
    conf_file.write_text(json.dumps(net.conf, indent=2))
    with topo.ext.capture("eth0", f"tcp and dst port {TCP_PORT}") as cap:
        p = topo.node.enter([plugin, "apply", "--conf", conf_file], check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        assert time.monotonic() - held_since < HOLD, "applied after the held connection sent its data"
        rc, res = a.ns.client_result(held, timeout=60)
    assert rc == 0, res  # the established connection kept working ...
    assert set(cap.sources()) == {A_ADDR}, cap.sources()  # ... with its old source, to its end
    assert {r["addr"] for r in srvs.tcp.records("done")} == {A_ADDR}
    # The established UDP flow keeps its mapping; new flows follow the new config.
    assert srvs.exchange("udp", a.ns, EXT, bind_port=40001) == {A_ADDR}
    x = masqcli.explain(topo, plugin, "--src", a.ip, "--dst", EXT, "--proto", "udp", "--sport", 40001,
                        "--dport", UDP_PORT)
    assert (x["code"], x["address"]) == ("existing_flow", A_ADDR), x
    leaves_with(topo, plugin, srvs, a, EXT, new, policy)
    assert_row_policies(topo, plugin, a, ["team-a"] if policy else [])


# --- 8. side by side: iptables MASQUERADE ------------------------------------------------------

@pytest.mark.parametrize("masq", ["ebpf-masq", "ipMasq"])
def test_two_namespaces_side_by_side_with_ip_masq(topo, plugin, masq):
    """The bridge plugin's ipMasq (the yardstick) has one address for everyone: shown,
    and the assertion is that ebpf-masq gives each namespace its own."""
    own(topo, A_ADDR, B_ADDR)
    if masq == "ebpf-masq":
        net = policy_net(topo, plugin, TWO_TEAMS)
    else:
        net = topo.network([topo.bridge_plugin(ip_masq=True)])
    a = add_pod(topo, net, "a0", "team-a", "web-0")
    b = add_pod(topo, net, "b0", "team-b", "web-0")
    srvs = Servers(topo.ext)
    seen = {}
    for team, p in (("team-a", a), ("team-b", b)):
        seen[team] = srvs.exchange("tcp", p.ns, EXT) | srvs.exchange("udp", p.ns, EXT) | srvs.ping(p.ns, EXT)
    print(f"{masq}: team-a left with {sorted(seen['team-a'])}, team-b with {sorted(seen['team-b'])}")
    if masq == "ebpf-masq":
        assert seen == {"team-a": {A_ADDR}, "team-b": {B_ADDR}}, seen
    else:
        assert seen["team-a"] == seen["team-b"] == {NODE_IP}, seen
