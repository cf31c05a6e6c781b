#!/usr/bin/python3
"""scripts/bench.sh --add-latency: what a CNI ADD costs with ebpf-masq, and whether
the per-packet cost depends on how many pods are attached (Debian's python, stdlib only).

Run by bench.sh, which compiles benchtool, makes the work dir and sweeps up after
us (namespaces <prefix>-*, pins <pin>*, cnitool cache <prefix>-*); this script
also removes everything it made itself, on failure and on SIGINT/SIGTERM too.

Phases (progress on stderr; the table, then the JSON if asked, on stdout):
  warm    A node whose programs are loaded (a pod added through the chain stays
          attached). Per repetition, in random order:
            bridge   cnitool add (bridge + host-local only) of pod A, then the
                     plugin itself run directly on it with the bridge's result as
                     prevResult (CNI env + stdin, as libcni runs it): ADD, then
                     DEL; then cnitool del;
            chain    cnitool add/del of pod B through bridge + host-local + ebpf-masq.
          Our cost = chain - bridge (cnitool ADD, paired per repetition), and the
          plugin's direct ADD: wall time (fork/exec to exit; this process sits in
          the node netns, no nsenter in the timing) and its own duration_ms
          (logFile; from after reading stdin to the reply).
  first   A second node, fresh each time: new pin path, nothing of ours on its uplink.
          The plugin's first ADD there (directly, as above), default natMaxEntries
          vs natMaxEntries 65536 (interleaved); then one run of each with
          logLevel trace for a breakdown from the log's (ms) timestamps.
  pods    uplink egress and veth ingress ns/packet from kernel.bpf_stats_enabled
          (set to 1 only while a UDP flow runs, restored after) for one UDP flow
          (64-byte payload) from the attached pod to ext: with 1 pod attached,
          with 100 pods attached (99 more through cnitool), with 1 pod again
          (A-B-A, so drift shows); plus the direct ADD with 1 and with 100 pods
          attached, as configured and with egressInterfaces set (without it every
          ADD finds the uplinks from the default route, which dumps all links).
"""
import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

CNI_BIN_DIR = "/usr/lib/cni"
EXT_IP, NODE_IP = "10.0.0.2", "10.0.0.5"
SUBNET = "10.244.1.0/24"
DEFAULT_NAT = 1048576
SMALL_NAT = 65536
UDP_PORT, UDP_LEN = 5300, 64
N_PODS = 100
TARGET_ADD_MS, TARGET_FIRST_MS, TARGET_PKT_TOL = 10.0, 150.0, 0.15
CLONE_NEWNET = 0x40000000
LOG_LINE = re.compile(r"verb=(\w+) .* result=(\S+) .*duration_ms=([\d.]+)")

