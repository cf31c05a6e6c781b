#!/bin/bash
# End-to-end traffic on the kernel it runs on. Inside the virtual machine scripts/kernel-vm.sh
# boots (after load.sh, so the default pin path holds a verified data plane), or on any test
# machine with a pin path of its own. Python and scapy start too slowly under QEMU's software
# emulation for the integration/ lab, so this is the lab's core cases in plain shell: cnitool,
# the bridge plugin, ping, socat and tcpdump, in network namespaces made here.
#
#   node: up0 203.0.113.1/24 2001:db8:1::1/64 ---- ext: 203.0.113.2/24 2001:db8:1::2/64
#         cni0 10.244.1.1/24 fd00:244::1/64   pods a (masqueraded by ebpf-masq), d (DEL)
#         cni1 10.245.1.1/24                  pod b (the bridge plugin's ipMasq: iptables)
#         tun0 192.168.6.254/24               tun 192.168.6.1 (a masqueradeRules source)
#   ext has no route back to any of those ranges: a reply arrives only if the source was
#   translated to the node's address. A second node and ext (n2, x2) take the upgrade case.
#
# Prints PASS/FAIL lines, each naming what it proves; the last line is "E2E <passed> passed,
# <failed> failed". Exits 0 only if none failed. Cleans up what it made, also on failure.
# Usage: e2e.sh BIN PIN_PATH [PREFIX]      (root; PREFIX names the namespaces, default "vm-")
set -u
BIN=$1 PIN=$2 P=${3:-vm-}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/em-e2e-XXXX)
EXT4=203.0.113.2 EXT6=2001:db8:1::2 NODE4=203.0.113.1 NODE6=2001:db8:1::1
passed=0 failed=0

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # check WHAT CMD...: PASS if CMD succeeds; its status
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; return 1; fi
}
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$P$ns" -- "$@"; }

cleanup() {
	set +e
	for pid in $(cat "$WORK"/pids 2>/dev/null); do kill "$pid" 2>/dev/null; done
	for f in "$WORK"/added-*; do [ -e "$f" ] && cni $(cat "$f") del "${f##*added-}" >/dev/null 2>&1; done
	for ns in a b d c e tun ext node x2 n2; do ip netns del "$P$ns" 2>/dev/null; done
	[ "$PIN" = /sys/fs/bpf/ebpf-masq ] || rm -rf "$PIN"
	rm -rf "$PIN-up" "$WORK"
}
[ -n "${E2E_KEEP:-}" ] || trap cleanup EXIT  # E2E_KEEP=1: leave it all for a look

# cni NODE CONFLIST VERB POD: cnitool in the node namespace (nsenter keeps bpffs); networks
# and namespaces are named with the prefix.
cni() {
	local node=$1 conf=$2 verb=$3 pod=$4
	in_ns "$node" env CNI_PATH="$WORK/bin:/usr/lib/cni" NETCONFPATH="$WORK/$conf" "${EXTRA_ENV[@]}" \
		cnitool "$verb" "$P$conf" /run/netns/"$P$pod"
}
EXTRA_ENV=()

# add NODE CONFLIST POD WHAT: a checked ADD, remembered for the cleanup.
add() {
	if cni "$1" "$2" add "$3" >"$WORK/add-$3.json"; then
		echo "$1 $2" >"$WORK/added-$3"
		ok "$4"
	else
		bad "$4"
	fi
}

# del POD WHAT: a checked DEL of an added pod.
del() {
	if cni $(cat "$WORK/added-$1") del "$1"; then
		rm -f "$WORK/added-$1"
		ok "$2"
	else
		bad "$2"
	fi
}

