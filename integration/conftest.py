"""Fixtures for the ebpf-masq integration tests (run as root with /usr/bin/python3)."""
import os
import shutil
import sys

import pytest

from lab import netlab
from lab.duallab import DualTopo, pod_addrs


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: needs the whole machine (it counts stalls, refusals or what a rate allows): "
        "scripts/test.sh runs these alone, after the parallel pass (docs/testing.md)")


def pytest_sessionstart(session):
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root")
    for tool in ("cnitool", "tcpdump", "iperf3", "ping", "nsenter", "tc"):
        if not shutil.which(tool):
            problems.append(f"{tool} not on PATH")
    if not os.path.isdir(netlab.CNI_BIN_DIR):
        problems.append(f"{netlab.CNI_BIN_DIR} missing (containernetworking-plugins)")
    try:
        import scapy  # noqa: F401
    except ImportError:
        problems.append(f"scapy missing for {sys.executable}: run with /usr/bin/python3 -m pytest")
    if not os.path.ismount("/sys/fs/bpf"):
        problems.append("bpffs not mounted at /sys/fs/bpf")
    if problems:
        raise pytest.UsageError("integration prerequisites: " + "; ".join(problems)
                                + " (run scripts/install-deps.sh)")


@pytest.fixture
def lab(tmp_path):
    lab = netlab.Lab(tmp_path)
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def topo(lab):
    return netlab.Topo(lab)


@pytest.fixture
def plugin():
    """Path of the ebpf-masq binary; a missing binary fails the test, never skips it."""
    path = netlab.plugin_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"ebpf-masq binary not found at {path}: build it with "
                    "`cargo build --release` or set EBPF_MASQ_BIN", pytrace=False)
    return path


@pytest.fixture
def masq_pod(topo, plugin):
    """Factory: masq_pod(**ebpf_masq_keys) -> (CniNet, Pod) with a pod added by cnitool."""
    def make(name="pod", **keys):
        net = topo.masq_network(plugin, **keys)
        return net, net.add(topo.pod_ns(name))
    return make


@pytest.fixture
def dual(lab):
    """A dual-stack topology (lab.duallab.DualTopo)."""
    return DualTopo(lab)


@pytest.fixture
def dual_pod_keys():
    """The ebpf-masq keys of dual_pod's network; a test file overrides this fixture for others."""
    return {}


@pytest.fixture
def dual_pod(dual, plugin, dual_pod_keys):
    """(CniNet, Pod, v4, v6): one pod with both families, added by cnitool."""
    net = dual.masq_network(plugin, **dual_pod_keys)
    pod = net.add(dual.pod_ns())
    v4, v6 = pod_addrs(pod)
    assert v4 and v6, pod.result
    return net, pod, v4, v6


@pytest.fixture
def benchtool(tmp_path):
    """scripts/bench/benchtool.c (and benchtool_hold.c) built for this test (the load tools of the churn and
    fair-share tests)."""
    path = tmp_path / "benchtool"
    bench = netlab.REPO / "scripts/bench"
    netlab.sh(["gcc", "-O2", "-Wall", "-o", path, bench / "benchtool.c", bench / "benchtool_hold.c"])
    return path
