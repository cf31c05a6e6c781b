#!/usr/bin/env python3
"""The new-flow path under load (bench.sh --newflow's rows), ebpf-masq beside iptables MASQUERADE.

Run by `scripts/bench.sh --newflow` (root). Every setup is the lab of
integration/lab/churnlab.py (one node, one ext, pods by cnitool with the bridge
plugin; iptables = the bridge's ipMasq, ebpf-masq and its fastPath with their
defaults), built anew for each row and mode, default pod and node sysctls
except tcp_tw_reuse=1 in the churning pods:

  churn  4 pods (2 clients each) + the node's own client, unthrottled, to one
         ext ip:port for --churn-secs: connections/s, failed, stalled (> 1 s),
         ebpf-masq's no_port drops and ports tried per new pair
  held   the same churn for --held-secs while two more pods hold --held
         connections (default 45,000: about 3/4 of the 61,744 ports towards that
         endpoint) to the same ext ip:port
  ramp   --ramp clients (spread over 4 default pods), --ramp-secs each, raised
         until a connection fails: the client count and the rate at the first
         failure, per mode

Printed: one line per row and mode, then the paired ratios ebpf/ipt and
fast/ipt (each row runs the three modes back to back). --json FILE writes
{row: {mode: result}}. Everything goes with the labs (netns, pins, processes),
also on failure or Ctrl-C.
"""
import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration"))

from lab import churnlab, netlab  # noqa: E402


def per_pair(status):
    c = status["counters"]
    return round(c["port_probes"] / max(1, c["nat_created"]), 2)


def summary(r):
    s = {"conn_s": round(r["rate"]), "failed": r["fails"], "stalled": r["stalls"]}
    if r.get("held"):
        s["held"] = r["held"]
    if r["status"]:
        d = r["status"]["drops"]
        s.update(no_port=d["no_port"], over_share=d.get("over_share", 0), probes_per_pair=per_pair(r["status"]))
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="churn,held,ramp")
    ap.add_argument("--modes", default=",".join(churnlab.MODES))
    ap.add_argument("--churn-secs", type=float, default=60)
    ap.add_argument("--held", type=int, default=45000)
    ap.add_argument("--held-secs", type=float, default=30)
    ap.add_argument("--ramp", default="4,8,16,32,64,128")
    ap.add_argument("--ramp-secs", type=float, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = [r for r in a.rows.split(",") if r]
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in churnlab.MODES:
            ap.error(f"unknown mode {m}")
    plugin = netlab.plugin_path()
    if not plugin.is_file():
        ap.error(f"ebpf-masq binary missing at {plugin}: cargo build --release (or EBPF_MASQ_BIN)")
    # SIGTERM ends the run the way Ctrl-C does: the labs' finally blocks clean up.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    tmp = Path(tempfile.mkdtemp(prefix="ebpf-masq-newflow."))
    out = {}
    try:
        tool = tmp / "benchtool"
        subprocess.run(["gcc", "-O2", "-Wall", "-o", tool, REPO / "scripts/bench/benchtool.c",
                        REPO / "scripts/bench/benchtool_hold.c"], check=True)
        for row in rows:
            out[row] = {}
            for mode in modes:
                print(f"== {row}: {mode}", file=sys.stderr, flush=True)
                if row == "churn":
                    out[row][mode] = summary(churnlab.churn(tmp, plugin, tool, mode, a.churn_secs))
                elif row == "held":
                    out[row][mode] = summary(churnlab.churn(tmp, plugin, tool, mode, a.held_secs, held=a.held))
                elif row == "ramp":
                    steps = [int(x) for x in a.ramp.split(",")]
                    res = churnlab.ramp(tmp, plugin, tool, mode, steps, a.ramp_secs)
                    broke = next((r for r in res if r["fails"]), None)
                    out[row][mode] = {"steps": res, "first_failure_clients": broke and broke["clients"],
                                      "rate_at_first_failure": broke and broke["rate"],
                                      "best_rate": max(r["rate"] for r in res)}
                else:
                    ap.error(f"unknown row {row}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for row, by_mode in out.items():
        for mode, s in by_mode.items():
            if row == "ramp":
                s = {k: v for k, v in s.items() if k != "steps"}
            print(f"{row:5} {mode:18} {json.dumps(s)}")
        ipt = by_mode.get("iptables", {})
        key = "best_rate" if row == "ramp" else "conn_s"
        for mode, label in (("ebpf-masq", "ebpf/ipt"), ("ebpf-masq-fastpath", "fast/ipt")):
            if ipt.get(key) and mode in by_mode:
                print(f"{row:5} {label:18} {by_mode[mode][key] / ipt[key]:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
