"""Whether the fast path carried a block's packets: its counters (`status`) move while the
node's own forwarding counter stands still (the stack forwarded none of them)."""
from .masqcli import counters


def forwarded(ns):
    """IpForwDatagrams of the namespace: packets its IP stack forwarded."""
    lines = [l.split() for l in ns.exec(["cat", "/proc/net/snmp"]).stdout.splitlines() if l.startswith("Ip:")]
    head, vals = lines[0], lines[1]
    return int(vals[head.index("ForwDatagrams")])


def forwarded6(ns):
    """Ip6OutForwDatagrams of the namespace: IPv6 packets its stack forwarded."""
    for line in ns.exec(["cat", "/proc/net/snmp6"]).stdout.splitlines():
        k, v = line.split()
        if k == "Ip6OutForwDatagrams":
            return int(v)
    raise AssertionError("no Ip6OutForwDatagrams in /proc/net/snmp6")


class Watch:
    """Deltas of the fast-path counters and of the node's forwarding counter over a block."""

    def __init__(self, topo, plugin):
        self.topo, self.plugin = topo, plugin

    def __enter__(self):
        self.c0, self.f0 = counters(self.topo, self.plugin)[0], forwarded(self.topo.node)
        return self

    def __exit__(self, *exc):
        c1 = counters(self.topo, self.plugin)[0]
        self.forwarded = forwarded(self.topo.node) - self.f0
        self.egress = c1["fastpath_egress"] - self.c0["fastpath_egress"]
        self.ingress = c1["fastpath_ingress"] - self.c0["fastpath_ingress"]
        self.fallback = c1["fastpath_fallback"] - self.c0["fastpath_fallback"]

    def assert_fast(self, min_packets):
        assert self.egress >= min_packets and self.ingress >= min_packets, vars(self)
        assert self.forwarded == 0, f"the node's stack forwarded {self.forwarded} packets: {vars(self)}"
