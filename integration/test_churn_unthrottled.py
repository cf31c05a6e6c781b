"""Unthrottled churn to one remote endpoint, side by side with iptables MASQUERADE.

Three pods with the default ephemeral range and a fourth with
ip_local_port_range "1024 65535" (all with tcp_tw_reuse=1, as a client that
opens many short connections sets it) open short TCP connections (connect,
request, answer, orderly close) to one ext ip:port as fast as they can, while
the node's own sockets do the same to the same endpoint. Replicas of a service
against one database do this. RFC 4787 REQ-4's premise: the NAT must not run
out of ports towards one endpoint where the host would not.

One test runs the three setups one after the other, each in its own lab
(integration/lab/churnlab.py, which scripts/bench/newflow.py measures with too): the
bridge plugin's ipMasq (iptables, the yardstick), ebpf-masq, and ebpf-masq with
fastPath. Pass, for each ebpf-masq setup: no connection fails anywhere,
ebpf-masq drops nothing for want of a port or of table room, every connection
the server saw came from the node address, and connections that stall (> 1 s:
a SYN or SYN-ACK retransmitted) are no more frequent than with iptables in the
same run. The yardstick is not spotless: on 2 cores it showed 5-7 stalls and
sometimes a few refused connections per ~400,000 (pods and host share 1024-65535
through conntrack); those are printed, never asserted. For any stall the TCP
counters of ext and the pods that explain it (challenge ACKs, PAWS, SYN
retransmissions, softnet drops) are printed. The rates are printed too
(compared in scripts/bench.sh, never asserted here).
"""
import os

import pytest

from lab.churnlab import MODES, churn

# Counts and rates that mean something only with the machine to itself (conftest.py).
pytestmark = pytest.mark.serial

SECONDS = float(os.environ.get("EBPF_MASQ_OPEN_CHURN_SECONDS", "60"))


def test_unthrottled_churn_to_one_endpoint(tmp_path, plugin, benchtool):
    runs = {mode: churn(tmp_path, plugin, benchtool, mode, SECONDS) for mode in MODES}
    ipt = runs["iptables"]
    for mode in ("ebpf-masq", "ebpf-masq-fastpath"):
        r = runs[mode]
        assert not r["failed"], f"{mode}: failed connections: {r['failed']} ({r['results']})"
        c, d = r["status"]["counters"], r["status"]["drops"]
        assert (d["no_port"], d["nat_table_full"], c["port_alloc_failures"]) == (0, 0, 0), (mode, d, c)
        # Stalls per connection no more frequent than the yardstick's in this run.
        assert r["stalls"] * ipt["ok"] <= ipt["stalls"] * r["ok"], \
            (f"{mode}: {r['stalls']} stalls in {r['ok']} connections, "
             f"iptables {ipt['stalls']} in {ipt['ok']}", r["results"])
