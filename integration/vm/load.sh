#!/bin/bash
# Runs inside the virtual machine scripts/kernel-vm.sh boots (another kernel, the host's root
# read-only): loads ebpf-masq's data plane through `ebpf-masq apply` onto a veth uplink made
# here (on a kernel without TCX, the tc clsact path), and writes to $OUT:
#   run.log    this script's trace, apply's output, status, the programs the kernel holds
#   apply.err  apply's stderr: on a refusal, the verifier's log
#   result     "LOADED <n> programs" or "FAILED ..."
# Usage (inside the guest): load.sh BIN OUT KERNEL_MODULES_DIR
set -u
BIN=$1 OUT=$2 MODS=$3
rm -f "$OUT"/run.log "$OUT"/apply.err "$OUT"/result
exec >"$OUT/run.log" 2>&1
set -x
uname -a
"$BIN" --version
# The extracted kernel's modules are not where the guest looks: load the few needed by path.
# sctp (and what it needs) for e2e.sh's SCTP sockets.
for m in drivers/net/veth.ko net/sched/sch_ingress.ko net/sched/cls_bpf.ko crypto/crc32c_generic.ko \
	lib/libcrc32c.ko net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko net/sctp/sctp.ko; do
	insmod "$MODS/kernel/$m" || true
done
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
ulimit -l unlimited
ip link add vup0 type veth peer name vup1
ip addr add 192.0.2.1/24 dev vup0
ip -6 addr add 2001:db8::1/64 dev vup0 nodad
ip link set vup0 up
ip link set vup1 up
ip route add default via 192.0.2.254 dev vup0
ip -6 route add default via 2001:db8::fe dev vup0
CONF=$(mktemp /tmp/vm-XXXX.conflist)
cat >"$CONF" <<'JSON'
{"cniVersion": "1.0.0", "name": "vm",
 "plugins": [{"type": "ebpf-masq", "egressInterfaces": ["vup0"], "nativeRoutingCIDR": "10.0.0.0/8",
              "podCIDRs": ["10.244.0.0/16", "fd00:244::/64"]}]}
JSON
"$BIN" apply --conf "$CONF" 2>"$OUT/apply.err"
rc=$?
head -c 4000 "$OUT/apply.err"
bpftool prog show | grep -A3 masq || true
tc filter show dev vup0 ingress
tc filter show dev vup0 egress
"$BIN" status 2>&1 | head -60
n=$(ls /sys/fs/bpf/ebpf-masq/v*/progs 2>/dev/null | wc -l)
if [ "$rc" = 0 ] && [ "$n" = 3 ]; then
	echo "LOADED $n programs" >"$OUT/result"
else
	echo "FAILED apply rc=$rc ($n programs pinned)" >"$OUT/result"
fi