# node NODE EXT: the node's uplink up0 to ext, default routes via ext, forwarding on.
node() {
	ip netns add "$P$1" && ip netns add "$P$2"
	ip -n "$P$1" link set lo up && ip -n "$P$2" link set lo up
	ip -n "$P$1" link add up0 type veth peer name eth0 netns "$P$2"
	ip -n "$P$1" addr add $NODE4/24 dev up0 && ip -n "$P$1" addr add $NODE6/64 dev up0 nodad
	ip -n "$P$2" addr add $EXT4/24 dev eth0 && ip -n "$P$2" addr add $EXT6/64 dev eth0 nodad
	ip -n "$P$1" link set up0 up && ip -n "$P$2" link set eth0 up
	ip -n "$P$1" route add default via $EXT4 && ip -n "$P$1" -6 route add default via $EXT6
	in_ns "$1" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
}

# conflist NAME BRIDGE SUBNET4 [SUBNET6] [IPMASQ] [EBPF_MASQ_KEYS]: bridge, then ebpf-masq if keys.
conflist() {
	local name=$1 br=$2 s4=$3 s6=${4:-} masq=${5:-false} keys=${6:-}
	local ranges="[{\"subnet\": \"$s4\"}]"
	[ -n "$s6" ] && ranges="$ranges, [{\"subnet\": \"$s6\"}]"
	mkdir -p "$WORK/$name"
	local plugins="{\"type\": \"bridge\", \"bridge\": \"$br\", \"isGateway\": true, \"ipMasq\": $masq,
	  \"ipam\": {\"type\": \"host-local\", \"ranges\": [$ranges], \"dataDir\": \"$WORK/ipam\",
	            \"routes\": [{\"dst\": \"0.0.0.0/0\"}, {\"dst\": \"::/0\"}]}}"
	[ -n "$keys" ] && plugins="$plugins, {\"type\": \"ebpf-masq\", $keys}"
	echo "{\"cniVersion\": \"1.0.0\", \"name\": \"$P$name\", \"plugins\": [$plugins]}" >"$WORK/$name/$name.conflist"
}

# seen ADDR...: ADDRs as sources() lists them.
seen() { printf '%s\n' "$@" | sort -u | tr '\n' ' '; }

# sources NS DEV CMD...: the sources of the ICMP echo requests and replies tcpdump saw on
# DEV in NS while CMD ran (echo only: no ports, no neighbour discovery); CMD's status.
sources() {
	local ns=$1 dev=$2
	shift 2
	local pcap=$WORK/cap-$RANDOM
	nsenter --net=/run/netns/"$P$ns" -- tcpdump -i "$dev" -n -U --immediate-mode -w "$pcap" \
		'icmp[icmptype] == icmp-echo or icmp[icmptype] == icmp-echoreply or (icmp6 and (ip6[40] == 128 or ip6[40] == 129))' \
		>/dev/null 2>&1 & # nsenter execs tcpdump: $! is tcpdump
	local tpid=$!
	echo $tpid >>"$WORK/pids"
	for _ in $(seq 100); do [ -s "$pcap" ] && break; sleep 0.1; done
	"$@" >/dev/null 2>&1
	local rc=$?
	sleep 0.5
	kill $tpid 2>/dev/null
	wait $tpid 2>/dev/null
	tcpdump -n -r "$pcap" 2>/dev/null | awk '{ print $3 }' | sort -u | tr '\n' ' '
	return $rc
}

