"""podman and containerd end to end: a real container, ebpf-masq in the runtime's CNI chain.

The runtime runs inside the lab's node namespace (see runtimelab.py), runs a
container from a busybox image built locally by scripts/make-test-image.sh, and
the container pings and talks TCP to the ext namespace, which must see the node
address. While the container is held open (it waits on a gate file) its pod
registration and NAT flows are checked; after it exits, the runtime's DEL must
have removed both. A missing runtime fails these tests; it never skips them.
"""
import hashlib
import json
import re

import pytest

from lab import runtimelab
from lab.netlab import Topo, wait_for
from lab.runtimelab import IMAGE

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
ECHO = "icmp[icmptype] = icmp-echo"
PORT = 8080
HELLO_SHA256 = hashlib.sha256(b"hello\n").hexdigest()  # what peer.py answers to "hello\n"

# Runs in the container (busybox sh). /gate is a bind mount of a test dir.
SCRIPT = f"""set -e
ip -4 -o addr show dev eth0
ping -c 3 -W 5 {EXT}
echo hello | nc -w 10 {EXT} {PORT}
echo
touch /gate/ran
i=0
while [ ! -e /gate/go ]; do sleep 0.1; i=$((i+1)); [ $i -lt 600 ] || exit 99; done
echo released
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return runtimelab.build_image(tmp_path_factory.mktemp("image"))


def require(runtime):
    missing = runtimelab.missing_tools(runtime)
    if missing:
        pytest.fail(f"the {runtime} test needs {', '.join(missing)} on PATH: run scripts/install-deps.sh",
                    pytrace=False)


def masq_keys(topo, log):
    return {"pinPath": topo.lab.pin_path, "egressInterfaces": ["eth0"], "logFile": str(log)}


def attachment_id(container_id, id_len=72):
    """How `status` shows a container ID: whole up to id_len - 1 (ATT_ID_LEN - 1) bytes,
    so the 64-hex IDs of podman and containerd appear as the runtimes print them; longer
    ones are kept as a prefix plus "~" and the FNV-1a 64 hash of the whole ID
    (plugin/core/src/pod.rs)."""
    if len(container_id) < id_len:
        return container_id
    h = 0xcbf29ce484222325
    for b in container_id.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    tail = f"~{h:016x}"
    return container_id[:id_len - 1 - len(tail)] + tail


def hold_open(topo, plugin, run, gate, container_id, subnet_prefix):
    """Wait until the container has done its traffic, check the live registration,
    release it, and return (container IP, its output)."""
    wait_for(lambda: (gate / "ran").exists() or not run.alive(), timeout=60, what="container traffic")
    assert (gate / "ran").exists(), f"container failed before its traffic was done:\n{run.output()}"
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", run.output())
    assert m and m.group(1).startswith(subnet_prefix), run.output()
    ip = m.group(1)

    st = topo.status(plugin)
    pods = st["pods"]
    assert [(p["container_id"], p["ifname"], p["addresses"]) for p in pods] == \
        [(attachment_id(container_id), "eth0", [ip])], pods
    assert pods[0]["veth_attached"] and pods[0]["nat_outgoing"], pods
    assert [u["name"] for u in st["uplinks"] if u["egress_attached"] and u["ingress_attached"]] == ["eth0"], st
    flows = [f for f in topo.nat_list(plugin) if f["pod_addr"] == ip]
    assert {f["proto"].lower() for f in flows} >= {"icmp", "tcp"}, flows
    assert {(f["nat_addr"], f["remote_addr"]) for f in flows} == {(NODE_IP, EXT)}, flows

    (gate / "go").touch()
    rc, out = run.wait(timeout=60)
    assert rc == 0, out
    assert "released" in out, out
    return ip, out


def check_after_exit(topo, plugin, ip, container_id, log, srv, cap, out, del_netns_empty=False):
    assert HELLO_SHA256 in out, out  # the TCP reply came back through the reverse NAT
    assert cap.sources() == {NODE_IP: 3}, "ext saw echo requests from other addresses"
    assert srv.addrs("accept") == {NODE_IP} and srv.addrs("done") == {NODE_IP}, srv.records()
    [done] = srv.records("done")
    assert done["sha256"] == HELLO_SHA256, done

    # the runtime's DEL removed the registration and the pod's NAT flows
    def gone():
        st = topo.status(plugin)
        return st if st["pods"] == [] else None
    wait_for(gone, timeout=15, what="pod registration removed by the runtime's DEL")
    assert [f for f in topo.nat_list(plugin) if f["pod_addr"] == ip] == []

    lines = [l for l in log.read_text().splitlines() if f"container={container_id} " in l]
    verbs = [re.search(r"verb=(\w+)", l).group(1) for l in lines]
    assert "ADD" in verbs and "DEL" in verbs, lines
    assert all("result=ok" in l for l in lines), lines
    if del_netns_empty:  # containerd's ctr calls DEL after the task (and its netns) is gone
        assert any("verb=DEL" in l and "netns= " in l for l in lines), lines


def test_podman_container_reaches_ext_as_node(topo, plugin, image):
    require("podman")
    lab = topo.lab
    topo.link_plugin(plugin)
    podman = runtimelab.Podman(lab, topo.node, topo.cni_bin)
    podman.import_image(image["rootfs"])
    log = lab.tmp / "ebpf-masq-podman.log"
    net = f"{lab.prefix}podman"
    podman.add_network(runtimelab.masq_conflist(net, f"em{lab.id}p", "10.88.7.0/24", lab.tmp / "ipam-podman",
                                                **masq_keys(topo, log)))
    gate = lab.tmp / "gate"
    gate.mkdir()
    cidfile = lab.tmp / "podman.cid"
    srv = topo.ext.server("tcp", PORT)
    with topo.ext.capture("eth0", ECHO) as cap:
        run = podman.run_bg("--rm", "--pull", "never", "--network", net, "--cidfile", cidfile,
                            "--cgroup-parent", podman.cgroup_parent, "--volume", f"{gate}:/gate",
                            IMAGE, "sh", "-c", SCRIPT)
        wait_for(lambda: cidfile.exists() or not run.alive(), timeout=60, what="podman container id")
        assert cidfile.exists(), run.output()
        container_id = cidfile.read_text().strip()
        ip, out = hold_open(topo, plugin, run, gate, container_id, "10.88.7.")
    check_after_exit(topo, plugin, ip, container_id, log, srv, cap, out)
    assert podman("ps", "--all", "--quiet").stdout.strip() == ""  # --rm removed it


def test_containerd_ctr_container_reaches_ext_as_node(topo, plugin, image):
    require("containerd")
    lab = topo.lab
    ctd = runtimelab.Containerd(lab, topo.node)
    ctd.import_image(image["oci"])
    log = lab.tmp / "ebpf-masq-containerd.log"
    net = f"{lab.prefix}ctr"
    ctd.set_cni(runtimelab.masq_conflist(net, f"em{lab.id}c", "10.88.8.0/24", lab.tmp / "ipam-ctr",
                                         **masq_keys(topo, log)), plugin)
    gate = lab.tmp / "gate"
    gate.mkdir()
    cid = "c1"
    srv = topo.ext.server("tcp", PORT)
    with topo.ext.capture("eth0", ECHO) as cap:
        run = ctd.run_cni_bg(cid, ["sh", "-c", SCRIPT],
                             ["--mount", f"type=bind,src={gate},dst=/gate,options=rbind:rw"])
        # ctr names the CNI attachment <containerd namespace>-<container id>
        ip, out = hold_open(topo, plugin, run, gate, f"{ctd.ns}-{cid}", "10.88.8.")
    check_after_exit(topo, plugin, ip, f"{ctd.ns}-{cid}", log, srv, cap, out, del_netns_empty=True)
    assert ctd.ctr("containers", "list", "--quiet").stdout.strip() == ""  # --rm removed it
