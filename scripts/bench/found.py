#!/usr/bin/env python3
"""How long a node's pods started before the agent go unregistered.

Run as root: `scripts/bench/found.py [--pods 100] [--rounds 3]`. Each round builds
the lab of integration/lab/netlab.py (one node, one ext), adds --pods pods with
cnitool through the main plugin's conflist alone (bridge + host-local: what a
node's boot leaves when the main plugin is ready before ebpf-masq), then starts
`ebpf-masq agent` and reads from its log:

  applied   agent start -> data plane in place (the first load verifies the programs)
  last      agent start -> the last of the pods registered from libcni's cache
  ready     agent start -> /healthz 200 (readiness waits for every pod found)

Printed: one line per round, then the median of each. Everything goes with the
lab (netns, pins, processes, cache entries), also on failure or Ctrl-C.
"""
import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration"))

from lab import netlab  # noqa: E402


def log_ts(log, needle):
    """Timestamps of the agent's log lines holding needle."""
    return [float(l.split("ts=")[1].split()[0]) for l in log.read_text().splitlines() if needle in l]


def one_round(plugin, pods):
    tmp = Path(tempfile.mkdtemp(prefix="found-bench-"))
    lab = netlab.Lab(tmp)
    try:
        topo = netlab.Topo(lab)
        net = topo.network([topo.bridge_plugin()])
        for i in range(pods):
            net.add(topo.pod_ns(f"p{i}"))
        conf = tmp / "ebpf-masq.json"
        conf.write_text(json.dumps({"cniVersion": "1.0.0", "name": "ebpf-masq", "type": "ebpf-masq",
                                    "pinPath": lab.pin_path}))
        port = 20000 + secrets.randbelow(10000)
        log = tmp / "agent.log"
        t0 = time.time()
        agent = topo.node.spawn([plugin, "agent", "--conf", conf, "--cni-conf-dir", net.dir,
                                 "--cni-bin-dir", topo.cni_bin, "--metrics-listen", f"127.0.0.1:{port}"],
                                enter=True, stderr=log.open("w"))

        def ready():
            assert agent.poll() is None, log.read_text()
            p = topo.node.exec([netlab.PY, "-c", "import sys, urllib.request\n"
                                "try: print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n"
                                "except Exception as e: print(0)", f"http://127.0.0.1:{port}/healthz"],
                               check=False)
            return p.stdout.strip() == "200"
        netlab.wait_for(ready, timeout=300, what="agent ready")
        t_ready = time.time()
        registered = log_ts(log, "agent=discover registered=")
        assert len(registered) == pods, f"{len(registered)} of {pods} pods registered:\n{log.read_text()}"
        start = log_ts(log, "agent=start")[0]
        lab.stop(agent)
        return {"applied": log_ts(log, "agent=config result=applied")[0] - start,
                "last": max(registered) - start, "ready": t_ready - t0}
    finally:
        lab.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    plugin = netlab.plugin_path()
    if not plugin.is_file():
        sys.exit(f"build first: {plugin} missing")
    rows = []
    for r in range(a.rounds):
        row = one_round(plugin, a.pods)
        rows.append(row)
        print(f"round {r + 1}: {a.pods} pods  applied {row['applied']:.2f} s  last registered "
              f"{row['last']:.2f} s  ready {row['ready']:.2f} s", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {a.rounds}: applied {med['applied']:.2f} s  last registered {med['last']:.2f} s  "
          f"ready {med['ready']:.2f} s  (from the agent's start; commit "
          f"{subprocess.run(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})")


if __name__ == "__main__":
    main()