# tcp_peer NS_CLIENT ADDR [sctp [SPORT]]: the peer address ext's TCP (or SCTP) server saw for one
# connection (socat writes an IPv6 address in full: 2001:0db8:...); with SPORT the client binds that
# source port, and the peer's port follows the address (ADDR:PORT).
tcp_peer() {
	local out=$WORK/peer-$RANDOM listen=TCP4-LISTEN connect=TCP ssflag=-ltn opts=""
	[ "${3:-tcp}" = tcp ] || { listen=SCTP4-LISTEN connect=SCTP-CONNECT ssflag=-lnS; }
	[ "${2#*:}" = "$2" ] || listen=${listen%4-LISTEN}6-LISTEN
	[ -z "${4:-}" ] || opts=",sourceport=$4"
	# (no ':' in the command: socat would take it for a parameter separator)
	local log=$WORK/socat-$RANDOM.log
	# -d -d: socat logs the peer it accepted ("accepting connection from ..."), shown when the answer is wrong
	nsenter --net=/run/netns/"${P}ext" -- socat -d -d -u $listen:5000,reuseaddr \
		SYSTEM:"echo \$SOCAT_PEERADDR \$SOCAT_PEERPORT >$out" >"$log" 2>&1 &
	echo $! >>"$WORK/pids"
	for _ in $(seq 100); do in_ns ext ss $ssflag | grep -q ':5000 ' && break; sleep 0.1; done
	local addr=$2
	[ "${addr#*:}" = "$addr" ] || addr="[$addr]"
	echo hello | in_ns "$1" socat -u - $connect:"$addr":5000,connect-timeout=10$opts || return 1
	for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.1; done
	[ -s "$out" ] || { cat "$log" >&2; return 1; }
	grep -q '[0-9a-f]' "$out" || { echo "tcp_peer: the server's answer: '$(cat "$out")'" >&2; cat "$log" >&2; }
	# "ADDR PORT", an IPv6 address in brackets: ADDR, or ADDR:PORT when SPORT was given
	sed 's/^\[//; s/\] / /' "$out" | awk -v p="${4:-}" '{ print (p == "" ? $1 : $1 ":" $2) }'

}

mkdir -p "$WORK/bin"
ln -s "$BIN" "$WORK/bin/ebpf-masq"
uname -r
modprobe -a bridge veth sch_ingress cls_bpf 2>/dev/null
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

# --- one node: pods, a tunnel source, iptables beside -----------------------------------
node node ext
KEYS="\"pinPath\": \"$PIN\", \"egressInterfaces\": [\"up0\"], \"podCIDRs\": [\"10.244.0.0/16\", \"fd00:244::/64\"],
  \"masqueradeRules\": [{\"source\": \"192.168.6.0/24\", \"outInterface\": \"up0\"}]"
conflist a cni0 10.244.1.0/24 fd00:244::/64 false "$KEYS"
conflist b cni1 10.245.1.0/24 "" true
for pod in a b d tun; do ip netns add "$P$pod"; done
ip -n "${P}node" link add tun0 type veth peer name eth0 netns "${P}tun"
ip -n "${P}node" addr add 192.168.6.254/24 dev tun0 && ip -n "${P}node" link set tun0 up
ip -n "${P}tun" addr add 192.168.6.1/24 dev eth0 && ip -n "${P}tun" link set eth0 up
ip -n "${P}tun" route add default via 192.168.6.254

start=$(date +%s)
add node a a "ADD through bridge then ebpf-masq (cnitool)"
echo "(ADD took $(($(date +%s) - start)) s)"
add node b b "ADD of the ipMasq network (bridge, iptables)"
for dir in egress ingress; do # a TCX program where the kernel has TCX (6.6), a tc filter before
	hooks=$(in_ns node /usr/bin/python3 "$HERE/../lab/bpfhooks.py" up0 $dir)
	echo "$hooks"
	check "up0 $dir runs masq_up_$dir, once" [ "$(echo "$hooks" | grep -c "masq_up_$dir")" = 1 ]
done

s=$(sources ext eth0 in_ns a ping -c 3 -i 0.2 -W 5 $EXT4)
check "pod ping answered, ext sees only the node's address (got: $s)" [ $? = 0 -a "$s" = "$(seen $EXT4 $NODE4)" ]
peer=$(tcp_peer a $EXT4)
check "pod TCP: ext's server saw the node's address (got: $peer)" [ "$peer" = $NODE4 ]
s=$(sources ext eth0 in_ns a ping -6 -c 3 -i 0.2 -W 5 $EXT6)
check "pod IPv6 ping answered, ext sees only the node's IPv6 address (got: $s)" [ $? = 0 -a "$s" = "$(seen $EXT6 $NODE6)" ]
peer=$(tcp_peer a $EXT6)
check "pod IPv6 TCP: ext's server saw the node's address (got: $peer)" [ "$peer" = 2001:0db8:0001:0000:0000:0000:0000:0001 ]
# SCTP with real sockets (this kernel has the sctp module): the node's address, the pod's port kept;
# the bridge's ipMasq gives the same.
modprobe sctp 2>/dev/null  # load.sh loaded it where modprobe cannot find it
lsmod | grep -q '^sctp' || echo "no sctp module"
peer=$(tcp_peer a $EXT4 sctp 38412)
check "pod SCTP: ext's server saw the node's address, the pod's port kept (got: $peer)" [ "$peer" = $NODE4:38412 ]
peer=$(tcp_peer a $EXT6 sctp 38413)
check "pod IPv6 SCTP: the node's address, the pod's port kept (got: $peer)" \
	[ "$peer" = 2001:0db8:0001:0000:0000:0000:0000:0001:38413 ]
