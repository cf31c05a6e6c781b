"""Network-namespace lab for the ebpf-masq integration tests.

Everything lives in namespaces named em-<random>-*; nothing touches the
machine's own interfaces. A Lab owns what it creates (namespaces, processes,
bpffs pin dirs, CNI cache entries) and removes all of it in close().

Two ways to run a command in a namespace:
  Netns.exec(...)   `ip netns exec`: for traffic tools. It remounts /sys, so
                    bpffs is hidden there.
  Netns.enter(...)  `nsenter --net=...`: keeps the host's /sys/fs/bpf; use it for
                    the plugin, cnitool, tc and bpftool in the node namespace.
"""
import hashlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from . import masqcli

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PY = "/usr/bin/python3"  # Debian's python, which has scapy (not pyenv's)
PEER = str(HERE / "peer.py")
CNI_BIN_DIR = "/usr/lib/cni"
CNI_VERSION = "1.0.0"
# The capability a conflist entry declares to get the pod's annotations as runtimeConfig (CRI runtimes fill it).
ANNOTATIONS_CAP = "io.kubernetes.cri.pod-annotations"
POD_SUBNET = "10.244.1.0/24"


def plugin_path():
    """The ebpf-masq binary under test (EBPF_MASQ_BIN overrides): where
    `cargo build --release` puts it, target/<host tuple>/release/ (scripts/binpath.sh)."""
    if os.environ.get("EBPF_MASQ_BIN"):
        return Path(os.environ["EBPF_MASQ_BIN"])
    return Path(subprocess.run([REPO / "scripts/binpath.sh"], capture_output=True, text=True,
                               check=True).stdout.strip())


