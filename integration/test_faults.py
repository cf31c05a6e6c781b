"""Faults and restarts: the plugin killed with SIGKILL in the middle of ADD (and
DEL), on a fresh node while the programs are being loaded and pinned and on a
node that already has them; a stale, partially written pin directory; two first
ADDs racing on a fresh node.

After every fault the node must converge: the next ADD of the same pod and of
new pods succeeds, the pods are masqueraded (ext sees the node's address), and
after DEL of everything nothing is left (`status --json`: no pods; `nat list`:
empty; no tc filter on the pod veths; the node lock is free: flock(2) locks die
with their process, so a killed plugin never blocks the next call).

The pods come from a bridge + host-local network (cnitool); ebpf-masq is invoked
directly with the bridge's result as prevResult, as a runtime would, so the
process that gets the SIGKILL is the plugin itself (`nsenter` execs it, no fork).

Kill delays are random within strata spanning the measured duration of the ADD
being killed; FAULTS_SEED=N reproduces a run (the seed is printed).
"""
import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lab.lifelab import bridge, has_masq_filter, masq_conf, nat_flows, network, registrations, status
from lab.netlab import CNI_BIN_DIR, Topo, cnitool_container_id, sh

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
PROGS = ("masq_veth_in", "masq_up_egress", "masq_up_ingress")
UDP_PORT = 5001
# One load = one relocation of the veth object (aya's debug/trace log, one line per load).
LOAD_MARK = re.compile(r"pid=(\d+) relocating program `masq_veth_in` function `masq_veth_in`")


def seed():
    s = int(os.environ.get("FAULTS_SEED") or random.SystemRandom().randrange(1 << 31))
    print(f"FAULTS_SEED={s}")
    return random.Random(s)


def stratified(rng, lo, hi, n):
    """n random delays, one per equal slice of [lo, hi], shuffled: they span the range."""
    step = (hi - lo) / n
    out = [lo + step * (i + rng.random()) for i in range(n)]
    rng.shuffle(out)
    return out


def lock_holders(path):
    """PIDs holding a flock on `path`, from /proc/locks."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:1e:5678 0 EOF" ("->" marks a blocked waiter)
        if "FLOCK" in f and "->" not in f and len(f) >= 6 and f[5] == dev:
            pids.append(int(f[4]))
    return pids


def lock_is_free(path):
    """Take and drop the node lock (LOCK_NB) from here: nobody holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def stdin_pipe(data):
    """A pipe's read end that yields `data` and then EOF (the config is small)."""
    r, w = os.pipe()
    os.write(w, data.encode())
    os.close(w)
    return r


def filter_prog_id(topo, dev, direction):
    m = re.search(r"\bbpf\b.*\bid (\d+)", topo.node.bpf_hooks(dev, direction))
    return int(m.group(1)) if m else None


