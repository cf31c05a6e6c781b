#!/usr/bin/env bash
# ebpf-masq in three minutes, in throwaway network namespaces (the machine's own
# interfaces are never touched):
#
#   pod (10.244.1.x) --veth/bridge cni0-- node --eth0 10.0.0.5-- ext (10.0.0.2, no route to pods)
#                                               --eth1 10.10.0.5-- native (10.10.0.2, routes pods back)
#
# The pod is added by the real cnitool with the conflist bridge + host-local +
# ebpf-masq. ext must see the node address (masqueraded); native, inside
# nativeRoutingCIDR, must see the pod address.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root" >&2; exit 1; }
cd "$(dirname "$0")/.."
repo=$(pwd)

scripts/install-deps.sh >/dev/null
echo "== building ebpf-masq"
cargo build --release --quiet
bin=$("$repo/scripts/binpath.sh")

id=demo$$
node=em-$id-node pod=em-$id-pod ext=em-$id-ext native=em-$id-native
pins=/sys/fs/bpf/em-$id
tmp=$(mktemp -d)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [ -f "$tmp/demo.conflist" ] && CNI_PATH=/usr/lib/cni:$tmp/bin NETCONFPATH=$tmp \
    nsenter --net=/run/netns/$node cnitool del demo /run/netns/$pod >/dev/null 2>&1
  for ns in $pod $ext $native $node; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$pins" "$tmp"
  rm -f /var/lib/cni/results/demo-* 2>/dev/null
  rm -rf /var/lib/cni/networks/demo 2>/dev/null
}
trap cleanup EXIT

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
# The plugin and cnitool need bpffs: `ip netns exec` remounts /sys, nsenter does not.
in_node() { nsenter --net=/run/netns/$node -- "$@"; }

echo "== building namespaces"
for ns in $node $pod $ext $native; do ip netns add "$ns"; in_ns "$ns" ip link set lo up; done
ip link add eth0 netns $node type veth peer name eth0 netns $ext
ip link add eth1 netns $node type veth peer name eth0-n netns $native
in_ns $node ip addr add 10.0.0.5/24 dev eth0; in_ns $node ip link set eth0 up
in_ns $node ip addr add 10.10.0.5/24 dev eth1; in_ns $node ip link set eth1 up
in_ns $node ip route add default via 10.0.0.2
in_ns $node sysctl -qw net.ipv4.ip_forward=1
in_ns $ext ip addr add 10.0.0.2/24 dev eth0; in_ns $ext ip link set eth0 up
in_ns $native ip addr add 10.10.0.2/24 dev eth0-n; in_ns $native ip link set eth0-n up
in_ns $native ip route add 10.244.0.0/16 via 10.10.0.5

mkdir -p "$tmp/bin" && ln -s "$bin" "$tmp/bin/ebpf-masq"
cat > "$tmp/demo.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "demo",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$tmp/ipam"}},
    {"type": "ebpf-masq", "pinPath": "$pins", "natOutgoing": true,
     "nativeRoutingCIDR": "10.10.0.0/24", "egressInterfaces": ["eth0", "eth1"],
     "natMaxEntries": 65536}
  ]
}
JSON
echo "== conflist"; cat "$tmp/demo.conflist"

echo "== cnitool add demo (bridge -> host-local -> ebpf-masq)"
CNI_PATH=/usr/lib/cni:$tmp/bin NETCONFPATH=$tmp in_node cnitool add demo /run/netns/$pod > "$tmp/result.json"
pod_ip=$(in_ns $pod ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
echo "pod address: $pod_ip"

# Servers that answer each TCP client with the address they saw.
for ns in $ext $native; do
  # Not through in_ns: `&` on a shell function would record a subshell's PID.
  ip netns exec $ns socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo "$SOCAT_PEERADDR:$SOCAT_PEERPORT"' &
  pids+=($!)
done
sleep 0.5

echo
echo "== pod -> ext (10.0.0.2), outside nativeRoutingCIDR: must be masqueraded"
echo -n "ext saw the TCP client as:    "; in_ns $pod socat -T2 - TCP:10.0.0.2:8080 </dev/null
echo -n "ping pod -> ext:              "; in_ns $pod ping -c 3 -i 0.2 -q 10.0.0.2 | grep -o '[0-9]* received'
echo
echo "== pod -> native (10.10.0.2), inside nativeRoutingCIDR: never masqueraded"
echo -n "native saw the TCP client as: "; in_ns $pod socat -T2 - TCP:10.10.0.2:8080 </dev/null
echo
echo "== ebpf-masq explain: why each destination was (not) masqueraded, read from the pinned maps"
in_node "$bin" explain --pin-path "$pins" --src "$pod_ip" --dst 10.0.0.2 --proto tcp --dport 8080
in_node "$bin" explain --pin-path "$pins" --src "$pod_ip" --dst 10.10.0.2 --proto tcp --dport 8080
echo
echo "== ebpf-masq nat list"
in_node "$bin" nat list --pin-path "$pins"
echo
echo "== ebpf-masq status"
in_node "$bin" status --pin-path "$pins"
echo
echo "== cnitool del demo"
CNI_PATH=/usr/lib/cni:$tmp/bin NETCONFPATH=$tmp in_node cnitool del demo /run/netns/$pod
echo "flows left for the pod: $(in_node "$bin" nat list --json --pin-path "$pins" | grep -c "\"$pod_ip\"" || true)"
echo "demo done; namespaces and pins are removed on exit"
