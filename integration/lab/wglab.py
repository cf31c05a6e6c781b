"""A real WireGuard tunnel (userspace wireguard-go + wg) into the netlab topology,
for the `masqueradeRules` tests (test_rules.py).

```
 wgc  wg<id>c 192.168.6.1/24 ==(WireGuard over ul0 172.31.255.0/30)== node wg<id>n 192.168.6.2/24
      routes 10.0.0.0/24 and 198.51.100.0/24 into the tunnel
 node eth0 10.0.0.5/24 ---- ext 10.0.0.2/24 (no route to 192.168.6.0/24)
      eth1 10.10.0.5/24 --- native          (netlab.Topo, unchanged)
```

The tunnel's own UDP runs over the separate underlay veth `ul0`, so only the
decapsulated traffic crosses eth0. The kernel has no wireguard module:
wireguard-go makes a TUN (`link/none`) device and listens on the host-wide
control socket /var/run/wireguard/<dev>.sock, so device names are unique per
lab (wg<lab id>c / wg<lab id>n). Each wireguard-go runs in the foreground
(`-f`) in its namespace; the lab stops it by PID and removes its socket on
close, also when a test fails.
"""
import ipaddress
import json
import os
from pathlib import Path

from .netlab import CNI_VERSION, Topo, plugin_path, sh, wait_for

WG_RUN_DIR = Path("/var/run/wireguard")
WG_PORT = 51820
TUNNEL_NET = ipaddress.ip_network("192.168.6.0/24")


def in_tunnel_net(addr):
    return ipaddress.ip_address(addr) in TUNNEL_NET


class WireGuard:
    """One wireguard-go device in a namespace, with its key pair."""

    def __init__(self, lab, ns, name, cidr, listen_port=None):
        self.lab, self.ns, self.name, self.cidr = lab, ns, name, cidr
        self.sock = WG_RUN_DIR / f"{name}.sock"
        assert not self.sock.exists(), f"{self.sock} already exists (device name clash)"
        self.key_file = lab.tmp / f"{name}.key"
        self.key_file.touch(mode=0o600)
        self.key_file.write_text(sh(["wg", "genkey"]).stdout)
        self.pubkey = sh(["wg", "pubkey"], input=self.key_file.read_text()).stdout.strip()
        self.log = lab.tmp / f"wireguard-go-{name}.log"
        self.log_f = open(self.log, "w")
        env = {**os.environ, "WG_PROCESS_FOREGROUND": "1", "LOG_LEVEL": "error"}
        self.proc = ns.spawn(["wireguard-go", "-f", name], stderr=self.log_f, stdout=self.log_f, env=env)
        lab.on_close(self.close)
        wait_for(lambda: self.proc.poll() is not None or (self.sock.exists() and name in ns.links()),
                 what=f"wireguard-go {name} in {ns.name}")
        assert self.proc.poll() is None, f"wireguard-go {name} exited: {self.log.read_text()}"
        port = ["listen-port", listen_port] if listen_port else []
        ns.exec(["wg", "set", name, "private-key", self.key_file, *port])
        ns.ip("addr", "add", cidr, "dev", name)
        ns.ip("link", "set", name, "up")
        [link] = json.loads(ns.ip("-j", "link", "show", "dev", name).stdout)
        assert link["link_type"] == "none", link  # wireguard-go's TUN, not a kernel wireguard link

    def add_peer(self, peer, allowed_ips, endpoint=None):
        ep = ["endpoint", endpoint] if endpoint else []
        self.ns.exec(["wg", "set", self.name, "peer", peer.pubkey, "allowed-ips", allowed_ips,
                      "persistent-keepalive", 0, *ep])

    def show(self):
        return self.ns.exec(["wg", "show", self.name], check=False).stdout

    def close(self):
        """Stop wireguard-go (by PID) and remove its control socket."""
        self.lab.stop(self.proc)
        self.log_f.close()
        if self.sock.exists():
            self.sock.unlink()


class WgTopo(Topo):
    """netlab.Topo plus the tunnel client `wgc` and a WireGuard tunnel to the node."""

    CLIENT, NODE_WG = "192.168.6.1", "192.168.6.2"
    FAR = "198.51.100.2"  # a second address of ext outside 10.0.0.0/24 (see far_address())

    def __init__(self, lab):
        super().__init__(lab)
        self.client = lab.netns("wgc")
        lab.veth(self.client, "ul0", "172.31.255.1/30", self.node, "ul0", "172.31.255.2/30")
        self.node_wg = WireGuard(lab, self.node, f"wg{lab.id}n", f"{self.NODE_WG}/24", listen_port=WG_PORT)
        self.client_wg = WireGuard(lab, self.client, f"wg{lab.id}c", f"{self.CLIENT}/24")
        self.node_wg.add_peer(self.client_wg, f"{self.CLIENT}/32")
        self.client_wg.add_peer(self.node_wg, "0.0.0.0/0", endpoint=f"172.31.255.2:{WG_PORT}")
        for dst in ("10.0.0.0/24", "198.51.100.0/24"):
            self.client.ip("route", "add", dst, "dev", self.client_wg.name)
        # the tunnel itself works (handshake done) before any test looks at eth0
        wait_for(lambda: self.client.ping(self.NODE_WG, count=1)[0] == 0, timeout=20,
                 what="WireGuard handshake wgc -> node:\n" + self.client_wg.show())
        self._confs = 0

    def far_address(self):
        """Give ext 198.51.100.2 (on lo); the node reaches it by its default route via ext."""
        self.ext.ip("addr", "add", f"{self.FAR}/32", "dev", "lo")

    def ext_route_back(self):
        """Let ext answer the tunnel range directly (for traffic a rule leaves un-NATed)."""
        self.ext.ip("route", "add", str(TUNNEL_NET), "via", self.NODE_EXT)

    # --- the plugin CLI, in the node netns (nsenter keeps bpffs visible) ----------

    def masq_conf(self, rules, **keys):
        """A single ebpf-masq plugin config for `apply`, on this lab's pin path."""
        conf = {"cniVersion": CNI_VERSION, "name": f"{self.lab.prefix}rules", "type": "ebpf-masq",
                "pinPath": self.lab.pin_path, "natOutgoing": False, "egressInterfaces": ["eth0"], **keys}
        if rules is not None:
            conf["masqueradeRules"] = rules
        return conf

    def write_conf(self, conf):
        self._confs += 1
        path = self.lab.tmp / f"apply-{self._confs}.conf"
        path.write_text(json.dumps(conf, indent=2))
        return path

    def cli(self, *args, check=True):
        return self.node.enter([plugin_path(), *args], check=check)

    def apply(self, conf, check=True):
        """`ebpf-masq apply --conf FILE`; conf is a dict (written to a file) or a path."""
        path = conf if isinstance(conf, (str, Path)) else self.write_conf(conf)
        return self.cli("apply", "--conf", path, check=check)

    def status(self):
        return json.loads(self.cli("status", "--json", "--pin-path", self.lab.pin_path).stdout)

    def nat_flows(self):
        return json.loads(self.cli("nat", "list", "--json", "--pin-path", self.lab.pin_path).stdout)

    def forget_data_plane(self):
        """What a reboot does to us: the bpffs pins and the tc filters on eth0 are gone."""
        sh(["rm", "-rf", self.lab.pin_path])
        for direction in ("ingress", "egress"):
            self.node.enter(["tc", "filter", "del", "dev", "eth0", direction], check=False)