class Node:
    """One lab node; ebpf-masq invoked directly for pods of a bridge-only network."""

    def __init__(self, topo, plugin):
        self.t, self.plugin = topo, str(plugin)
        self.pin = Path(topo.lab.pin_path)
        self._root = None
        self.net = network(topo, [bridge(topo, 10, 199, "ipam-faults")], "1.0.0")
        self.udp = None
        self.events = []  # (what, delay ms, outcome, pin state after)

    # -- pods and calls --------------------------------------------------------
    def pod(self, name):
        return self.net.add(self.t.pod_ns(name))

    def conf(self, pod=None, **extra):
        return masq_conf(self.t, self.net.name, "1.0.0", pod.result if pod else None, **extra)

    def _cmd(self, verb, pod, conf):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
        env.update(CNI_COMMAND=verb, CNI_CONTAINERID=cnitool_container_id(pod.ns.path), CNI_NETNS=pod.ns.path,
                   CNI_IFNAME="eth0", CNI_PATH=f"{CNI_BIN_DIR}:{self.t.cni_bin}")
        return ["nsenter", f"--net={self.t.node.path}", "--", self.plugin], env, json.dumps(conf)

    def spawn(self, verb, pod, conf=None):
        """Start the plugin in the background; returns (Popen, start time)."""
        cmd, env, data = self._cmd(verb, pod, conf or self.conf(pod if verb == "ADD" else None))
        stdin = stdin_pipe(data)
        t0 = time.monotonic()
        try:
            p = self.t.lab.spawn(cmd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        finally:
            os.close(stdin)
        return p, t0

    def call(self, verb, pod, conf=None):
        """Run the plugin to the end; returns (rc, stdout, stderr, seconds)."""
        p, t0 = self.spawn(verb, pod, conf)
        out, err = p.communicate(timeout=120)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0

    def add(self, pod, **extra):
        rc, out, err, secs = self.call("ADD", pod, self.conf(pod, **extra))
        assert rc == 0, f"ADD of {pod.ns.name} failed:\n{out}{err}\n{self.report()}"
        assert json.loads(out) == pod.result  # prevResult passed through
        assert self.root.is_dir()  # learn the layout directory
        return secs

    def delete(self, pod):
        rc, out, err, secs = self.call("DEL", pod)
        assert (rc, out.strip()) == (0, ""), f"DEL of {pod.ns.name}:\n{out}{err}"
        return secs

    def kill(self, verb, pod, delay=None, when=None, what=None):
        """Start `verb` for pod and SIGKILL it `delay` s after the start, or as soon as
        when() is true (polled), unless it is done by then. Returns "killed" or
        "finished"; a finished call must have succeeded. Afterwards the node lock
        must be free."""
        p, t0 = self.spawn(verb, pod)
        if when is None:
            left = t0 + delay - time.monotonic()
            if left > 0:
                time.sleep(left)
        else:
            while p.poll() is None and not when():
                time.sleep(0.0002)
        took = time.monotonic() - t0
        outcome = "finished" if p.poll() is not None else "killed"
        if outcome == "killed":
            p.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        if p.returncode != -signal.SIGKILL:
            outcome = "finished"
            assert p.returncode == 0, f"{verb} failed without a kill: {out.decode()}{err.decode()}"
        self.events.append((what or verb, round(took * 1000, 1), outcome, self.pin_state()))
        self.assert_lock_free()
        return outcome

    # -- node state ------------------------------------------------------------
    @property
    def root(self):
        """<pinPath>/v<layout version of the binary>, learnt from the first ADD's pins."""
        if self._root is None:
            found = sorted(self.pin.glob("v*/progs"))
            assert found, f"root unknown before a successful ADD: {self.pin_state()}"
            assert len(found) == 1, found
            self._root = found[0].parent
        return self._root

    def loaded(self):
        return all((self.root / "progs" / p).exists() for p in PROGS)

    def pin_state(self):
        if self._root is None or not self.root.exists():
            return "no pins"
        maps = sorted(os.listdir(self.root / "maps")) if (self.root / "maps").is_dir() else []
        progs = sorted(os.listdir(self.root / "progs")) if (self.root / "progs").is_dir() else []
        return f"maps={len(maps)} progs={','.join(p.replace('masq_', '') for p in progs) or '-'}"

    def assert_lock_free(self):
        if self._root is None or not self.root.exists():
            return
        assert lock_holders(self.root) == [], f"node lock still held: {lock_holders(self.root)}"
        assert lock_is_free(self.root), "node lock busy"

    def reboot(self):
        """What a reboot loses: every pin and the uplink filters (pods must be DELeted first)."""
        shutil.rmtree(self.pin, ignore_errors=True)
        self.t.node.enter(["tc", "qdisc", "del", "dev", "eth0", "clsact"], check=False)
        assert not self.pin.exists()

    def pinned_prog_id(self, prog):
        p = sh(["bpftool", "-j", "prog", "show", "pinned", self.root / "progs" / prog])
        return json.loads(p.stdout)["id"]

    def masqueraded(self, pod):
        """One UDP exchange pod -> ext; ext must have seen the node's address only."""
        if self.udp is None:
            self.udp = self.t.ext.server("udp", UDP_PORT)
        seen = len(self.udp.records())
        rc, res = pod.ns.client("udp", EXT, UDP_PORT, timeout=3)
        assert rc == 0, f"{pod.ns.name}: no UDP reply through the NAT: {res}\n{self.report()}"
        new = {r["addr"] for r in self.udp.records()[seen:]}
        assert new == {NODE_IP}, f"{pod.ns.name}: ext saw {new}"

    def assert_converged(self, pods):
        assert self.loaded(), self.pin_state()
        regs = registrations(self.t, self.plugin)
        assert set(regs) == {cnitool_container_id(p.ns.path) for p in pods}, (sorted(regs), self.report())
        ids = {d: self.pinned_prog_id(f"masq_up_{d}") for d in ("egress", "ingress")}
        for d, pid in ids.items():  # the uplink runs the pinned programs
            assert filter_prog_id(self.t, "eth0", d) == pid, (d, self.t.node.bpf_hooks("eth0", d))
        for p in pods:
            reg = regs[cnitool_container_id(p.ns.path)]
            assert (reg["addresses"], reg["veth"], reg["veth_attached"]) == ([p.ip], p.host_veth, True), reg
            self.masqueraded(p)

    def assert_clean(self, pods):
        assert registrations(self.t, self.plugin) == {}
        assert nat_flows(self.t, self.plugin) == []
        for p in pods:
            assert not has_masq_filter(self.t, p.host_veth), self.t.node.bpf_hooks(p.host_veth, "ingress")
        self.assert_lock_free()

    def report(self):
        lines = [f"{w:<10} {d:>8} ms  {o:<8} {s}" for w, d, o, s in self.events]
        return "kills (what, delay, outcome, pins after):\n  " + "\n  ".join(lines) if lines else ""


@pytest.fixture
def node(topo, plugin):
    assert shutil.which("bpftool"), "bpftool missing (scripts/install-deps.sh)"
    return Node(topo, plugin)


# 1. SIGKILL during the first ADD on a fresh node -------------------------------------------

FRESH_KILLS = 8


def test_kill_first_add_on_fresh_node(node):
    """Default natMaxEntries (the slow first load). Each time on a fresh node: the
    first ADD is killed, after a delay spanning a first ADD or as soon as a stage
    of the load shows in the pins; then ADD of the same pod and of another one:
    converged and masqueraded; DEL both: nothing left; then "reboot"."""
    rng = seed()
    a, b = node.pod("a"), node.pod("b")
    first = node.add(a)  # calibration: how long a first ADD takes here
    node.add(b)
    node.assert_converged([a, b])
    node.delete(a), node.delete(b)
    node.assert_clean([a, b])
    node.reboot()

    def pinned(sub):
        return lambda: (node.root / sub).exists()

    def any_map():
        return (node.root / "maps").is_dir() and bool(os.listdir(node.root / "maps"))

    kills = [dict(delay=d) for d in stratified(rng, 0.0, first * 1.1, FRESH_KILLS)]
    kills += [dict(when=pinned("")), dict(when=any_map), dict(when=pinned("maps/nat4_rev")),
              dict(when=pinned("progs/masq_veth_in")), dict(when=pinned("progs/masq_up_egress"))]
    print(f"first ADD {first * 1000:.0f} ms; kill delays (ms): "
          f"{[round(k['delay'] * 1000) for k in kills if 'delay' in k]} and 5 at stages of the load")
    for i, k in enumerate(kills):
        victim, other = (a, b) if i % 2 == 0 else (b, a)
        node.kill("ADD", victim, what="first-ADD", **k)
        node.add(victim)
        node.add(other)
        node.assert_converged([victim, other])
        node.delete(victim), node.delete(other)
        node.assert_clean([victim, other])
        node.reboot()
    print(node.report())
    # At least one kill must have caught the load half-done (some pins, not all programs).
    partial = [e for e in node.events if e[2] == "killed" and re.match(r"maps=[1-9]", e[3]) and e[3].count(",") < 2]
    assert partial, "no kill landed while the programs were being loaded and pinned\n" + node.report()


# 2. SIGKILL during ADD on a loaded node --------------------------------------------------------

WARM_KILLS = 16


def test_kill_add_on_loaded_node(node):
    """Kills spanning a warm ADD (attach from the pins); after each the lock is free
    and another pod's ADD goes through at once. Then: the killed pods, one ADDed
    again and one only DELeted (kubelet's answer to a failed ADD), and a new pod."""
    rng = seed()
    base, again, dropped = node.pod("base"), node.pod("again"), node.pod("dropped")
    node.add(base)
    warm = sorted(node.add(again) for _ in range(5))[2]  # median warm ADD, process start to exit
    node.delete(again)
    delays = stratified(rng, 0.0, warm * 1.5, WARM_KILLS)
    print(f"warm ADD {warm * 1000:.1f} ms; kill delays (ms): {[round(d * 1000, 1) for d in delays]}")
    for i, delay in enumerate(delays):
        node.kill("ADD", again if i % 2 == 0 else dropped, delay, what="warm-ADD")
        # The node keeps serving: no wait for a dead lock holder (a call that waits says so in its log).
        log = node.t.lab.tmp / f"after-kill-{i}.log"
        node.add(base, logLevel="info", logFile=str(log))
        assert "node lock on" not in log.read_text(errors="replace"), log.read_text(errors="replace")
    print(node.report())
    assert any(o == "killed" for _, _, o, _ in node.events), node.report()
    node.add(again)
    node.delete(dropped)
    new = node.pod("new")
    node.add(new)
    node.assert_converged([base, again, new])
    for p in (base, again, new, dropped):
        node.delete(p)
    node.assert_clean([base, again, new, dropped])


# 3. SIGKILL while holding the node lock -------------------------------------------------------

def test_kill_while_holding_node_lock(node):
    """Deterministic: the first ADD is killed while /proc/locks shows it holding the
    node lock (it loads the programs under the lock); the next ADD does not wait."""
    a, b = node.pod("a"), node.pod("b")
    node.add(a)  # learn where the pins go
    node.delete(a)
    # The lock that /proc/locks shows is the one the plugin waits for: while this
    # test holds it, an ADD does not finish; released, the ADD completes.
    fd = os.open(node.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        waiter_log = node.t.lab.tmp / "waiter.log"
        p, _ = node.spawn("ADD", a, node.conf(a, logLevel="info", logFile=str(waiter_log)))
        time.sleep(1.0)
        assert p.poll() is None, "ADD finished while the node lock was held by someone else"
        assert lock_holders(node.root) == [os.getpid()]
    finally:
        os.close(fd)  # releases the lock
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, out + err
    assert "node lock on" in waiter_log.read_text(errors="replace")  # a call that waited says so
    node.delete(a)
    node.reboot()

    p, _ = node.spawn("ADD", a)
    deadline = time.monotonic() + 30
    while not (node.root.exists() and p.pid in lock_holders(node.root)):
        assert p.poll() is None, "the first ADD finished before it was seen holding the node lock"
        assert time.monotonic() < deadline, "the first ADD never held the node lock"
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    node.events.append(("lock-held", None, "killed", node.pin_state()))
    node.assert_lock_free()
    # It took the lock at its first try: a call that has to wait says so in its log.
    log = node.t.lab.tmp / "after-kill.log"
    node.add(b, logLevel="info", logFile=str(log))
    assert "node lock on" not in log.read_text(errors="replace"), log.read_text(errors="replace")
    node.add(a)
    node.assert_converged([a, b])
    node.delete(a), node.delete(b)
    node.assert_clean([a, b])


# 4. SIGKILL during DEL ---------------------------------------------------------------------------

DEL_KILLS = 8


def test_kill_del(node):
    """Kills spanning DEL of a pod with NAT state; DEL again finishes the job."""
    rng = seed()
    pods = [node.pod(f"d{i}") for i in range(2)]
    node.add(pods[0])
    node.add(pods[1])
    node.masqueraded(pods[1])
    dels = []
    for _ in range(3):
        node.add(pods[0])
        dels.append(node.delete(pods[0]))
    delays = stratified(rng, 0.0, sorted(dels)[1] * 1.5, DEL_KILLS)
    for delay in delays:
        node.add(pods[0])
        node.masqueraded(pods[0])  # NAT entries for DEL to flush
        assert nat_flows(node.t, node.plugin, pods[0].ip)
        node.kill("DEL", pods[0], delay)
        node.delete(pods[0])  # the runtime retries DEL until it succeeds
        assert set(registrations(node.t, node.plugin)) == {cnitool_container_id(pods[1].ns.path)}
        assert nat_flows(node.t, node.plugin, pods[0].ip) == []
        assert not has_masq_filter(node.t, pods[0].host_veth)
    print(node.report())
    node.assert_converged([pods[1]])
    node.delete(pods[1])
    node.assert_clean(pods)


# 5. A stale, partially written pin directory ----------------------------------------------------

def _rm_progs(node):
    shutil.rmtree(node.root / "progs")


def _rm_one_prog(node):
    (node.root / "progs" / "masq_up_ingress").unlink()


def _rm_veth_prog(node):
    (node.root / "progs" / "masq_veth_in").unlink()


@pytest.mark.parametrize("damage", [_rm_progs, _rm_one_prog, _rm_veth_prog],
                         ids=["progs-dir-deleted", "uplink-ingress-prog-missing", "veth-prog-missing"])
def test_stale_pin_dir_repaired_by_next_add(node, damage):
    """Maps pinned, programs (some or all) missing: the next ADD loads and pins them
    again, reusing the pinned maps, so the pod added before keeps working too."""
    old, new = node.pod("old"), node.pod("new")
    node.add(old)
    maps_before = {m: os.stat(node.root / "maps" / m).st_ino for m in os.listdir(node.root / "maps")}
    damage(node)
    assert not node.loaded()
    assert status(node.t, node.plugin) is None  # status says there is no data plane
    node.add(new)
    assert node.loaded(), node.pin_state()
    assert {m: os.stat(node.root / "maps" / m).st_ino for m in os.listdir(node.root / "maps")} == maps_before
    veth = node.pinned_prog_id("masq_veth_in")
    assert filter_prog_id(node.t, new.host_veth, "ingress") == veth
    node.assert_converged([old, new])  # the old pod's filter may run the old program: same maps
    node.add(old)  # re-ADD moves it to the pinned program
    assert filter_prog_id(node.t, old.host_veth, "ingress") == veth
    node.delete(old), node.delete(new)
    node.assert_clean([old, new])


def test_empty_pin_dirs_repaired_by_first_add(node):
    """Killed right after creating the directories: v2/maps and v2/progs exist, empty."""
    a = node.pod("a")
    node.add(a)  # learn where the pins go
    node.delete(a)
    node.reboot()
    (node.root / "maps").mkdir(parents=True)
    (node.root / "progs").mkdir()
    node.add(a)
    node.assert_converged([a])
    node.delete(a)
    node.assert_clean([a])


def test_del_with_progs_missing_unregisters(node):
    a, b = node.pod("a"), node.pod("b")
    node.add(a)
    node.masqueraded(a)
    _rm_progs(node)
    node.delete(a)  # succeeds: the runtime will not call it again
    node.add(b)  # repairs the pins
    assert set(registrations(node.t, node.plugin)) == {cnitool_container_id(b.ns.path)}, \
        "the pod DELeted while progs/ was missing is still registered"
    assert not has_masq_filter(node.t, a.host_veth)
    assert nat_flows(node.t, node.plugin, a.ip) == []


def test_missing_map_pins_repaired_by_next_add(node):
    a = node.pod("a")
    node.add(a)
    node.delete(a)
    shutil.rmtree(node.root / "maps")
    rc, out, err, _ = node.call("ADD", a)
    assert rc == 0, out + err
    rc, out, err, _ = node.call("DEL", a)
    assert rc == 0, out + err


# 6. Two first ADDs racing on a fresh node ----------------------------------------------------------

RACE_ROUNDS = 3


def test_concurrent_first_add(node):
    """Two plugin processes start the first ADD on a fresh node at the same moment:
    both succeed, the programs are loaded once, and every attachment runs the
    pinned programs."""
    a, b = node.pod("a"), node.pod("b")
    for rnd in range(RACE_ROUNDS):
        log = node.t.lab.tmp / f"race-{rnd}.log"
        procs, writers = [], []
        for p in (a, b):
            cmd, env, data = node._cmd("ADD", p, node.conf(p, logLevel="trace", logFile=str(log)))
            r, w = os.pipe()
            try:
                procs.append(node.t.lab.spawn(cmd, env=env, stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            finally:
                os.close(r)
            writers.append((w, data))
        for w, data in writers:  # both wait for their config until now
            os.write(w, data.encode())
        for w, _ in writers:
            os.close(w)
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (out + err).decode()
        loads = LOAD_MARK.findall(log.read_text(errors="replace"))
        assert len(loads) == 1, (f"round {rnd}: programs loaded by pids {loads}, one load expected "
                                 "(none: aya's trace line 'relocating program' changed?)")
        assert int(loads[0]) in {proc.pid for proc in procs}
        veth = node.pinned_prog_id("masq_veth_in")
        for p in (a, b):
            assert filter_prog_id(node.t, p.host_veth, "ingress") == veth
        node.assert_converged([a, b])
        node.delete(a), node.delete(b)
        node.assert_clean([a, b])
        node.reboot()
