"""`ebpf-masq monitor`: the data plane's events, live, with a real pod.

The pod (named by CNI_ARGS as a CRI runtime names it: shop/web-0) sends UDP datagrams from
its own sockets to ext. The network's portRange holds two ports, so its third flow towards
the same remote endpoint finds every port held and is refused (no_port). `monitor --json
--pod shop/web-0` shows each pair made, with the pod's name, its tuple and the node's, and
the refusal, and the refused datagram's drop with its tuple. The monitor holds the events_live ring's lease while it runs: killed
outright (SIGKILL) it leaves the lease to run out within seconds (events_ctl read back
with bpftool against CLOCK_MONOTONIC, the programs' clock); stopped (SIGTERM) it clears
the lease at once. No event was lost (events_lost 0).
"""
import json
import os
import select
import signal
import subprocess
import time

import pytest

from lab import masqcli
from lab.netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
RPORT = 9999
LEASE_S = 3  # EVENTS_LEASE_NS: how far ahead the monitor renews its lease
CNI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u-1"
SEND = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind(('0.0.0.0', int(sys.argv[1])))\n"
        "s.sendto(b'x', (sys.argv[2], int(sys.argv[3])))\n")


def monitor(topo, plugin, *args):
    """`monitor --json ARGS` in the background (its own process: nsenter execs it)."""
    return topo.node.spawn([plugin, "monitor", "--json", "--pin-path", topo.lab.pin_path, *args],
                           enter=True, stdout=subprocess.PIPE)


def wait_lease(topo, proc):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"monitor exited: {proc.stderr.read().decode()}"
        if masqcli.events_ctl(topo)["live_until"] > time.monotonic_ns():
            return
        time.sleep(0.05)
    raise AssertionError("monitor never took its lease")


def read_events(proc, want, timeout=10):
    """JSON lines from the monitor until `want(events)` holds (or the time is up)."""
    events, buf = [], b""
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    while not want(events) and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        events += [json.loads(l) for l in lines if l.strip()]
    return events


def send(pod, sport, rport=RPORT):
    pod.ns.exec(["/usr/bin/python3", "-c", SEND, sport, EXT, rport])


def test_monitor_shows_a_pods_pairs_and_refusal_and_its_lease_ends_with_it(topo, plugin):
    net = topo.masq_network(plugin, portRange="20000-20001")
    net.env["CNI_ARGS"] = CNI_ARGS
    pod = net.add(topo.pod_ns("web"))
    net.env.pop("CNI_ARGS")
    other = net.add(topo.pod_ns("other"))
    ctl = masqcli.events_ctl(topo)
    assert {k: ctl[k] for k in ("log_until", "live_until", "log_pid", "live_pid")} == dict.fromkeys(
        ("log_until", "live_until", "log_pid", "live_pid"), 0), ctl

    mon = monitor(topo, plugin, "--pod", "shop/web-0")
    wait_lease(topo, mon)
    send(other, 40000, RPORT + 1)  # another pod's pair (to another endpoint: its own two ports): filtered out
    for sport in (40001, 40002, 40003):
        send(pod, sport)
    kinds = lambda evs: [e["event"] for e in evs]
    events = read_events(mon, lambda evs: len(evs) >= 4)
    # The refused flow's datagram is dropped too (no_port), and told with its packet and pod.
    assert kinds(events) == ["pair_made", "pair_made", "refused_no_port", "drop"], events
    nat_ports = set()
    for e, sport in zip(events[:2], (40001, 40002)):
        assert (e["namespace"], e["pod"], e["proto"]) == ("shop", "web-0", "udp"), e
        assert (e["pod_addr"], e["pod_port"]) == (pod.ip, sport), e
        assert (e["remote_addr"], e["remote_port"]) == (EXT, RPORT), e
        assert e["nat_addr"] == NODE_IP and e["nat_port"] in (20000, 20001), e
        assert abs(e["time_ms"] - time.time() * 1000) < 10_000 and e["start_ms"] <= e["time_ms"], e
        nat_ports.add(e["nat_port"])
    assert nat_ports == {20000, 20001}, events
    refused = events[2]
    assert (refused["pod_addr"], refused["pod_port"], refused["pod"]) == (pod.ip, 40003, "web-0"), refused
    assert "nat_port" not in refused, refused
    dropped = events[3]
    assert (dropped["reason"], dropped["from"], dropped["proto"]) == ("no_port", "pod", "udp"), dropped
    assert (dropped["pod_addr"], dropped["pod_port"], dropped["pod"]) == (pod.ip, 40003, "web-0"), dropped
    assert (dropped["remote_addr"], dropped["remote_port"]) == (EXT, RPORT), dropped
    # The node's own view agrees: the pairs are there, the refusal counted, nothing lost.
    pairs = {(f["pod_port"], f["nat_port"]) for f in topo.nat_list(plugin) if f["pod_addr"] == pod.ip}
    assert pairs == {(e["pod_port"], e["nat_port"]) for e in events[:2]}, pairs
    s = topo.status(plugin)
    assert s["counters"]["events_lost"] == 0 and s["drops"]["no_port"] >= 1, s["counters"]

    # Killed outright: its lease stays until it runs out, within LEASE_S of its last renewal.
    mon.send_signal(signal.SIGKILL)
    mon.wait(5)
    killed_at = time.monotonic_ns()
    until = masqcli.events_ctl(topo)["live_until"]
    assert killed_at < until <= killed_at + LEASE_S * 1_000_000_000, (killed_at, until)
    time.sleep((until - time.monotonic_ns()) / 1e9 + 0.1)
    assert time.monotonic_ns() > masqcli.events_ctl(topo)["live_until"], "the lease was renewed after the kill"

    # Stopped (SIGTERM): the lease is cleared at once.
    mon = monitor(topo, plugin)
    wait_lease(topo, mon)
    assert topo.status(plugin)["event_leases"]["live"]["pid"] == mon.pid  # who holds it, in status
    mon.send_signal(signal.SIGTERM)
    assert mon.wait(5) == 0, mon.stderr.read().decode()
    ctl = masqcli.events_ctl(topo)
    assert (ctl["live_until"], ctl["live_pid"]) == (0, 0), ctl
    assert topo.status(plugin)["event_leases"]["live"] is None


