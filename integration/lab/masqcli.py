"""How the tests call the ebpf-masq binary's operator commands (status, nat list, explain, metrics).

Each runs in a topology's node namespace by nsenter (bpffs stays visible there) against
the lab's pin path; any topology with .node and .lab will do (netlab.Topo and the ones built on it).
"""
import json

from .abi import LAYOUT


def run(topo, binary, *args, pin_path=None, check=True, **kw):
    """`binary ARGS --pin-path PIN` in topo's node (the lab's pins unless pin_path is given);
    the CompletedProcess. kw goes to subprocess (e.g. preexec_fn)."""
    return topo.node.enter([binary, *args, "--pin-path", pin_path or topo.lab.pin_path], check=check, **kw)


def status(topo, binary, **kw):
    """`ebpf-masq status --json`, parsed."""
    return json.loads(run(topo, binary, "status", "--json", **kw).stdout)


def counters(topo, binary):
    """(counters, drops) of `status --json`."""
    s = status(topo, binary)
    return s["counters"], s["drops"]


def delta(after, before, group):
    """How much each counter of @group ("counters", "drops") moved between two `status` replies."""
    return {k: after[group][k] - before[group].get(k, 0) for k in after[group]}


def nat_list(topo, binary):
    """`ebpf-masq nat list --json`, parsed."""
    return json.loads(run(topo, binary, "nat", "list", "--json").stdout)


def explain(topo, binary, *args, check=True):
    """`ebpf-masq explain --json ARGS`, parsed; with check=False the CompletedProcess
    (to look at a failure's exit code and stderr)."""
    p = run(topo, binary, "explain", "--json", *args, check=check)
    return json.loads(p.stdout) if check else p


def events_ctl(topo, layout=None):
    """The event rings' leases (the events_ctl map): {log_until, live_until} CLOCK_MONOTONIC ns
    (the programs' clock: compare with time.monotonic_ns()), {log_pid, live_pid} their holders,
    {log_records, log_ipfix_unsent} the session log's counts."""
    path = f"{topo.lab.pin_path}/v{layout or LAYOUT}/maps/events_ctl"
    out = json.loads(topo.node.enter(["bpftool", "-j", "map", "dump", "pinned", path]).stdout)
    return out[0]["formatted"]["value"]
