"""Helpers for test_lifecycle.py: direct CNI calls with full control of the
environment, per-version networks, and the plugin's own view of node state
(`ebpf-masq status --json` / `nat list --json`).

Builds on netlab (Topo, CniNet); everything created here is owned by the Lab
and removed by its close()."""
import json
import os
from collections import namedtuple
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

from .netlab import CNI_BIN_DIR, POD_SUBNET, Topo, cnitool_container_id

Reply = namedtuple("Reply", "rc out stdout log")

SUBNET_PREFIX = POD_SUBNET.rsplit(".", 1)[0]  # "10.244.1"


def bridge(topo, first=2, last=254, store="ipam"):
    """bridge + host-local, handing out SUBNET_PREFIX.first..last from its own store,
    so several networks of one test never hand out the same address."""
    return {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
            "ipam": {"type": "host-local",
                     "ranges": [[{"subnet": POD_SUBNET, "rangeStart": f"{SUBNET_PREFIX}.{first}",
                                  "rangeEnd": f"{SUBNET_PREFIX}.{last}"}]],
                     "routes": [{"dst": "0.0.0.0/0"}],
                     "dataDir": str(topo.lab.tmp / store)}}


def network(topo, plugins, version):
    """A CniNet whose conflist says cniVersion `version`."""
    net = topo.network(plugins)
    net.conf["cniVersion"] = version
    (net.dir / f"{net.name}.conflist").write_text(json.dumps(net.conf, indent=2))
    return net


def masq_network(topo, binary, version="1.0.0", first=2, last=254, store="ipam", **keys):
    topo.link_plugin(binary)
    return network(topo, [bridge(topo, first, last, store), topo.masq_entry(**keys)], version)


def masq_conf(topo, name, version, prev=None, **extra):
    """The ebpf-masq entry as a runtime hands it to the plugin."""
    conf = {"cniVersion": version, "name": name, "type": "ebpf-masq", "pinPath": topo.lab.pin_path, **extra}
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def invoke(topo, binary, command, conf, netns=None, container_id=None, ifname="eth0", stdin=None):
    """Run the plugin in the node netns. CNI_* variables: exactly the given ones
    (None = unset) plus CNI_COMMAND and CNI_PATH; nothing inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    env.update(CNI_COMMAND=command, CNI_PATH=f"{CNI_BIN_DIR}:{topo.cni_bin}")
    for k, v in (("CNI_NETNS", netns), ("CNI_CONTAINERID", container_id), ("CNI_IFNAME", ifname)):
        if v is not None:
            env[k] = str(v)
    data = stdin if stdin is not None else json.dumps(conf)
    p = topo.node.enter([binary], env=env, input=data, check=False)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return Reply(p.returncode, out, p.stdout, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")


def invoke_pod(topo, binary, command, conf, pod_ns, **kw):
    """invoke() addressing the attachment cnitool made for pod_ns."""
    kw.setdefault("netns", pod_ns.path)
    kw.setdefault("container_id", cnitool_container_id(pod_ns.path))
    return invoke(topo, binary, command, conf, **kw)


def status(topo, binary):
    """`ebpf-masq status --json`, or None when there is no data plane."""
    p = topo.node.enter([binary, "status", "--json", "--pin-path", topo.lab.pin_path], check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


COUNTERS = ("packets", "bytes", "spoofed_dropped")


def registrations(topo, binary):
    """{container_id: status pod entry without its traffic counters} (empty without a data
    plane). Counters move with any packet a pod sends (IPv6 neighbour discovery included), so
    comparing registrations before and after something must not compare them."""
    s = status(topo, binary)
    if s is None:
        return {}
    return {p["container_id"]: {k: v for k, v in p.items() if k not in COUNTERS} for p in s["pods"]}


def nat_flows(topo, binary, pod_ip=None):
    p = topo.node.enter([binary, "nat", "list", "--json", "--pin-path", topo.lab.pin_path], check=False)
    if p.returncode != 0:
        return []
    flows = json.loads(p.stdout)
    return [f for f in flows if pod_ip is None or f["pod_addr"] == pod_ip]


def has_masq_filter(topo, dev, direction="ingress"):
    """Any BPF program on the hook (TCX or tc): ours are the only ones in a test node."""
    return "bpf" in topo.node.bpf_hooks(dev, direction)


def detach_behind_our_back(topo, dev, direction="ingress"):
    """Take our program off a hook without telling ebpf-masq: remove its TCX link
    pin (which detaches the link) and any tc filter."""
    ifindex = json.loads(topo.node.ip("-j", "link", "show", "dev", dev).stdout)[0]["ifindex"]
    for pin in Path(topo.lab.pin_path).glob(f"v*/links/{ifindex}-{direction}"):
        pin.unlink()
    topo.node.enter(["tc", "filter", "del", "dev", dev, direction], check=False)


def pin_tree(path):
    """Every path under `path`, relative, sorted (bpffs: dirs and pins)."""
    out = []
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(root, n), path))
    return sorted(out)


def parallel(fn, items, workers=24, timeout=120):
    """fn over items in a thread pool; results in item order. Raises on timeout."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, i) for i in items]
        return [f.result(timeout=timeout) for f in futures]


ECHO = "icmp[icmptype] = icmp-echo"


def cid(pod_ns):
    """cnitool's container ID for a pod's netns."""
    return cnitool_container_id(pod_ns.path)


def assert_masqueraded(topo, pod, port):
    """ping and a UDP exchange from the pod: ext sees only the node's address."""
    udp = topo.ext.server("udp", port)
    with topo.ext.capture("eth0", ECHO) as cap:
        assert pod.ns.ping(Topo.EXT, count=2) == (0, 0.0)
    assert cap.sources() == {Topo.NODE_EXT: 2}
    rc, res = pod.ns.client("udp", Topo.EXT, port)
    assert rc == 0, res
    assert udp.addrs() == {Topo.NODE_EXT}
