"""Checks of the test topology itself, with the reference bridge plugin only (no ebpf-masq)."""
import os
import signal
import threading

from lab.netlab import Topo


def test_harness_bridge_only(topo):
    """bridge ipMasq (iptables in the node netns): ext sees the node's eth0 address."""
    net = topo.network([topo.bridge_plugin(ip_masq=True)])
    pod = net.add(topo.pod_ns())
    assert pod.ip.startswith("10.244.1.")
    tcp, udp = topo.ext.server("tcp", 5000), topo.ext.server("udp", 5001)

    with topo.ext.capture("eth0", "icmp[icmptype] = icmp-echo") as cap:
        assert pod.ns.ping(Topo.EXT, count=3) == (0, 0.0)
    rc, res = pod.ns.client("tcp", Topo.EXT, 5000, bytes=100_000)
    assert rc == 0, res
    rc, res = pod.ns.client("udp", Topo.EXT, 5001)
    assert rc == 0, res

    assert tcp.addrs("done") == {Topo.NODE_EXT}
    assert udp.addrs() == {Topo.NODE_EXT}
    assert cap.sources() == {Topo.NODE_EXT: 3}


def test_harness_bridge_no_masq(topo):
    """Without masquerade ext sees the pod IP and its replies are lost; native routing works."""
    net = topo.network([topo.bridge_plugin(ip_masq=False)])
    pod = net.add(topo.pod_ns())
    udp_ext, tcp_native = topo.ext.server("udp", 5001), topo.native.server("tcp", 5000)

    with topo.ext.capture("eth0", "icmp[icmptype] = icmp-echo") as cap:
        rc, loss = pod.ns.ping(Topo.EXT, count=2)
    assert (rc, loss) != (0, 0.0)
    assert cap.sources() == {pod.ip: 2}
    rc, res = pod.ns.client("udp", Topo.EXT, 5001, timeout=1)
    assert rc != 0 and udp_ext.addrs() == {pod.ip}

    rc, res = pod.ns.client("tcp", Topo.NATIVE, 5000)
    assert rc == 0, res
    assert tcp_native.addrs("done") == {pod.ip}
    assert net.delete(pod.ns).returncode == 0


def test_capture_keeps_packets_tcpdump_had_not_written_yet(topo):
    """A capture holds every packet the device carried even when tcpdump lags behind
    (held here with SIGSTOP, as a busy machine can hold it): leaving the capture waits
    until tcpdump has written all its socket took, instead of stopping it at once."""
    net = topo.network([topo.bridge_plugin(ip_masq=True)])
    pod = net.add(topo.pod_ns())
    with topo.ext.capture("eth0", "icmp[icmptype] = icmp-echo") as cap:
        os.kill(cap.proc.pid, signal.SIGSTOP)
        resume = threading.Timer(1.0, os.kill, (cap.proc.pid, signal.SIGCONT))
        try:
            assert pod.ns.ping(Topo.EXT, count=20, interval=0.01) == (0, 0.0)
            resume.start()  # tcpdump is still held when the capture is left
        except BaseException:
            os.kill(cap.proc.pid, signal.SIGCONT)
            raise
    resume.join()
    assert cap.sources() == {Topo.NODE_EXT: 20}