def sh(cmd, check=True, timeout=120, **kw):
    """Run cmd (a list), capturing text output; on failure raise with everything."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"command failed (rc={p.returncode}): {' '.join(map(str, cmd))}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Netns:
    def __init__(self, lab, name):
        self.lab, self.name, self.path = lab, name, f"/run/netns/{name}"

    def exec(self, cmd, **kw):
        return sh(["ip", "netns", "exec", self.name, *map(str, cmd)], **kw)

    def enter(self, cmd, **kw):
        return sh(["nsenter", f"--net={self.path}", "--", *map(str, cmd)], **kw)

    def ip(self, *args, **kw):
        return sh(["ip", "-n", self.name, *map(str, args)], **kw)

    def sysctl(self, key, value):
        self.exec(["sysctl", "-qw", f"{key}={value}"])

    def nstat(self, names):
        """{name: value} of the kernel counters @names here (nstat names, e.g. TcpActiveOpens), absolute:
        `nstat -saz` writes no history file."""
        vals = {}
        for line in self.exec(["nstat", "-saz"]).stdout.splitlines():
            f = line.split()
            if len(f) >= 2 and f[0] in names:
                vals[f[0]] = int(f[1])
        return vals

    def spawn(self, cmd, enter=False, **kw):
        """Start a background process here; the lab kills it (by PID) on close."""
        prefix = ["nsenter", f"--net={self.path}", "--"] if enter else ["ip", "netns", "exec", self.name]
        return self.lab.spawn([*prefix, *map(str, cmd)], **kw)

    def links(self):
        return [l["ifname"] for l in json.loads(self.ip("-j", "link", "show").stdout)]

    def bpf_hooks(self, dev, direction):
        """The BPF programs on a hook of `dev`: TCX programs, then tc filters (bpfhooks.py)."""
        return self.enter([PY, HERE / "bpfhooks.py", dev, direction], check=False).stdout

    def hook_progs(self, dev, direction):
        """[(kind, name)] of the BPF programs on a hook, in run order: kind "tcx"
        for a TCX program, "tc" for a tc filter."""
        out = []
        for line in self.bpf_hooks(dev, direction).splitlines():
            m = re.match(r"tcx bpf name (\S+) id \d+", line)
            if m:
                out.append(("tcx", m.group(1)))
            elif re.search(r"\bid \d+", line):
                m = re.search(r"\bname (\S+)|handle \S+ (\S+) direct-action", line)
                out.append(("tc", next(g for g in m.groups() if g) if m else "?"))
        return out

    def server(self, proto, port, family="ipv4"):
        return Server(self, proto, port, family)

    @staticmethod
    def _client_cmd(proto, host, port, opts):
        cmd = [PY, PEER, "client", "--proto", proto, "--host", host, "--port", port]
        for k, v in opts.items():
            cmd += [f"--{k.replace('_', '-')}", v]
        return cmd

    def client(self, proto, host, port, enter=False, **opts):
        """Run peer.py client here (the host's family); returns (returncode, parsed JSON result)."""
        cmd = self._client_cmd(proto, host, port, opts)
        p = (self.enter if enter else self.exec)(cmd, check=False, timeout=300)
        return p.returncode, json.loads(p.stdout or "{}")

    def client_bg(self, proto, host, port, enter=False, **opts):
        """peer.py client in the background; finish it with client_result()."""
        return self.spawn(self._client_cmd(proto, host, port, opts), enter=enter, stdout=subprocess.PIPE)

    @staticmethod
    def client_result(proc, timeout=60):
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, json.loads(out or "{}")

    def ping(self, dst, count=3, interval=0.2, check=False):
        """ICMP echo with peer.py ping; returns (returncode, packet loss in %).

        A reply counts if it comes within 1 s of the last request (iputils ping -W 1
        gives up on a reply later than twice the largest round trip so far, which a
        loaded 2-core machine exceeds without anything being lost)."""
        p = self.exec([PY, PEER, "ping", "--host", dst, "--count", count, "--interval", interval,
                       "--wait", 1], check=check, timeout=count * interval + 30)
        got = json.loads(p.stdout or "{}")
        sent, received = got.get("sent", count), got.get("received", 0)
        return p.returncode, 100.0 * (sent - received) / sent

    def capture(self, dev, bpf_filter):
        return Capture(self, dev, bpf_filter)


class Server:
    """peer.py server; records what peer addresses it saw. family "ipv4", or "dual":
    one IPv6 socket that takes IPv4 peers too."""

    def __init__(self, ns, proto, port, family="ipv4"):
        self.proto, self.port = proto, port
        self.out = ns.lab.tmp / f"server-{family}-{ns.name}-{proto}-{port}.jsonl"
        self.proc = ns.spawn([PY, PEER, "serve", "--proto", proto, "--port", port, "--family", family,
                              "--out", self.out])
        wait_for(lambda: self.out.exists() or self.proc.poll() is not None, what=f"{proto} server in {ns.name}")
        assert self.proc.poll() is None, f"{proto} server in {ns.name} died: {self.proc.stderr.read()}"

    def records(self, event=None):
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        recs = [json.loads(l) for l in lines]
        return [r for r in recs if event is None or r["event"] == event]

    def addrs(self, event=None):
        return {r["addr"] for r in self.records(event)}


class Capture:
    """tcpdump to a pcap inside a namespace; a context manager."""

    def __init__(self, ns, dev, bpf_filter):
        self.ns, self.dev, self.filter = ns, dev, bpf_filter
        self.pcap = ns.lab.tmp / f"cap-{ns.name}-{dev}-{secrets.token_hex(2)}.pcap"
        self.proc, self.dropped = None, 0

    def __enter__(self):
        # The ring must hold what a busy machine keeps tcpdump from reading: its default
        # (2 MiB, in slots as large as the snapshot length, 64 KiB+ for a veth's GRO
        # aggregates) held 32 packets. -s 1600 keeps every packet of a 1500-byte MTU
        # whole (an aggregate's headers only) and -B 16 MiB makes that ~10,000 slots.
        self.proc = self.ns.spawn(["tcpdump", "-n", "-U", "--immediate-mode", "-s", 1600, "-B", 16384,
                                   "-i", self.dev, "-w", self.pcap, self.filter])
        deadline, err = time.monotonic() + 10, ""
        while "listening on" not in err:  # tcpdump says so once the capture is live
            assert time.monotonic() < deadline and self.proc.poll() is None, f"tcpdump did not start: {err}"
            if select.select([self.proc.stderr], [], [], 0.1)[0]:
                err += os.read(self.proc.stderr.fileno(), 4096).decode(errors="replace")
        return self

    STATS = re.compile(r"(\d+) packets? captured, (\d+) packets? received by filter, (\d+) packets? dropped by kernel")

    def __exit__(self, *exc):
        time.sleep(0.3)  # let packets still on their way reach the device
        try:
            if exc[0] is None:
                self.drain()
        finally:
            self.ns.lab.stop(self.proc, signal.SIGINT)

    def drain(self):
        """Wait until tcpdump has written every packet its socket took. On SIGINT tcpdump
        stops at once and loses what is still in its ring, which a busy machine can leave
        there; SIGUSR1 makes it print its counts without stopping. (The devices captured
        here are veths and TUNs, where the kernel counts each packet once, as tcpdump does.)"""
        deadline, err = time.monotonic() + 20, ""
        while True:
            self.proc.send_signal(signal.SIGUSR1)
            counts = None
            while counts is None:
                assert time.monotonic() < deadline and self.proc.poll() is None, f"tcpdump gave no counts: {err}"
                if select.select([self.proc.stderr], [], [], 0.1)[0]:
                    err += os.read(self.proc.stderr.fileno(), 4096).decode(errors="replace")
                    found = self.STATS.findall(err)
                    if found:
                        counts, err = [int(n) for n in found[-1]], ""
            captured, received, self.dropped = counts
            if captured + self.dropped >= received:  # the kernel counts what it dropped as received
                return
            assert time.monotonic() < deadline, f"tcpdump wrote {captured} of {received} packets"
            time.sleep(0.05)

    def packets(self):
        assert not self.dropped, f"the capture on {self.dev} is incomplete: its ring was full {self.dropped} times"
        from scapy.all import rdpcap  # slow import; only where needed
        return list(rdpcap(str(self.pcap)))

    def sources(self):
        """Counter of IPv4 source addresses in the capture."""
        from scapy.all import IP
        return Counter(p[IP].src for p in self.packets() if IP in p)


class Pod:
    def __init__(self, ns, result):
        self.ns, self.result = ns, result
        self.ip = result["ips"][0]["address"].split("/")[0]
        host = [i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"] != "cni0"]
        self.host_veth = host[0] if host else None


class CniNet:
    """A conflist in its own NETCONFPATH; add/del pods with cnitool in the node netns."""

    def __init__(self, lab, node, name, plugins, cni_path):
        self.lab, self.node, self.name = lab, node, name
        self.conf = {"cniVersion": CNI_VERSION, "name": name, "plugins": plugins}
        self.dir = lab.tmp / f"netconf-{name}"
        self.dir.mkdir()
        (self.dir / f"{name}.conflist").write_text(json.dumps(self.conf, indent=2))
        self.env = {**os.environ, "CNI_PATH": cni_path, "NETCONFPATH": str(self.dir)}
        # Run in the cnitool child before it executes (e.g. oldkernel.without_tcx).
        self.preexec = None
        self.pods = []
        # cleanups run last-in first-out: cnitool del first, then drop what it left in its cache
        lab.on_close(lambda: [p.unlink() for p in Path("/var/lib/cni/results").glob(f"{name}-*")])
        lab.on_close(self._teardown)

    def cnitool(self, verb, pod_ns, check=True, env=None):
        return self.node.enter(["cnitool", verb, self.name, pod_ns.path], env=env or self.env, check=check,
                               preexec_fn=self.preexec)

    def add(self, pod_ns, annotations=None):
        """cnitool add; @annotations (a dict) go in CAP_ARGS as the pod-annotations
        capability (plugins of the list that declare it get them as runtimeConfig)."""
        env = self.env if annotations is None else {**self.env, "CAP_ARGS": json.dumps({ANNOTATIONS_CAP: annotations})}
        self.pods.append(pod_ns)
        return Pod(pod_ns, json.loads(self.cnitool("add", pod_ns, env=env).stdout))

    def delete(self, pod_ns, check=True):
        return self.cnitool("del", pod_ns, check=check)

    def plugin_conf(self, entry, prev_result):
        """The conf libcni hands a plugin of this list (entry: index or dict), with prevResult."""
        entry = self.conf["plugins"][entry] if isinstance(entry, int) else entry
        return {"cniVersion": CNI_VERSION, "name": self.name, **entry, "prevResult": prev_result}

    def _teardown(self):
        for ns in self.pods:
            self.delete(ns, check=False)


def prog_count(hooks_text):
    """How many programs a bpf_hooks() listing holds (each has one "id N")."""
    return len(re.findall(r"\bid \d+", hooks_text))


def cnitool_container_id(netns_path):
    """cnitool's container ID: "cnitool-" and 20 hex digits of sha512(netns path)."""
    return "cnitool-" + hashlib.sha512(str(netns_path).encode()).hexdigest()[:20]


class Lab:
    def __init__(self, tmp):
        self.id = secrets.token_hex(3)
        self.prefix = f"em-{self.id}-"
        self.tmp = Path(tmp)
        self.namespaces, self.procs, self.cleanups = [], [], []
        self.pin_path = f"/sys/fs/bpf/em-test-{self.id}"

    def on_close(self, fn):
        self.cleanups.append(fn)

    def netns(self, short):
        name = self.prefix + short
        sh(["ip", "netns", "add", name])
        self.namespaces.append(name)
        ns = Netns(self, name)
        ns.ip("link", "set", "lo", "up")
        return ns

    def veth(self, a, a_if, a_cidr, b, b_if, b_cidr):
        """A veth pair created directly inside namespace a, peer moved to b."""
        a.ip("link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", b.name)
        for ns, ifname, cidr in ((a, a_if, a_cidr), (b, b_if, b_cidr)):
            ns.ip("addr", "add", cidr, "dev", ifname)
            ns.ip("link", "set", ifname, "up")

    def spawn(self, cmd, **kw):
        kw = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, **kw}
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        return p

    def stop(self, proc, sig=signal.SIGTERM):
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def close(self):
        errors = []
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # keep cleaning up
                errors.append(repr(e))
        for p in self.procs:
            self.stop(p)
        # The pins last: no process of the lab's is left to write them again.
        shutil.rmtree(self.pin_path, ignore_errors=True)
        for name in self.namespaces:
            sh(["ip", "netns", "del", name], check=False)
        if errors:
            raise AssertionError("lab cleanup errors: " + "; ".join(errors))


class Topo:
    """node (eth0 -> ext, eth1 -> native), pods added by cnitool in node."""

    EXT, NATIVE, NODE_EXT, NODE_NATIVE = "10.0.0.2", "10.10.0.2", "10.0.0.5", "10.10.0.5"

    def __init__(self, lab):
        self.lab = lab
        self.node, self.ext, self.native = lab.netns("node"), lab.netns("ext"), lab.netns("native")
        lab.veth(self.node, "eth0", "10.0.0.5/24", self.ext, "eth0", "10.0.0.2/24")
        lab.veth(self.node, "eth1", "10.10.0.5/24", self.native, "eth0", "10.10.0.2/24")
        self.node.ip("route", "add", "default", "via", self.EXT, "dev", "eth0")
        self.native.ip("route", "add", "10.244.0.0/16", "via", self.NODE_NATIVE)
        self.node.sysctl("net.ipv4.ip_forward", 1)
        self.cni_bin = lab.tmp / "cni-bin"
        self.cni_bin.mkdir()
        self._nets = 0

    def pod_ns(self, short="pod"):
        return self.lab.netns(short)

    def bridge_plugin(self, ip_masq=False):
        return {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": ip_masq,
                "ipam": {"type": "host-local", "subnet": POD_SUBNET, "routes": [{"dst": "0.0.0.0/0"}],
                         "dataDir": str(self.lab.tmp / "ipam")}}

    def masq_entry(self, **keys):
        return {"type": "ebpf-masq", "pinPath": self.lab.pin_path, **keys}

    def network(self, plugins):
        self._nets += 1
        name = f"{self.lab.prefix}net{self._nets}"
        return CniNet(self.lab, self.node, name, plugins, f"{CNI_BIN_DIR}:{self.cni_bin}")

    def link_plugin(self, binary):
        """Make `type: ebpf-masq` resolve to binary via CNI_PATH."""
        link = self.cni_bin / "ebpf-masq"
        if not link.exists():
            link.symlink_to(Path(binary).resolve())

    def masq_network(self, binary, **keys):
        self.link_plugin(binary)
        return self.network([self.bridge_plugin(), self.masq_entry(**keys)])

    def run_plugin(self, binary, command, conf, pod_ns, ifname="eth0", cwd=None, container_id=None,
                   preexec=None):
        """Invoke the plugin directly in the node netns as a runtime would.
        container_id defaults to the one cnitool derives for pod_ns, so a direct
        call addresses the same attachment cnitool made; preexec runs in the
        child before it executes (e.g. oldkernel.without_tcx).
        Returns (returncode, parsed stdout JSON or None, stderr)."""
        if container_id is None:
            container_id = cnitool_container_id(pod_ns.path)
        env = {**os.environ, "CNI_COMMAND": command, "CNI_CONTAINERID": container_id,
               "CNI_NETNS": pod_ns.path, "CNI_IFNAME": ifname, "CNI_PATH": f"{CNI_BIN_DIR}:{self.cni_bin}"}
        p = self.node.enter([binary], env=env, input=json.dumps(conf), check=False, cwd=cwd, preexec_fn=preexec)
        try:
            out = json.loads(p.stdout) if p.stdout.strip() else None
        except json.JSONDecodeError:
            out = None
        return p.returncode, out, p.stdout + p.stderr

    def nat_list(self, binary):
        """`ebpf-masq nat list --json` of this lab's node (masqcli)."""
        return masqcli.nat_list(self, binary)

    def status(self, binary, **kw):
        """`ebpf-masq status --json` of this lab's node (masqcli); kw goes to subprocess."""
        return masqcli.status(self, binary, **kw)

    def node_tc_state(self):
        """{dev: (qdiscs, ingress filters, egress filters)} for every link in node."""
        return {dev: (self.node.enter(["tc", "qdisc", "show", "dev", dev]).stdout,
                      self.node.bpf_hooks(dev, "ingress"), self.node.bpf_hooks(dev, "egress"))
                for dev in self.node.links()}
