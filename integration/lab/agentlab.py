"""`ebpf-masq agent` as the DaemonSet runs it, for the tests: its config a kubelet-style
ConfigMap volume, its HTTP endpoints, its chained entry."""
import json
import os
import secrets
import signal

from .netlab import PY

GET = """
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status)
    sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
    sys.stdout.write(e.read().decode())
"""


class ConfigMapVolume:
    """A directory laid out as kubelet lays out a ConfigMap volume, updated as kubelet does."""

    def __init__(self, root, key):
        self.root, self.key, self.n = root, key, 0
        root.mkdir()
        (root / key).symlink_to(f"..data/{key}")

    def publish(self, conf):
        self.n += 1
        ts = root_ts = f"..2026_12_01_00_00_0{self.n}.{secrets.token_hex(4)}"
        (self.root / ts).mkdir()
        text = conf if isinstance(conf, str) else json.dumps(conf, indent=2)
        (self.root / ts / self.key).write_text(text)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        (self.root / "..data_tmp").symlink_to(root_ts)
        os.rename(self.root / "..data_tmp", self.root / "..data")  # the atomic swap
        if old:
            for f in (self.root / old).iterdir():
                f.unlink()
            (self.root / old).rmdir()

    @property
    def path(self):
        return self.root / self.key


def entry_of(conflist_path):
    plugins = json.loads(conflist_path.read_text())["plugins"]
    return [p for p in plugins if p["type"] == "ebpf-masq"]


class Agent:
    """One `ebpf-masq agent` in the node netns for the main plugin's network `net` (its conf
    dir is `net.dir`), its
    config a ConfigMap volume (published with the base config), its HTTP endpoints."""

    def __init__(self, topo, plugin, lab, net, *args):
        # A second agent of one lab (the first killed) gets a volume and a log of its own.
        n = next(i for i in range(100) if not (lab.tmp / f"config{i or ''}").exists())
        self.topo, self.port = topo, 20000 + secrets.randbelow(10000)
        self.log = lab.tmp / f"agent{n or ''}.log"
        self.base = {"cniVersion": "1.0.0", "name": "ebpf-masq", "type": "ebpf-masq", "pinPath": lab.pin_path}
        self.vol = ConfigMapVolume(lab.tmp / f"config{n or ''}", "ebpf-masq.json")
        self.vol.publish(self.base)
        self.cmd = [plugin, "agent", "--conf", self.vol.path, "--cni-conf-dir", net.dir, "--cni-bin-dir",
                    topo.cni_bin, "--metrics-listen", f"127.0.0.1:{self.port}", *args]
        self.proc = topo.node.spawn(self.cmd, enter=True, stderr=self.log.open("w"))

    def restart(self):
        """SIGTERM (as a rolling update does), then the same agent again; its log goes on."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(10) == 0, self.log.read_text()
        self.proc = self.topo.node.spawn(self.cmd, enter=True, stderr=self.log.open("a"))

    def get(self, path):
        p = self.topo.node.exec([PY, "-c", GET, f"http://127.0.0.1:{self.port}{path}"], check=False, timeout=30)
        if not p.stdout:
            return None, ""
        head, _, body = p.stdout.partition("\n")
        return int(head), body

    def metric(self, name):
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def alive(self):
        assert self.proc.poll() is None, f"agent exited {self.proc.returncode}: {self.log.read_text()}"
        return True