libc = ctypes.CDLL(None, use_errno=True)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def setns(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def run(cmd, check=True, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"failed (rc={p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}{p.stderr}")
    return p


def pct(xs, q):
    """q-th percentile, linear between closest ranks."""
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * q / 100
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


def summary(xs):
    if not xs:
        return None
    return {"n": len(xs), "median": statistics.median(xs), "p90": pct(xs, 90), "min": min(xs), "max": max(xs),
            "mean": statistics.fmean(xs)}


class Bench:
    def __init__(self, a):
        self.a = a
        self.pfx, self.pin, self.work = a.prefix, a.pin, Path(a.work)
        self.rng = random.Random(a.seed)
        self.namespaces, self.procs, self.pins, self.nets = [], [], [], []
        self.home_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
        self.stats_old = None
        self.samples = {}
        self.extra = {}
        self.plugin_log = self.work / "plugin.log"
        self.log_pos = 0
        (self.work / "cni-bin").mkdir(exist_ok=True)
        link = self.work / "cni-bin" / "ebpf-masq"
        if not link.exists():
            link.symlink_to(os.path.realpath(a.plugin))

    # ------------------------------------------------------------ plumbing
    def add_sample(self, key, v):
        self.samples.setdefault(key, []).append(v)

    def netns(self, short):
        name = f"{self.pfx}-{short}"
        run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        run(["ip", "-n", name, "link", "set", "lo", "up"])
        return name

    def node(self, short):
        """node (eth0 10.0.0.5, default via ext) and ext (10.0.0.2, no route back to pods)."""
        node, ext = self.netns(f"{short}node"), self.netns(f"{short}ext")
        run(["ip", "-n", node, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", ext])
        for ns, cidr in ((node, f"{NODE_IP}/24"), (ext, f"{EXT_IP}/24")):
            run(["ip", "-n", ns, "addr", "add", cidr, "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", node, "route", "add", "default", "via", EXT_IP, "dev", "eth0"])
        run(["ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        return node, ext

    def enter(self, ns):
        setns(f"/run/netns/{ns}")

    def leave(self):
        if libc.setns(self.home_ns, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")

    def network(self, short, first, last, pin=None, **masq):
        name = f"{self.pfx}-{short}"
        plugins = [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                    "ipam": {"type": "host-local",
                             "ranges": [[{"subnet": SUBNET, "rangeStart": f"10.244.1.{first}",
                                          "rangeEnd": f"10.244.1.{last}"}]],
                             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.work / f"ipam-{short}")}}]
        if pin:
            plugins.append({"type": "ebpf-masq", "pinPath": pin, **masq})
        d = self.work / f"netconf-{short}"
        d.mkdir()
        (d / f"{name}.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": plugins}))
        self.nets.append(name)
        env = {**os.environ, "NETCONFPATH": str(d), "CNI_PATH": f"{CNI_BIN_DIR}:{self.work}/cni-bin"}
        return {"name": name, "env": env}

    def cnitool(self, verb, net, pod):
        """cnitool in the current (node) netns; returns (seconds, stdout)."""
        t0 = time.perf_counter()
        p = subprocess.run(["cnitool", verb, net["name"], f"/run/netns/{pod}"], env=net["env"],
                           capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"cnitool {verb} {net['name']} {pod}: {p.stdout}{p.stderr}")
        return secs, p.stdout

    def plugin(self, verb, conf, pod):
        """The plugin run directly, as libcni runs it; returns (wall s, own duration ms or None)."""
        from hashlib import sha512
        env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
        env.update(CNI_COMMAND=verb, CNI_NETNS=f"/run/netns/{pod}", CNI_IFNAME="eth0",
                   CNI_CONTAINERID="cnitool-" + sha512(f"/run/netns/{pod}".encode()).hexdigest()[:20],
                   CNI_PATH=f"{CNI_BIN_DIR}:{self.work}/cni-bin")
        data = json.dumps(conf)
        t0 = time.perf_counter()
        p = subprocess.run([self.a.plugin], env=env, input=data, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"ebpf-masq {verb} on {pod}: {p.stdout}{p.stderr}")
        own = None
        if conf.get("logFile") == str(self.plugin_log) and self.plugin_log.exists():
            with open(self.plugin_log) as f:
                f.seek(self.log_pos)
                new = f.read()
                self.log_pos = f.tell()
            for m in LOG_LINE.finditer(new):
                if m.group(1) == verb:
                    own = float(m.group(3))
        return secs, own

    def masq_conf(self, name, pin, prev=None, **keys):
        conf = {"cniVersion": "1.0.0", "name": name, "type": "ebpf-masq", "pinPath": pin,
                "logFile": str(self.plugin_log), **keys}
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    def set_stats(self, on):
        if self.stats_old is None:
            self.stats_old = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1" if on else self.stats_old)

    @staticmethod
    def progs_dir(pin):
        """<pin>/v<layout>/progs, whatever the layout version of the binary under test."""
        found = sorted(Path(pin).glob("v*/progs/masq_up_egress"))
        if len(found) != 1:
            raise RuntimeError(f"expected one pinned data plane under {pin}, found {found}")
        return found[0].parent

    def prog_stats(self, pin):
        out = {}
        progs = self.progs_dir(pin)
        for prog in ("masq_up_egress", "masq_veth_in"):
            info = json.loads(run(["bpftool", "-j", "prog", "show", "pinned", progs / prog]).stdout)
            out[prog] = (info.get("run_time_ns", 0), info.get("run_cnt", 0))
        return out

    # ------------------------------------------------------------ phases
    def direct_cycle(self, br, pod, pin, add_key, del_key=None, record=True, **keys):
        """cnitool add (bridge only), the plugin's ADD and DEL run directly with the
        bridge's result, cnitool del. Records <key>_wall_ms and <key>_own_ms; returns
        the two cnitool times."""
        t_add, out = self.cnitool("add", br, pod)
        prev = json.loads(out)
        for verb, conf, key in (("ADD", self.masq_conf(br["name"], pin, prev, **keys), add_key),
                                ("DEL", self.masq_conf(br["name"], pin), del_key)):
            wall, own = self.plugin(verb, conf, pod)
            if record and key:
                self.add_sample(f"{key}_wall_ms", wall * 1000)
                if own is not None:
                    self.add_sample(f"{key}_own_ms", own)
        t_del, _ = self.cnitool("del", br, pod)
        return t_add, t_del

    def phase_warm(self):
        a = self.a
        node, ext = self.node("w")
        self.warm = (node, ext)
        pod_a, pod_b, base = self.netns("wpa"), self.netns("wpb"), self.netns("wbase")
        self.br = self.network("wbr", 10, 19)
        self.chain = self.network("wmasq", 20, 250, pin=self.pin)
        self.enter(node)
        t, _ = self.cnitool("add", self.chain, base)  # loads the programs: the node is warm from here on
        self.extra["warm_node_first_cnitool_add_ms"] = t * 1000
        p = run(["ip", "netns", "exec", base, "ping", "-n", "-q", "-c", "2", "-i", "0.1", "-W", "1", EXT_IP],
                check=False)
        if p.returncode != 0:
            raise RuntimeError("the attached pod cannot reach ext (ext has no route back: the NAT does not work)")
        log(f"bench: add-latency warm node: {a.reps} repetitions (+3 warm-up)")
        for rep in range(-3, a.reps):
            arms = ["bridge", "chain"]
            self.rng.shuffle(arms)
            t = {}
            for arm in arms:
                if arm == "bridge":
                    t["add_b"], t["del_b"] = self.direct_cycle(self.br, pod_a, self.pin, "plugin_add", "plugin_del",
                                                               record=rep >= 0)
                else:
                    t["add_c"], _ = self.cnitool("add", self.chain, pod_b)
                    t["del_c"], _ = self.cnitool("del", self.chain, pod_b)
            if rep < 0:  # warm-up
                continue
            for k, key in (("add_b", "cnitool_add_bridge_ms"), ("add_c", "cnitool_add_chain_ms"),
                           ("del_b", "cnitool_del_bridge_ms"), ("del_c", "cnitool_del_chain_ms")):
                self.add_sample(key, t[k] * 1000)
            self.add_sample("cnitool_add_diff_ms", (t["add_c"] - t["add_b"]) * 1000)
            self.add_sample("cnitool_del_diff_ms", (t["del_c"] - t["del_b"]) * 1000)
            if (rep + 1) % max(1, a.reps // 5) == 0:
                log(f"  {rep + 1}/{a.reps}: median chain-bridge ADD "
                    f"{statistics.median(self.samples['cnitool_add_diff_ms']):.2f} ms, plugin ADD "
                    f"{statistics.median(self.samples['plugin_add_wall_ms']):.2f} ms")
        self.leave()

    def phase_first(self):
        a = self.a
        node, _ = self.node("f")
        pod = self.netns("fpod")
        br = self.network("fbr", 10, 19)
        self.enter(node)
        _, out = self.cnitool("add", br, pod)
        prev = json.loads(out)
        sizes = [("default", None), ("65536", SMALL_NAT)]
        log(f"bench: add-latency first ADD on a fresh node: {a.first} x {len(sizes)} sizes")

        def fresh_add(label, size, i, **keys):
            pin = f"{self.pin}-first-{label}-{i}"
            self.pins.append(pin)
            extra = {} if size is None else {"natMaxEntries": size}
            conf = self.masq_conf(br["name"], pin, prev, **extra, **keys)
            wall, own = self.plugin("ADD", conf, pod)
            self.progs_dir(pin)  # the programs are pinned
            self.plugin("DEL", self.masq_conf(br["name"], pin), pod)
            shutil.rmtree(pin)
            # the uplink is fresh again: our TCX links went with the pins; a tc-mode filter goes with its qdisc
            run(["tc", "qdisc", "del", "dev", "eth0", "clsact"], check=False)
            return wall, own

        for i in range(a.first):
            order = list(sizes)
            self.rng.shuffle(order)
            for label, size in order:
                wall, own = fresh_add(label, size, i)
                self.add_sample(f"first_add_{label}_wall_ms", wall * 1000)
                if own is not None:
                    self.add_sample(f"first_add_{label}_own_ms", own)
                log(f"  first ADD natMaxEntries={label}: {wall * 1000:.0f} ms wall, {own} ms own")
        # Breakdown from one trace-logged run per size (the logging itself adds time).
        for label, size in sizes:
            tlog = self.work / f"trace-{label}.log"
            fresh_add(label, size, "trace", logLevel="trace", logFile=str(tlog))
            self.extra[f"first_add_{label}_breakdown_ms"] = self.breakdown(tlog)
        self.cnitool("del", br, pod)
        self.leave()

    @staticmethod
    def breakdown(path):
        """Stages of one first ADD from its trace log (timestamps in ms)."""
        marks = {}
        for line in Path(path).read_text(errors="replace").splitlines():
            m = re.match(r"ts=(\d+\.\d+) ", line)
            if not m:
                continue
            ts = float(m.group(1)) * 1000
            marks.setdefault("start", ts)  # first line: config parsed, logger up
            if "BPF Feature Detection" in line:
                marks.setdefault("features", ts)
            elif re.search(r"relocating program `masq_veth_in` function `masq_veth_in`", line):
                marks.setdefault("veth_maps", ts)
            elif re.search(r"relocating program `masq_up_\w+` function `masq_up_\w+`", line):
                marks.setdefault("uplink_obj", ts)
            elif "verb=ADD" in line:
                marks["end"] = ts
        order = [("uplinks+lock+feature probes", "start", "features"),
                 ("create+pin maps (veth object)", "features", "veth_maps"),
                 ("verify+pin veth prog, uplink object maps", "veth_maps", "uplink_obj"),
                 ("verify+pin uplink progs, attach, register", "uplink_obj", "end")]
        return {name: round(marks[b] - marks[a], 1) for name, a, b in order if a in marks and b in marks}

    def udp_stats(self, base, label, runs):
        for _ in range(runs):
            s0 = self.prog_stats(self.pin)
            self.set_stats(True)
            try:
                p = run(["ip", "netns", "exec", base, self.a.tool, "udp-send", EXT_IP, UDP_PORT, self.a.secs, UDP_LEN],
                        timeout=self.a.secs + 30)
            finally:
                self.set_stats(False)
            s1 = self.prog_stats(self.pin)
            res = json.loads(p.stdout.strip().splitlines()[-1])
            for prog, key in (("masq_up_egress", "egress"), ("masq_veth_in", "veth")):
                dns, dcnt = s1[prog][0] - s0[prog][0], s1[prog][1] - s0[prog][1]
                if dcnt > 0:
                    self.add_sample(f"bpf_{key}_ns_{label}", dns / dcnt)
            self.add_sample(f"udp_kpps_{label}", res["sent"] / res["secs"] / 1000)
            log(f"  {label}: uplink egress {self.samples[f'bpf_egress_ns_{label}'][-1]:.1f} ns/pkt, "
                f"veth ingress {self.samples[f'bpf_veth_ns_{label}'][-1]:.1f} ns/pkt, "
                f"{self.samples[f'udp_kpps_{label}'][-1]:.0f} kpps")

    def direct_adds(self, label, pod):
        """The direct ADD as configured (uplinks from the default route) and with
        egressInterfaces set, interleaved: shows what depends on the node's links."""
        for _ in range(min(self.a.reps, 30)):
            variants = [("", {}), ("_egress_if", {"egressInterfaces": ["eth0"]})]
            self.rng.shuffle(variants)
            for suffix, keys in variants:
                self.direct_cycle(self.br, pod, self.pin, f"plugin_add_{label}{suffix}", **keys)

    def n_attached(self):
        p = run([self.a.plugin, "status", "--json", "--pin-path", self.pin])
        return sum(1 for p in json.loads(p.stdout)["pods"] if p["veth_attached"])

    def phase_pods(self):
        a = self.a
        node, ext = self.warm
        base = f"{self.pfx}-wbase"
        pod_a = f"{self.pfx}-wpa"
        self.enter(node)
        sink = subprocess.Popen(["ip", "netns", "exec", ext, a.tool, "udp-sink", str(UDP_PORT)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(sink)
        for _ in range(100):
            if run(["ip", "netns", "exec", ext, "ss", "-Hlnu", f"sport = :{UDP_PORT}"]).stdout.strip():
                break
            time.sleep(0.05)
        runs = a.stat_runs
        log(f"bench: add-latency per-packet cost, {runs} x {a.secs}s UDP per stage (A-B-A)")
        assert self.n_attached() == 1
        self.direct_adds("1pod", pod_a)
        run(["ip", "netns", "exec", base, a.tool, "udp-send", EXT_IP, UDP_PORT, 1, UDP_LEN])  # warm-up, NAT entry
        flows = json.loads(run([a.plugin, "nat", "list", "--json", "--pin-path", self.pin]).stdout)
        if not any(f["proto"] == "udp" and f["remote_port"] == UDP_PORT and f["nat_addr"] == NODE_IP for f in flows):
            raise RuntimeError(f"the UDP flow is not masqueraded: nat list {flows}")
        self.udp_stats(base, "1pod", runs)
        log(f"bench: add-latency attaching {N_PODS - 1} more pods")
        extra = []
        t0 = time.monotonic()
        for i in range(N_PODS - 1):
            ns = self.netns(f"wx{i:03d}")
            t, _ = self.cnitool("add", self.chain, ns)
            self.add_sample("cnitool_add_chain_filling_ms", t * 1000)
            extra.append(ns)
        log(f"  {N_PODS - 1} pods added in {time.monotonic() - t0:.1f}s")
        attached = self.n_attached()
        if attached != N_PODS:
            raise RuntimeError(f"{attached} pods attached, expected {N_PODS}")
        self.extra["pods_attached"] = attached
        self.direct_adds("100pods", pod_a)
        self.udp_stats(base, "100pods", runs)
        for ns in extra:
            self.cnitool("del", self.chain, ns)
        if self.n_attached() != 1:
            raise RuntimeError("DEL of the extra pods left attachments")
        self.udp_stats(base, "1pod_after", runs)
        self.cnitool("del", self.chain, base)
        self.leave()

    # ------------------------------------------------------------ cleanup
    def close(self):
        errors = []
        if self.stats_old is not None:
            try:
                Path("/proc/sys/kernel/bpf_stats_enabled").write_text(self.stats_old)
            except OSError as e:
                errors.append(repr(e))
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        try:
            self.leave()
        except OSError as e:
            errors.append(repr(e))
        for ns in reversed(self.namespaces):
            run(["ip", "netns", "del", ns], check=False)
        for pin in [self.pin, *self.pins]:
            shutil.rmtree(pin, ignore_errors=True)
        for net in self.nets:
            for f in Path("/var/lib/cni/results").glob(f"{net}-*"):
                f.unlink(missing_ok=True)
        if errors:
            log("bench: cleanup errors: " + "; ".join(errors))

    # ------------------------------------------------------------ report
    def report(self, meta):
        s = {k: summary(v) for k, v in self.samples.items()}
        med = lambda k: s[k]["median"] if s.get(k) else None  # noqa: E731
        one = self.samples.get("bpf_egress_ns_1pod", []) + self.samples.get("bpf_egress_ns_1pod_after", [])
        one_v = self.samples.get("bpf_veth_ns_1pod", []) + self.samples.get("bpf_veth_ns_1pod_after", [])
        ratios = {}
        if one and med("bpf_egress_ns_100pods"):
            ratios["egress_100_vs_1"] = med("bpf_egress_ns_100pods") / statistics.median(one)
        if one_v and med("bpf_veth_ns_100pods"):
            ratios["veth_100_vs_1"] = med("bpf_veth_ns_100pods") / statistics.median(one_v)
        verdicts = {}

        def verdict(name, value, ok, target):
            if value is not None:
                verdicts[name] = {"value": round(value, 2), "target": target, "met": bool(ok)}

        diff = med("cnitool_add_diff_ms")
        verdict("add_overhead_ms", diff, diff is not None and diff <= TARGET_ADD_MS, f"<= {TARGET_ADD_MS} ms (median)")
        for label in ("default", "65536"):
            v = med(f"first_add_{label}_wall_ms")
            verdict(f"first_add_{label}_ms", v, v is not None and v <= TARGET_FIRST_MS, f"<= {TARGET_FIRST_MS} ms")
        r = ratios.get("egress_100_vs_1")
        verdict("egress_ns_100_vs_1_pod", r, r is not None and abs(r - 1) <= TARGET_PKT_TOL,
                f"unchanged (within +-{TARGET_PKT_TOL:.0%})")

        rows = [
            ("CNI ADD on a warm node (ms)", None),
            ("cnitool add: bridge + host-local", "cnitool_add_bridge_ms"),
            ("cnitool add: bridge + host-local + ebpf-masq", "cnitool_add_chain_ms"),
            ("  difference, paired per repetition = our cost", "cnitool_add_diff_ms"),
            ("ebpf-masq ADD run directly: wall (exec to exit)", "plugin_add_wall_ms"),
            ("ebpf-masq ADD: its own duration_ms", "plugin_add_own_ms"),
            ("ebpf-masq ADD directly, 1 pod attached: wall", "plugin_add_1pod_wall_ms"),
            ("  same, egressInterfaces [eth0] set: wall", "plugin_add_1pod_egress_if_wall_ms"),
            ("ebpf-masq ADD directly, 100 pods attached: wall", "plugin_add_100pods_wall_ms"),
            ("  same, own duration_ms", "plugin_add_100pods_own_ms"),
            ("  same, egressInterfaces [eth0] set: wall", "plugin_add_100pods_egress_if_wall_ms"),
            ("cnitool add through the chain while filling to 100 pods", "cnitool_add_chain_filling_ms"),
            ("CNI DEL on a warm node (ms)", None),
            ("cnitool del: bridge + host-local", "cnitool_del_bridge_ms"),
            ("cnitool del: bridge + host-local + ebpf-masq", "cnitool_del_chain_ms"),
            ("  difference, paired per repetition", "cnitool_del_diff_ms"),
            ("ebpf-masq DEL run directly: wall", "plugin_del_wall_ms"),
            ("ebpf-masq DEL: its own duration_ms", "plugin_del_own_ms"),
            ("First ADD on a fresh node (ms)", None),
            (f"natMaxEntries default ({DEFAULT_NAT}): wall", "first_add_default_wall_ms"),
            (f"natMaxEntries default ({DEFAULT_NAT}): own duration_ms", "first_add_default_own_ms"),
            (f"natMaxEntries {SMALL_NAT}: wall", "first_add_65536_wall_ms"),
            (f"natMaxEntries {SMALL_NAT}: own duration_ms", "first_add_65536_own_ms"),
            ("Per-packet cost, UDP 64 B flow (bpf_stats, ns/pkt)", None),
            ("uplink egress, 1 pod attached", "bpf_egress_ns_1pod"),
            ("uplink egress, 100 pods attached", "bpf_egress_ns_100pods"),
            ("uplink egress, 1 pod attached again", "bpf_egress_ns_1pod_after"),
            ("pod veth ingress, 1 pod attached", "bpf_veth_ns_1pod"),
            ("pod veth ingress, 100 pods attached", "bpf_veth_ns_100pods"),
            ("pod veth ingress, 1 pod attached again", "bpf_veth_ns_1pod_after"),
            ("UDP rate sent (kpps), 1 pod / 100 pods / 1 pod", None),
            ("  1 pod", "udp_kpps_1pod"),
            ("  100 pods", "udp_kpps_100pods"),
            ("  1 pod again", "udp_kpps_1pod_after"),
        ]
        head = ["", "n", "median", "p90", "min", "max"]
        table = []
        for label, key in rows:
            if key is None:
                table.append([label, "", "", "", "", ""])
            elif s.get(key):
                x = s[key]
                table.append([label, str(x["n"])] + [f"{x[k]:.2f}" for k in ("median", "p90", "min", "max")])
        w = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
        print()
        print(f"ebpf-masq ADD latency: {meta['reps']} repetitions, {meta['first']} fresh-node ADDs per size, "
              f"{meta['stat_runs']} x {meta['secs']} s UDP per stage, kernel {meta['kernel']}, {meta['cpus']} CPUs, "
              f"runtime {meta['runtime_s']} s, loadavg {meta['loadavg_start']} -> {meta['loadavg_end']}")
        print("  ".join(h.rjust(w[i]) if i else h.ljust(w[i]) for i, h in enumerate(head)))
        for r in table:
            if not r[1]:
                print(r[0])
            else:
                print("  ".join(c.rjust(w[i]) if i else ("  " + c).ljust(w[i]) for i, c in enumerate(r)))
        for label in ("default", "65536"):
            b = self.extra.get(f"first_add_{label}_breakdown_ms")
            if b:
                print(f"first ADD natMaxEntries={label}, one trace-logged run (ms, logging inflates): "
                      + ", ".join(f"{k} {v:g}" for k, v in b.items()))
        for k, v in ratios.items():
            print(f"ratio {k}: {v:.3f}")
        print("targets:")
        for k, v in verdicts.items():
            print(f"  {k:<28} {v['value']:>9}  target {v['target']:<28} {'met' if v['met'] else 'NOT MET'}")
        return {"meta": meta, "summary": s, "ratios": ratios, "verdicts": verdicts, "extra": self.extra,
                "samples": self.samples}


def main():
    ap = argparse.ArgumentParser()
    for k in ("prefix", "pin", "work", "plugin", "tool"):
        ap.add_argument(f"--{k}", required=True)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--first", type=int, default=5)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--stat-runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load0 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    start = time.monotonic()
    b = Bench(a)
    try:
        b.phase_warm()
        b.phase_first()
        b.phase_pods()
    finally:
        b.close()
    meta = {"reps": a.reps, "first": a.first, "secs": a.secs, "stat_runs": a.stat_runs, "seed": a.seed,
            "plugin": a.plugin, "kernel": os.uname().release, "cpus": os.cpu_count(),
            "loadavg_start": load0, "loadavg_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
            "runtime_s": round(time.monotonic() - start)}
    doc = b.report(meta)
    if a.json:
        text = json.dumps(doc, separators=(",", ":"))
        if a.json == "-":
            print(text)
        else:
            Path(a.json).write_text(text + "\n")
            print(f"\nJSON written to {a.json}")


if __name__ == "__main__":
    main()