peer=$(tcp_peer b $EXT4 sctp 38414)
check "beside it, the bridge's ipMasq gives SCTP the same (got: $peer)" [ "$peer" = $NODE4:38414 ]
s=$(sources ext eth0 in_ns tun ping -c 3 -i 0.2 -W 5 $EXT4)
check "tunnel source masqueraded by its rule (got: $s)" [ $? = 0 -a "$s" = "$(seen $EXT4 $NODE4)" ]
s=$(sources ext eth0 in_ns b ping -c 3 -i 0.2 -W 5 $EXT4)
check "beside it, the bridge's ipMasq (iptables MASQUERADE) does the same (got: $s)" [ $? = 0 -a "$s" = "$(seen $EXT4 $NODE4)" ]
in_ns node "$BIN" status --pin-path "$PIN" >"$WORK/status" 2>&1
check "status lists the pod and the rule" grep -q "192.168.6.0/24" "$WORK/status"

add node a d "ADD of a second pod"
veth=$(in_ns node ip -j link show master cni0 | tr ',' '\n' | grep -c ifname)
del d "DEL of the second pod"
check "its veth went with it, the first pod's stayed ($veth veths before)" \
	[ "$(in_ns node ip -j link show master cni0 | tr ',' '\n' | grep -c ifname)" = $((veth - 1)) ]
in_ns a ping -c 2 -i 0.2 -W 5 $EXT4 >/dev/null
check "the first pod is still masqueraded after the DEL" [ $? = 0 ]

# --- an upgrade on a second node: a data plane of the previous layout is adopted ---------
node n2 x2
layout=$(ls -d "$PIN"/v* 2>/dev/null | sed 's/.*\/v//' | sort -n | tail -1)
KEYS2="\"pinPath\": \"$PIN-up\", \"egressInterfaces\": [\"up0\"], \"podCIDRs\": [\"10.244.0.0/16\"]"
conflist up cni0 10.244.1.0/24 "" false "$KEYS2"
ip netns add "${P}c" && ip netns add "${P}e"
EXTRA_ENV=(EBPF_MASQ_TEST_AS_LAYOUT=$((layout - 1)))
add n2 up c "ADD as the previous layout (v$((layout - 1)))"
EXTRA_ENV=()
check "its pins are v$((layout - 1))" [ "$(ls "$PIN-up")" = "v$((layout - 1))" ]
add n2 up e "ADD by this layout adopts it"
check "only v$layout is left" [ "$(ls "$PIN-up")" = "v$layout" ]
for pod in c e; do
	s=$(sources x2 eth0 in_ns $pod ping -c 2 -i 0.2 -W 5 $EXT4)
	check "after the upgrade pod $pod is masqueraded (got: $s)" [ $? = 0 -a "$s" = "$(seen $EXT4 $NODE4)" ] ||
		{ in_ns $pod ip addr; in_ns $pod ip route; in_ns n2 "$BIN" status --pin-path "$PIN-up"; in_ns $pod ping -c 1 -W 2 $EXT4; }
done
del c "DEL of the adopted pod"

echo "E2E $passed passed, $failed failed"
[ $failed = 0 ]