SPOOF = ("import socket, struct, sys\n"
         "src, dst, sport, dport = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])\n"
         "udp = struct.pack('!HHHH', sport, dport, 9, 0) + b'x'\n"
         "ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,\n"
         "                 socket.inet_aton(src), socket.inet_aton(dst))\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)\n"
         "s.sendto(ip + udp, (dst, 0))\n")
SPOOFED = "10.99.0.9"  # no pod's address, in no network of the test


@pytest.mark.parametrize("masq", ["ebpf-masq", "ipMasq"])
def test_a_spoofed_packet_is_dropped_and_told_with_its_pod(topo, plugin, masq):
    """A pod sends a UDP datagram whose source is not its own (a raw socket, default
    node and pod). ebpf-masq: the pod's veth program drops it (RFC 2827 ingress
    filtering; a masquerading NAT must not pass a source it cannot tell apart), and
    `monitor --json --pod shop/web-0` tells the drop: reason spoofed_source, the
    packet's tuple as sent, and the pod, named by the veth it came in on (the source
    names nobody); ext receives nothing. ipMasq (the yardstick: bridge + iptables
    MASQUERADE, which matches the pod subnet only): the datagram leaves the node
    with the spoofed source untranslated and reaches ext; nothing tells of it."""
    srv = topo.ext.server("udp", RPORT)
    if masq == "ebpf-masq":
        net = topo.masq_network(plugin)
    else:
        net = topo.network([topo.bridge_plugin(ip_masq=True)])
    net.env["CNI_ARGS"] = CNI_ARGS
    pod = net.add(topo.pod_ns("web"))
    mon = None
    if masq == "ebpf-masq":
        mon = monitor(topo, plugin, "--pod", "shop/web-0", "--event", "drop")
        wait_lease(topo, mon)
    pod.ns.exec(["/usr/bin/python3", "-c", SPOOF, SPOOFED, EXT, 41000, RPORT])
    send(pod, 41001)  # its own address: goes out (masqueraded), and told as no drop
    deadline = time.monotonic() + 10
    while len(srv.records("dgram")) < (1 if masq == "ebpf-masq" else 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = {r["addr"] for r in srv.records("dgram")}
    if masq == "ipMasq":
        assert seen == {SPOOFED, NODE_IP}, f"ext saw {seen}: the spoofed source left as it was"
        return
    assert seen == {NODE_IP}, f"ext saw {seen}: only the pod's own datagram, masqueraded"
    [drop] = read_events(mon, lambda evs: len(evs) >= 1)
    assert (drop["event"], drop["reason"], drop["from"], drop["proto"]) == ("drop", "spoofed_source", "pod", "udp"), drop
    assert (drop["pod_addr"], drop["pod_port"]) == (SPOOFED, 41000), drop
    assert (drop["remote_addr"], drop["remote_port"]) == (EXT, RPORT), drop
    assert (drop["namespace"], drop["pod"]) == ("shop", "web-0"), drop
    mon.send_signal(signal.SIGTERM)
    assert mon.wait(5) == 0, mon.stderr.read().decode()
    assert read_events(mon, lambda evs: False, timeout=0.5) == [], "nothing else: its own datagram was no drop"
    s = topo.status(plugin)
    assert s["drops"]["spoofed_source"] == 1 and s["counters"]["events_lost"] == 0, s
