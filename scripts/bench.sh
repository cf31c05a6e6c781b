#!/usr/bin/env bash
# Benchmark ebpf-masq (normal and fast path) against no NAT and against
# iptables MASQUERADE.
#
# Six identical topologies (seven or eight with --floor, --natlog), one per mode, built side by side and kept for the
# whole run (so every mode sees the same kernel paths, only the NAT differs):
#
#   pod (10.244.1.x/24, eth0) --veth-- cni0 bridge [node] eth0 10.0.0.5 --veth-- eth0 10.0.0.2 [ext]
#
#   The pod is added by cnitool with bridge + host-local in every mode, so the
#   pod side (veth, bridge, gateway 10.244.1.1, ip_forward) is the same:
#     none  no NAT; ext routes 10.244.1.0/24 back via the node
#     hooks none plus an empty program (scripts/bench/empty.bpf.c, returns
#           "next") on every hook ebpf-masq uses, attached the same way: eth0
#           egress and ingress (TCX), pod veth ingress (tc clsact). What any
#           program at those hooks costs: the floor under ebpf/none; under
#           bpf_stats, the stats' own floor per run
#     redir none plus the fast path's redirects with none of its work (the
#           "redirect-only" anchor, scripts/bench/redir.bpf.c): the pod veth's
#           ingress bpf_fib_lookup()s and bpf_redirect_neigh()s the pod's packets
#           to the next hop, eth0's ingress bpf_redirect_peer()s the replies into
#           the pod; no source check, no NAT state, no rewrite but the TTL. The
#           ceiling of any fast path on this topology: fast/redir is what the
#           fast path's NAT and checks cost, redir/none what skipping the stack gains
#     state with --floor only: none plus a program that keeps the least per-flow
#           state a NAT can (scripts/bench/state.bpf.c: a forward and a reverse
#           hash half per flow, looked up per packet, written per new flow; no
#           rewrite, no port search) at the same hooks: ebpf/state is what
#           ebpf-masq costs above any stateful NAT's floor on this machine
#     ipt   node: iptables -t nat -A POSTROUTING -s 10.244.1.0/24 -o eth0 -j MASQUERADE
#           (ext has no route back: replies only work if NAT worked)
#     ebpf  conflist bridge + host-local + ebpf-masq with its defaults, only
#           egressInterfaces named (ext has no route back)
#     fast  the same with "fastPath": true, its own pin path: the pod's veth
#           program translates and bpf_redirect_neigh's to eth0, replies are
#           bpf_redirect_peer'ed to the pod (the node's stack is bypassed);
#           checked: the fastpath_egress counter moves during a ping
#     log   with --natlog only: the ebpf mode's setup, its own pin path, plus
#           "natLog": {"ipfix": "127.0.0.1:4739", "file": ...} in its conflist
#           entry. The node runs an IPFIX collector (Debian's nfcapd, its data
#           dir in the temp dir) and the exporter (`ebpf-masq natlog --conf`
#           the mode's conflist), both started after setup and stopped by PID
#           (SIGTERM) after the rounds: every pair made and ended is a ring
#           event, a JSON line and an IPFIX record. Checked: a record within 3 s
#           of a ping; after the run, events_lost (in all and per test, with
#           the pairs each test made: one event each), the exporter's exit line
#           and CPU time, the JSON log's records (and its busiest second) and
#           nfdump's count are printed (a log mode that wrote nothing fails the
#           run). log/ebpf is what the log costs. Mind that only round 1 makes
#           many events: the pod's ports then reuse pairs still alive
#
# One topology per mode instead of switching modes on one topology: removing
# ebpf-masq means deleting the pod (its veth goes), and an iptables nat table,
# once created, leaves conntrack hooked in the namespace. Separate namespaces
# cost nothing in the data path and never carry state from one mode to another.
#
# Each round runs every test for all modes back to back (tcp: none ipt
# hooks redir ebpf fast, then udp: ..., order shuffled per round after the first), so paired
# ratios compare runs seconds apart. The machine is noisy (2 CPUs, +-20-30 %):
# trust the paired ratios over the absolute numbers.
#
# Tests (pod -> ext):
#   tcp   iperf3 TCP, one stream, --duration s; Gbit/s received
#   udp   datagrams with a 64-byte payload (106-byte frames), one flow, sent by
#         benchtool udp-send (sendmmsg, 64 per call) for --duration s; rate =
#         packets ext's eth0 received / s (its veth rx counter: what the node
#         forwarded, NATed and handed to ext). On veths the sender's own
#         softirq carries each packet through the whole path, so the sender is
#         held to the path's pace: sent == received, and the rate is
#         1 / (per-packet CPU cost of syscall share + path). A drop anywhere
#         would show as sent > received.
#   cps   benchtool tcp-cps: connect()+close() one at a time for --duration s
#         against an accept()+close() server in ext; connects/s. The client
#         closes with RST: with orderly closes the pod's ports pile up in
#         TIME_WAIT and port reuse, not the path, capped every mode at ~14k/s.
#   churn benchtool tcp-churn: 2 client processes in the pod (tcp_tw_reuse=1,
#         the default ephemeral range) each open short connections to one ext
#         endpoint as fast as they can: connect, 16-byte request, answer,
#         orderly close (the client's ports cycle through TIME_WAIT), for
#         --duration s; connections/s, and those that failed or took > 1 s
#         (a lost SYN). The scenario: replicas against one database;
#         what limits it is the NAT's port space and reuse of finished flows
#         towards one remote endpoint (ipt is the anchor)
#   cpu   with each rate, the CPU time it took (getrusage of the sender /
#         client, iperf3's own for client + server), per packet, connection or
#         GB. This kernel charges softirq work to the task it interrupts, and on
#         veths that is the whole path of what the task sends. Neighbours that
#         steal the CPU lower a rate but not the CPU per unit: on a shared box
#         these rows are the steadier comparison.
#   ping  RTT: 10 x --pings back-to-back pings (ping -A; interquartile mean,
#         as ping prints whole us), and the median of --pings pings 10 ms apart
#   bpf   hooks, redir, ebpf, fast (and state, log) modes, a separate phase per round with
#         kernel.bpf_stats_enabled=1 (restored afterwards): ns per run of the
#         pinned programs while UDP, TCP and connect+close traffic ran (in the
#         fast mode the pod's veth program does the NAT and the redirect).
#         Kept out of the timed tests because the stats themselves cost ~2
#         clock reads per program run, which would tax ebpf-masq only.
#   ports after the rounds, once: the scale target, port allocation O(1)
#         expected while the range is under 90 % full for one remote endpoint:
#         ports tried and ns per new flow with 0, 50 and 90 % of a 1,000- and a
#         64,512-port range in use (plugin/tests/microbench.rs
#         port_allocation_cost, BPF_PROG_TEST_RUN, no traffic)
#
# --add-latency: a separate mode, the cost of CNI ADD instead of the data path
# (scripts/bench/addlat.py does the work; its docstring has the details):
#   warm  a node with the programs loaded: cnitool add with bridge + host-local
#         vs bridge + host-local + ebpf-masq, interleaved, --reps times (paired
#         difference = our cost), and the plugin's ADD/DEL run directly (CNI env
#         + stdin with the bridge's result as prevResult): wall time and its own
#         logged duration_ms
#   first the first ADD on a fresh node (new pin path, bare uplink each time),
#         default natMaxEntries vs 65536 (bucket arrays: 16 MiB vs 1 MiB), --first
#         times each, plus one trace-logged run each for a breakdown
#   pods  uplink egress / veth ingress ns per packet (kernel.bpf_stats_enabled,
#         saved and restored) for one UDP flow with 1, then 100, then 1 pod
#         attached; the direct ADD with 100 pods attached
#   Prints median/p90/min/max per metric and the issue's targets (ADD overhead
#   <= 10 ms median, first ADD <= 150 ms, per-packet cost unchanged at 100 pods).
#
# --micro: per-packet cost of each program path, measured by the kernel with
# BPF_PROG_TEST_RUN on crafted packets (plugin/tests/microbench.rs): no traffic
# and no scheduler noise, so two builds compare to a few ns. Each figure
# includes the test-run frame's fixed cost, printed as "baseline".
#
# --newflow: the new-flow path under load, ebpf-masq and its fast path beside
# iptables MASQUERADE, one lab per row and mode (scripts/bench/newflow.py has
# the details; ~12 minutes): churn (4 pods + the node, unthrottled, 60 s, to one
# endpoint: conn/s, failed, stalled, no_port, ports tried per new pair), held
# (the same churn, 30 s, while 45,000 connections to that endpoint are held
# open), ramp (clients raised 4..128 until a connection fails). With --quick:
# 10 s, 20,000 held, clients 4 and 16.
#
# --sweep: what the NAT expiry sweep (one bpf_timer per node, bpf/lib/nat/gc.h) takes from
# a CPU. One ebpf node with the defaults; a busy-looping probe
# (scripts/bench/gap.py) pinned to each CPU in turn counts the times it lost
# the CPU for more than 0.25 ms (and 1 ms), --duration s per CPU (default here
# 5), in three states: no pair yet (sweep not armed), one IPv4 pair (each run
# walks one of nat4_fwd's 16 shards, 16 runs a second), IPv4 + IPv6 pairs
# (nat6_fwd's shards join the cycle: 32 runs a second). A walk visits every
# bucket of its shard, so its length follows natMaxEntries / 16 — and the pairs
# in it: then each run's own duration (nat_gc.last_run_took_ns) with one pair
# and with 983,040 pairs (plugin/tests/microbench.rs sweep_run_cost).
#
# Usage: scripts/bench.sh [options]
#   --add-latency  the ADD-latency mode above instead of the data-path benchmark
#   --micro        the per-path micro-benchmark above instead
#   --sweep        the expiry-sweep stall probe above instead
#   --newflow      the new-flow rows above instead
#   --reps N       add-latency: warm-node repetitions (default 100)
#   --first N      add-latency: fresh-node first ADDs per map size (default 5)
#   --rounds N     rounds (default 5)
#   --duration S   seconds per tcp/udp/cps test, whole seconds (default 2);
#                  add-latency: seconds per UDP run of the per-packet stage
#   --pings N      pings 10 ms apart per test; 10 x N back-to-back (default 50)
#   --floor        add the state mode (above) to the data-path benchmark
#   --natlog       add the log mode (above): paired log/ebpf ratios, and the
#                  target (connections/s with natLog >= 0.95x without)
#   --quick        smoke test: --rounds 1 --duration 1 --pings 20 (~40 s);
#                  with --add-latency: --reps 20 --first 2 --duration 1
#   --json FILE    also write {meta, summary, targets, samples} as one JSON line to FILE
#                  (- = stdout, after the table)
#   --build        cargo build --release first (default: only if the binary
#                  is missing); EBPF_MASQ_BIN=path benchmarks another binary
# Output: progress on stderr, then the table on stdout: per metric the median
# over rounds per mode, and the median of the per-round paired ratios
# (ipt/none, hooks/none, ebpf/none, ebpf/hooks, ebpf/ipt, redir/none, fast/none,
# fast/redir, fast/ipt, with --floor state/hooks and ebpf/state, with --natlog log/ebpf; the JSON also has
# fast/ebpf) with their min-max; after the run the ebpf-masq counters/drops of both ebpf modes and the ipt
# node's conntrack drops, as a check (with --natlog also the log mode's evidence, above).
#
# Needs root; the tools come from scripts/install-deps.sh (run when missing).
# Everything it creates (namespaces emb-<id>-*, pins /sys/fs/bpf/emb-<id>{,-fast,-hooks,-redir,-state,-log},
# cnitool cache entries, processes, a temp dir) is removed on exit, also on
# failure or Ctrl-C; kernel.bpf_stats_enabled is put back as it was.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=/usr/bin/python3                 # Debian's python (stdlib only needed)
UTIL="$HERE/bench/benchutil.py"
TOOL_SRC=("$HERE/bench/benchtool.c" "$HERE/bench/benchtool_hold.c")
CNI_BIN_DIR=/usr/lib/cni
MODES=(none ipt hooks redir ebpf fast)

EXT_IP=10.0.0.2
NODE_IP=10.0.0.5
POD_SUBNET=10.244.1.0/24
IPERF_PORT=5201 UDP_PORT=5300 CPS_PORT=5301 CHURN_PORT=5302 IPFIX_PORT=4739

# ---------------------------------------------------------------- options
ROUNDS=5 DURATION=2 PINGS=50 UDP_LEN=64 STATS_SECS=1 JSON_OUT="" BUILD=0 QUICK=0
ADDLAT=0 REPS=100 FIRST=5 DURATION_SET=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --rounds|--duration|--pings|--json|--reps|--first)
      [ $# -ge 2 ] || { echo "bench: $1 needs a value" >&2; exit 2; } ;;
  esac
  case $1 in
    --rounds)   ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; DURATION_SET=1; shift 2 ;;
    --pings)    PINGS=$2; shift 2 ;;
    --json)     JSON_OUT=$2; shift 2 ;;
    --reps)     REPS=$2; shift 2 ;;
    --first)    FIRST=$2; shift 2 ;;
    --add-latency) ADDLAT=1; shift ;;
    --micro)    MICRO=1; shift ;;
    --sweep)    SWEEP=1; shift ;;
    --newflow)  NEWFLOW=1; shift ;;
    --quick)    QUICK=1; shift ;;
    --floor)    MODES+=(state); shift ;;
    --natlog)   MODES+=(log); NATLOG=1; shift ;;
    --build)    BUILD=1; shift ;;
    -h|--help)  usage 0 ;;
    *) echo "bench: unknown option $1" >&2; usage 2 >&2 ;;
  esac
done
if [ "${MICRO:-0}" = 1 ]; then  # BPF_PROG_TEST_RUN per-path costs: no topology needed
  [ "$(id -u)" = 0 ] || { echo "bench: must run as root" >&2; exit 1; }
  cd "$REPO" && exec cargo test --release --test microbench -- --ignored --nocapture --test-threads=1
fi
if [ "${NEWFLOW:-0}" = 1 ]; then  # labs of integration/lab/churnlab.py; newflow.py cleans up after itself
  [ "$(id -u)" = 0 ] || { echo "bench: must run as root" >&2; exit 1; }
  nf_args=()
  [ "$QUICK" = 0 ] || nf_args+=(--churn-secs 10 --held 20000 --held-secs 10 --ramp 4,16 --ramp-secs 3)
  [ -z "$JSON_OUT" ] || nf_args+=(--json "$JSON_OUT")
  exec "$PY" "$HERE/bench/newflow.py" "${nf_args[@]}"
fi
if [ "$QUICK" = 1 ]; then       # smoke test: one short round
  ROUNDS=1 DURATION=1 PINGS=20 REPS=20 FIRST=2
fi
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "bench: --reps must be a positive integer" >&2; exit 2; }
[[ $FIRST =~ ^[1-9][0-9]*$ ]] || { echo "bench: --first must be a positive integer" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench: --rounds must be a positive integer" >&2; exit 2; }
# iperf3 -t takes whole seconds
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || { echo "bench: --duration must be whole seconds >= 1" >&2; exit 2; }
[[ $PINGS =~ ^[1-9][0-9]*$ ]] || { echo "bench: --pings must be a positive integer" >&2; exit 2; }

log() { printf '%s\n' "$*" >&2; }
die() { log "bench: $*"; exit 1; }

# ---------------------------------------------------------------- prerequisites
check_prereqs() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  local tools=(ip nsenter tc iperf3 ping iptables nft ss bpftool cnitool gcc clang shuf timeout sysctl)
  [ "${NATLOG:-0}" = 0 ] || tools+=(nfcapd nfdump)   # the log mode's collector
  local missing=()
  for t in "${tools[@]}"; do command -v "$t" >/dev/null || missing+=("$t"); done
  [ -x "$PY" ] || missing+=("$PY")
  [ -x "$CNI_BIN_DIR/bridge" ] && [ -x "$CNI_BIN_DIR/host-local" ] || missing+=("$CNI_BIN_DIR/{bridge,host-local}")
  mountpoint -q /sys/fs/bpf || missing+=("bpffs on /sys/fs/bpf")
  if [ ${#missing[@]} -gt 0 ]; then
    log "bench: missing ${missing[*]}; running scripts/install-deps.sh"
    "$REPO/scripts/install-deps.sh" >&2
    for t in "${tools[@]}"; do command -v "$t" >/dev/null || die "$t still missing"; done
    mountpoint -q /sys/fs/bpf || die "bpffs still not mounted"
  fi

  PLUGIN=${EBPF_MASQ_BIN:-$("$REPO/scripts/binpath.sh")}
  if [ "$BUILD" = 1 ] || [ ! -x "$PLUGIN" ]; then
    [ -z "${EBPF_MASQ_BIN:-}" ] || [ -x "$PLUGIN" ] || die "EBPF_MASQ_BIN=$PLUGIN is not executable"
    log "bench: cargo build --release"
    (cd "$REPO" && cargo build --release >&2)
  fi
  [ -x "$PLUGIN" ] || die "plugin binary $PLUGIN missing"
}

# ---------------------------------------------------------------- state + cleanup
ID=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PFX=emb-$ID
PIN=/sys/fs/bpf/$PFX                # ebpf mode
PIN_FAST=/sys/fs/bpf/$PFX-fast      # fast mode (the fastPath flag is per pin path)
PIN_HOOKS=/sys/fs/bpf/$PFX-hooks    # hooks mode: the empty program and its links
PIN_REDIR=/sys/fs/bpf/$PFX-redir    # redir mode: the redirect-only programs, their maps and link
PIN_STATE=/sys/fs/bpf/$PFX-state    # state mode (--floor): the state-floor program and its links
PIN_LOG=/sys/fs/bpf/$PFX-log        # log mode (--natlog): ebpf with natLog
NATLOG_PIDS=()     # log mode: the exporter, the collector (stopped before the report)
WORK=""
NAMESPACES=()      # netns we created
PIDS=()            # background processes we started
ADDED=()           # modes whose pod cnitool added
STATS_OLD=""       # kernel.bpf_stats_enabled before we touched it

cleanup() {
  local rc=$? pid mode
  set +e
  trap - EXIT INT TERM
  [ -n "$STATS_OLD" ] && sysctl -qw kernel.bpf_stats_enabled="$STATS_OLD"
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  done
  for mode in "${ADDED[@]}"; do   # CNI DEL through the chain, then drop what cnitool cached
    cni "$mode" del >/dev/null 2>&1
    rm -f /var/lib/cni/results/"$PFX-$mode"-*
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [ "$ADDLAT" = 1 ]; then     # addlat.py cleans up itself; this is the backstop (our random prefix only)
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PFX-"); do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$PIN"-*
    rm -f /var/lib/cni/results/"$PFX"-*
  fi
  rm -rf "$PIN" "$PIN_FAST" "$PIN_HOOKS" "$PIN_REDIR" "$PIN_STATE" "$PIN_LOG"   # the anchors' links go with their pins
  [ -n "$WORK" ] && rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ns()  { echo "$PFX-$1-$2"; }                       # ns MODE ROLE
nx()  { local n; n=$(ns "$1" "$2"); shift 2; ip netns exec "$n" "$@"; }     # traffic tools
ne()  { local n; n=$(ns "$1" "$2"); shift 2; nsenter --net="/run/netns/$n" -- "$@"; }  # keeps bpffs

# spawn MODE ROLE NAME CMD...: start a long-running process in a namespace, remember its PID.
spawn() {
  local mode=$1 role=$2 name=$3; shift 3
  ip netns exec "$(ns "$mode" "$role")" "$@" >"$WORK/log/$mode-$name.log" 2>&1 &
  PIDS+=($!)
}

# cni MODE add|del: cnitool in the node netns (nsenter: bpffs stays visible)
cni() {
  local mode=$1 verb=$2
  CNI_PATH="$CNI_BIN_DIR:$WORK/cni-bin" NETCONFPATH="$WORK/$mode/netconf" \
    ne "$mode" node cnitool "$verb" "$PFX-$mode" "/run/netns/$(ns "$mode" pod)"
}

wait_listen() {   # wait_listen MODE PROTO(t|u) PORT
  for _ in $(seq 100); do
    [ -n "$(nx "$1" ext ss -Hln"$2" "sport = :$3")" ] && return 0
    sleep 0.05
  done
  die "$1: nothing listening on $2/$3 in ext"
}

# ---------------------------------------------------------------- topology
setup_mode() {   # setup_mode MODE [dual]: dual = IPv6 on the node, ext and pod too (--sweep)
  local mode=$1 variant=${2:-} role
  for role in node ext pod; do
    ip netns add "$(ns "$mode" "$role")"
    NAMESPACES+=("$(ns "$mode" "$role")")
    ip -n "$(ns "$mode" "$role")" link set lo up
  done
  ip -n "$(ns "$mode" node)" link add eth0 type veth peer name eth0 netns "$(ns "$mode" ext)"
  ip -n "$(ns "$mode" node)" addr add "$NODE_IP/24" dev eth0
  ip -n "$(ns "$mode" ext)" addr add "$EXT_IP/24" dev eth0
  ip -n "$(ns "$mode" node)" link set eth0 up
  ip -n "$(ns "$mode" ext)" link set eth0 up
  ip -n "$(ns "$mode" node)" route add default via "$EXT_IP" dev eth0
  nx "$mode" node sysctl -qw net.ipv4.ip_forward=1
  if [ "$variant" = dual ]; then   # before the ADD: the plugin takes the uplink's IPv6 address then
    ip -n "$(ns "$mode" node)" -6 addr add fd00:e::5/64 dev eth0 nodad
    ip -n "$(ns "$mode" ext)" -6 addr add fd00:e::2/64 dev eth0 nodad
    ip -n "$(ns "$mode" node)" -6 route add default via fd00:e::2 dev eth0
    nx "$mode" node sysctl -qw net.ipv6.conf.all.forwarding=1
  fi

  mkdir -p "$WORK/$mode/netconf"
  local conf=()
  case $mode in
    ebpf) conf=("$PIN" $variant) ;;
    fast) conf=("$PIN_FAST" fast) ;;
    log)  conf=("$PIN_LOG" log "127.0.0.1:$IPFIX_PORT" "$WORK/natlog/nat.json"); mkdir -p "$WORK/natlog/nfcapd" ;;
  esac
  "$PY" "$UTIL" conflist "$PFX-$mode" "$WORK/$mode/ipam" "${conf[@]}" >"$WORK/$mode/netconf/$PFX-$mode.conflist"
  ADDED+=("$mode")
  cni "$mode" add >"$WORK/$mode/cni-result.json" || die "$mode: cnitool add failed"

  case $mode in
    none) ip -n "$(ns "$mode" ext)" route add "$POD_SUBNET" via "$NODE_IP" ;;
    hooks) ip -n "$(ns "$mode" ext)" route add "$POD_SUBNET" via "$NODE_IP"
           attach_empty "$mode" "$WORK/empty.o" "$PIN_HOOKS" masq_empty ;;
    state) ip -n "$(ns "$mode" ext)" route add "$POD_SUBNET" via "$NODE_IP"
           attach_empty "$mode" "$WORK/state.o" "$PIN_STATE" masq_state ;;
    redir) ip -n "$(ns "$mode" ext)" route add "$POD_SUBNET" via "$NODE_IP"
           attach_redir "$mode" ;;
    ipt)  nx "$mode" node iptables -t nat -A POSTROUTING -s "$POD_SUBNET" -o eth0 -j MASQUERADE ;;
    ebpf|fast) ;;  # the plugin attached itself during cnitool add
    log)  start_natlog ;;
  esac

  spawn "$mode" ext iperf3 iperf3 -s -p "$IPERF_PORT"
  spawn "$mode" ext udp-sink "$TOOL" udp-sink "$UDP_PORT"
  spawn "$mode" ext tcp-accept "$TOOL" tcp-accept "$CPS_PORT"
  spawn "$mode" ext tcp-serve "$TOOL" tcp-serve "$CHURN_PORT" 2
  nx "$mode" pod sysctl -qw net.ipv4.tcp_tw_reuse=1   # what a client of many short connections sets
  wait_listen "$mode" t "$CHURN_PORT"
  wait_listen "$mode" t "$IPERF_PORT"
  wait_listen "$mode" u "$UDP_PORT"
  wait_listen "$mode" t "$CPS_PORT"
}

pin_of() { case $1 in ebpf) echo "$PIN" ;; fast) echo "$PIN_FAST" ;; hooks) echo "$PIN_HOOKS" ;; state) echo "$PIN_STATE" ;; redir) echo "$PIN_REDIR" ;; log) echo "$PIN_LOG" ;; esac; }

# The log mode's collector (nfcapd on the node's 127.0.0.1) and exporter, in the
# node's netns; the exporter through nsenter, so it sees the pins. Not through nx/ne:
# a function in the background is a subshell, and its PID would not be theirs.
start_natlog() {
  local d=$WORK/natlog
  ip netns exec "$(ns log node)" nfcapd -b 127.0.0.1 -p "$IPFIX_PORT" -w "$d/nfcapd" -t 3600 >"$WORK/log/log-nfcapd.log" 2>&1 &
  NATLOG_PIDS+=($!); PIDS+=($!)
  sleep 0.5
  kill -0 "${NATLOG_PIDS[0]}" 2>/dev/null || die "log: nfcapd exited: $(tail -c 300 "$WORK/log/log-nfcapd.log")"
  nsenter --net="/run/netns/$(ns log node)" -- "$PLUGIN" natlog --conf "$WORK/log/netconf/$PFX-log.conflist" >"$WORK/log/log-exporter.log" 2>&1 &
  NATLOG_PIDS+=($!); PIDS+=($!)
  sleep 0.5
  kill -0 "${NATLOG_PIDS[1]}" 2>/dev/null || die "log: the exporter exited: $(tail -c 300 "$WORK/log/log-exporter.log")"
}
# After the rounds: the exporter, then the collector, stopped by SIGTERM and waited for
# (nfcapd writes its file when it stops); then what they wrote, as JSON.
stop_natlog() {
  local pid d=$WORK/natlog
  for pid in "${NATLOG_PIDS[@]}"; do   # CPU seconds each took (utime + stime), as a hint where the cost went
    awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$pid/stat" 2>/dev/null || echo null
  done >"$d/cpu.txt"
  for pid in "${NATLOG_PIDS[1]}" "${NATLOG_PIDS[0]}"; do   # the exporter first: its last records reach nfcapd
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && log "bench: log: process $pid did not stop on SIGTERM in 10 s"
    wait "$pid" 2>/dev/null || true
  done
  local keep=() p
  for p in "${PIDS[@]}"; do [[ " ${NATLOG_PIDS[*]} " == *" $p "* ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
  local f
  for f in "$d"/nfcapd/nfcapd.*; do [ -e "$f" ] && nfdump -r "$f" -I; done >"$d/nfdump-stat.txt" 2>&1 || true
  "$PY" "$UTIL" natlog "$WORK/log-status.json" "$WORK/log/log-exporter.log" "$d/nat.json" "$d/nfdump-stat.txt" \
    "$d/cpu.txt" "$d/lost.jsonl"
}
events_lost() {   # the log mode's events_lost and nat_created counters now: "LOST MADE"
  ne log node "$PLUGIN" status --json --pin-path "$PIN_LOG" >"$WORK/natlog/status-now.json" 2>&1 || true
  echo "$("$PY" "$UTIL" counter "$WORK/natlog/status-now.json" events_lost)" \
    "$("$PY" "$UTIL" counter "$WORK/natlog/status-now.json" nat_created)"
}
LOST="0 0"
natlog_lost() {   # natlog_lost ROUND TEST: events lost and pairs made (one event each) in the log mode's last test
  local now; now=$(events_lost)
  printf '{"round":%s,"test":"%s","lost":%s,"made":%s}\n' "$1" "$2" "$((${now% *} - ${LOST% *}))" \
    "$((${now#* } - ${LOST#* }))" >>"$WORK/natlog/lost.jsonl"
  LOST=$now
}

# tcx_or_tc MODE PROG DEV HOOK LINK: PROG on DEV's HOOK as a TCX link pinned at
# LINK, or as a tc clsact filter where the kernel has no TCX.
tcx_or_tc() {
  local mode=$1 prog=$2 dev=$3 hook=$4 link=$5 rc=0
  ne "$mode" node "$TOOL" tcx-attach "$prog" "$dev" "$hook" "$link" || rc=$?
  case $rc in
    0) ;;
    3) tc_attach "$mode" "$prog" "$dev" "$hook" ;;
    *) die "$mode: cannot attach $prog to $dev $hook" ;;
  esac
}
tc_attach() {   # tc_attach MODE PROG DEV HOOK
  ne "$1" node tc qdisc add dev "$3" clsact 2>/dev/null || true
  ne "$1" node tc filter add dev "$3" "$4" bpf da pinned "$2" || die "$1: tc attach of $2 to $3 $4 failed"
}
pod_veth() {   # pod_veth MODE: the pod's host-side veth, from the CNI result
  "$PY" -c 'import json,sys; print(next(i["name"] for i in json.load(open(sys.argv[1]))["interfaces"]
            if i["name"].startswith("veth")))' "$WORK/$1/cni-result.json"
}

# attach_empty MODE OBJ PIN NAME: one anchor program (OBJ's NAME, pinned under
# PIN) where ebpf-masq attaches on MODE's node, the way it attaches there: eth0
# egress and ingress as TCX links (tc clsact where there is no TCX), the pod
# veth's ingress as a tc clsact filter.
attach_empty() {
  local mode=$1 obj=$2 pin=$3 name=$4 veth hook prog="$3/v0/progs/$4"
  mkdir -p "$pin/v0/progs" "$pin/links"
  bpftool prog load "$obj" "$prog" type classifier || die "$mode: cannot load $obj"
  veth=$(pod_veth "$mode")
  for hook in egress ingress; do tcx_or_tc "$mode" "$prog" eth0 "$hook" "$pin/links/eth0-$hook"; done
  tc_attach "$mode" "$prog" "$veth" ingress
}

# attach_redir MODE: the redirect-only programs (redir.bpf.c) as ebpf-masq's fast
# path attaches its own: the pod veth's ingress (tc clsact), eth0's ingress (TCX),
# with the pod's facts (address, veth, bridge, MACs) in their redir_pod map.
attach_redir() {
  local mode=$1 veth d="$PIN_REDIR/v0"
  mkdir -p "$d/progs" "$d/maps" "$PIN_REDIR/links"
  bpftool prog loadall "$WORK/redir.o" "$d/progs" type classifier pinmaps "$d/maps" \
    || die "redir: cannot load the redirect-only programs"
  veth=$(pod_veth "$mode")
  # shellcheck disable=SC2046  # the key and value bytes are separate words
  bpftool map update pinned "$d/maps/redir_pod" $("$PY" "$UTIL" redirpod "$WORK/$mode/cni-result.json" \
    "$(ne "$mode" node ip -o link show dev "$veth")" "$(ne "$mode" node ip -o link show dev cni0)" \
    "$(nx "$mode" pod ip -o link show dev eth0)") || die "redir: cannot fill redir_pod"
  tc_attach "$mode" "$d/progs/masq_veth_in" "$veth" ingress
  tcx_or_tc "$mode" "$d/progs/masq_up_ingress" eth0 ingress "$PIN_REDIR/links/eth0-ingress"
}
redir_count() { "$PY" "$UTIL" redircount "$(bpftool -j map dump pinned "$PIN_REDIR/v0/maps/redir_count")"; }
fp_egress() {   # fp_egress MODE: the mode's fastpath_egress counter
  ne "$1" node "$PLUGIN" status --json --pin-path "$(pin_of "$1")" >"$WORK/$1/status.json" 2>&1 \
    || die "$1: ebpf-masq status failed: $(head -c 300 "$WORK/$1/status.json")"
  "$PY" "$UTIL" counter "$WORK/$1/status.json" fastpath_egress
}

# Fail early if a mode is not what it claims to be.
check_mode() {
  local mode=$1 ruleset filters fp0="" fp1 rd0="" rd1
  case $mode in ebpf|fast|log) fp0=$(fp_egress "$mode") ;; redir) rd0=$(redir_count) ;; esac
  nx "$mode" pod ping -n -q -c 3 -i 0.05 -W 1 "$EXT_IP" >/dev/null \
    || die "$mode: pod cannot ping ext (for ipt/ebpf/fast: the NAT does not work)"
  if [ -n "$fp0" ]; then   # fast: the pings took the fast path; ebpf: they did not
    fp1=$(fp_egress "$mode")
    [[ $fp0 =~ ^[0-9]+$ && $fp1 =~ ^[0-9]+$ ]] || die "$mode: no fastpath_egress counter in ebpf-masq status"
    case $mode in
      fast) [ "$fp1" -gt "$fp0" ] || die "fast: fastpath_egress did not move during a ping ($fp0 -> $fp1)" ;;
      ebpf|log) [ "$fp1" = "$fp0" ] || die "$mode: fastpath_egress moved ($fp0 -> $fp1), fastPath is on" ;;
    esac
    log "bench: $mode: fastpath_egress $fp0 -> $fp1 during 3 pings"
  fi
  if [ "$mode" = log ]; then   # the ping's pair reached the exporter's JSON log
    for _ in $(seq 30); do [ -s "$WORK/natlog/nat.json" ] && break; sleep 0.1; done
    [ -s "$WORK/natlog/nat.json" ] || die "log: no record in the exporter's JSON log 3 s after a ping: $(tail -c 300 "$WORK/log/log-exporter.log")"
    log "bench: log: $(wc -l <"$WORK/natlog/nat.json") record(s) in the JSON log after 3 pings"
    LOST=$(events_lost)
  fi
  if [ -n "$rd0" ]; then   # redir: the pings and their replies were redirected, both ways
    rd1=$(redir_count)
    "$PY" -c 'import sys; a, b = (list(map(int, x.split())) for x in sys.argv[1:]); sys.exit(not all(y > x for x, y in zip(a, b)))' \
      "$rd0" "$rd1" || die "redir: the redirect counters did not both move during a ping ($rd0 -> $rd1)"
    log "bench: redir: redirected to eth0 / into the pod: $rd0 -> $rd1 during 3 pings"
  fi
  ruleset=$(nx "$mode" node nft list ruleset 2>/dev/null || true)
  filters=$(ne "$mode" node "$PY" "$REPO/integration/lab/bpfhooks.py" eth0 egress)   # TCX programs and tc filters
  case $mode in
    none|hooks|state|redir|ebpf|fast|log) [ -z "$ruleset" ] || die "$mode: node has netfilter rules: $ruleset" ;;
    ipt) grep -q masquerade <<<"$ruleset" || die "ipt: MASQUERADE rule missing" ;;
  esac
  case $mode in
    ebpf|fast|log) grep -q masq_up_egress <<<"$filters" || die "$mode: ebpf-masq is not on the node's eth0 egress" ;;
    hooks) grep -q masq_empty <<<"$filters" || die "hooks: the empty program is not on the node's eth0 egress" ;;
    state) grep -q masq_state <<<"$filters" || die "state: the state-floor program is not on the node's eth0 egress" ;;
    *)    [ -z "$filters" ] || die "$mode: unexpected BPF program on eth0: $filters" ;;
  esac
}

# ---------------------------------------------------------------- measurements
RESULTS=""
record() {   # record ROUND MODE METRIC VALUE(number|null)
  printf '{"round":%s,"mode":"%s","metric":"%s","value":%s}\n' "$1" "$2" "$3" "$4" >>"$RESULTS"
}
show() { printf '  %-5s %-5s %s\n' "$1" "$2" "$3" >&2; }

calc() { "$PY" -c "import sys; a=[None if x=='null' else float(x) for x in sys.argv[2:]]; \
print('null' if None in a else round(eval(sys.argv[1]), 3))" "$@"; }

m_tcp() {   # m_tcp ROUND MODE SECS [norecord]
  local f="$WORK/out/tcp-$2-$1.json" gbps cpu
  timeout $(($3 + 30)) ip netns exec "$(ns "$2" pod)" \
    iperf3 -c "$EXT_IP" -p "$IPERF_PORT" -t "$3" -J >"$f" 2>&1 || true
  [ "${4:-}" = norecord ] && return 0
  read -r gbps cpu < <("$PY" "$UTIL" iperf "$f")
  record "$1" "$2" tcp_gbps "$gbps"; record "$1" "$2" tcp_cpu_s_per_gb "$cpu"
  show tcp "$2" "$gbps Gbit/s, $cpu CPU-s/GB"
}

ext_rx() { nx "$1" ext cat /sys/class/net/eth0/statistics/rx_packets; }

m_udp() {   # m_udp ROUND MODE SECS [norecord]
  local f="$WORK/out/udp-$2-$1.json" rx0 rx1 sent secs cpu rx tx
  rx0=$(ext_rx "$2")
  timeout $(($3 + 30)) ip netns exec "$(ns "$2" pod)" \
    "$TOOL" udp-send "$EXT_IP" "$UDP_PORT" "$3" "$UDP_LEN" >"$f" 2>&1 || true
  rx1=$(ext_rx "$2")
  [ "${4:-}" = norecord ] && return 0
  sent=$("$PY" "$UTIL" get "$f" sent)
  secs=$("$PY" "$UTIL" get "$f" secs)
  cpu=$("$PY" "$UTIL" get "$f" cpu_s)
  rx=$(calc "(a[1]-a[0])/a[2]/1000" "$rx0" "$rx1" "$secs")
  tx=$(calc "a[0]/a[1]/1000" "$sent" "$secs")
  cpu=$(calc "a[0]/a[1]*1e9" "$cpu" "$sent")
  record "$1" "$2" udp_rx_kpps "$rx"; record "$1" "$2" udp_tx_kpps "$tx"
  record "$1" "$2" udp_cpu_ns_pkt "$cpu"
  show udp "$2" "rx $rx kpps (sent $tx kpps), sender CPU $cpu ns/pkt"
}

m_cps() {   # m_cps ROUND MODE SECS [norecord]
  local f="$WORK/out/cps-$2-$1.json" ok fail secs cpu v
  timeout $(($3 + 30)) ip netns exec "$(ns "$2" pod)" \
    "$TOOL" tcp-cps "$EXT_IP" "$CPS_PORT" "$3" >"$f" 2>&1 || true
  [ "${4:-}" = norecord ] && return 0
  ok=$("$PY" "$UTIL" get "$f" ok)
  fail=$("$PY" "$UTIL" get "$f" fail)
  secs=$("$PY" "$UTIL" get "$f" secs)
  cpu=$("$PY" "$UTIL" get "$f" cpu_s)
  v=$(calc "a[0]/a[1]" "$ok" "$secs")
  cpu=$(calc "a[0]/(a[1]+a[2])*1e6" "$cpu" "$ok" "$fail")
  record "$1" "$2" cps "$v"; record "$1" "$2" cps_fail "$fail"; record "$1" "$2" cps_cpu_us_conn "$cpu"
  show cps "$2" "$v conn/s, client CPU $cpu us/conn ($fail failed$( [ "$fail" = 0 ] || echo ": $(tail -c 200 "$f")"))"
}

m_churn() {   # m_churn ROUND MODE SECS
  local f="$WORK/out/churn-$2-$1.json" ok fail stalled secs v
  timeout $(($3 + 30)) ip netns exec "$(ns "$2" pod)" \
    "$TOOL" tcp-churn "$EXT_IP" "$CHURN_PORT" "$3" 2 >"$f" 2>&1 || true
  ok=$("$PY" "$UTIL" get "$f" ok)
  fail=$("$PY" "$UTIL" get "$f" fail)
  stalled=$("$PY" "$UTIL" get "$f" stalled)
  secs=$("$PY" "$UTIL" get "$f" secs)
  v=$(calc "a[0]/a[1]" "$ok" "$secs")
  record "$1" "$2" churn "$v"; record "$1" "$2" churn_fail "$(calc "a[0]+a[1]" "$fail" "$stalled")"
  show churn "$2" "$v conn/s ($fail failed, $stalled stalled > 1 s$( [ "$fail$stalled" = 00 ] || echo ": $(tail -c 200 "$f")"))"
}

m_ping() {  # m_ping ROUND MODE
  # Two flavours. Back-to-back (-A: next echo as soon as the reply is in,
  # 10x --pings of them, it takes milliseconds): on veths the whole round trip
  # runs in the sender's softirq, so the RTT is the path's CPU cost; ping
  # prints whole microseconds, hence the interquartile mean, not the median.
  # 10 ms apart (median): what sparse traffic sees, dominated by waking an
  # idle CPU, so mostly noise.
  local f v
  f="$WORK/out/ping-hot-$2-$1.txt"
  ip netns exec "$(ns "$2" pod)" ping -n -c $((PINGS * 10)) -A -W 1 "$EXT_IP" >"$f" 2>&1 || true
  v=$("$PY" "$UTIL" ping "$f" iqm)
  record "$1" "$2" ping_hot_us "$v"; show ping "$2" "back-to-back $v us"
  f="$WORK/out/ping-$2-$1.txt"
  ip netns exec "$(ns "$2" pod)" ping -n -c "$PINGS" -i 0.01 -W 1 "$EXT_IP" >"$f" 2>&1 || true
  v=$("$PY" "$UTIL" ping "$f")
  record "$1" "$2" ping_us "$v"; show ping "$2" "10 ms apart $v us"
}

# The bpf_stats phase: the modes with programs (hooks, redir, ebpf, fast), outside the timed comparisons.
progstats() { "$PY" "$UTIL" progstats "$(echo "$(pin_of "$1")"/v*/progs)"; }
bpf_phase() {   # bpf_phase ROUND MODE
  local r=$1 mode=$2 s0 s1 s2 s3
  [ -n "$STATS_OLD" ] || STATS_OLD=$(sysctl -n kernel.bpf_stats_enabled)
  sysctl -qw kernel.bpf_stats_enabled=1
  s0=$(progstats "$mode"); m_udp "$r" "$mode" "$STATS_SECS" norecord
  s1=$(progstats "$mode"); m_tcp "$r" "$mode" "$STATS_SECS" norecord
  s2=$(progstats "$mode"); m_cps "$r" "$mode" "$STATS_SECS" norecord
  s3=$(progstats "$mode")
  sysctl -qw kernel.bpf_stats_enabled="$STATS_OLD"
  "$PY" "$UTIL" bpfdelta "$s0" "$s1" "$r" udp "$mode" >>"$RESULTS"
  "$PY" "$UTIL" bpfdelta "$s1" "$s2" "$r" tcp "$mode" >>"$RESULTS"
  "$PY" "$UTIL" bpfdelta "$s2" "$s3" "$r" cps "$mode" >>"$RESULTS"
  show bpf "$mode" "$("$PY" "$UTIL" bpfshow "$RESULTS" "$r" "$mode") ns/run"
}

# ---------------------------------------------------------------- add-latency mode
main_add_latency() {
  check_prereqs
  WORK=$(mktemp -d /tmp/ebpf-masq-bench.XXXXXX)
  TOOL=$WORK/benchtool
  gcc -O2 -Wall -o "$TOOL" "${TOOL_SRC[@]}"
  STATS_OLD=$(sysctl -n kernel.bpf_stats_enabled)   # addlat.py restores it too; cleanup() is the backstop
  [ "$STATS_OLD" = 0 ] ||
    log "bench: warning: kernel.bpf_stats_enabled is already 1 (someone else is measuring?)"
  log "bench: id $ID, plugin $PLUGIN, add-latency: reps $REPS, first $FIRST, UDP ${DURATION}s, work dir $WORK"
  local json_args=()
  [ -z "$JSON_OUT" ] || json_args=(--json "$JSON_OUT")
  "$PY" "$HERE/bench/addlat.py" --prefix "$PFX" --pin "$PIN" --work "$WORK" --plugin "$(readlink -f "$PLUGIN")" \
    --tool "$TOOL" --reps "$REPS" --first "$FIRST" --secs "$DURATION" "${json_args[@]}"
}

# ---------------------------------------------------------------- main
main() {
  local t_start=$SECONDS r order mode test load0
  check_prereqs
  load0=$(cut -d' ' -f1-3 /proc/loadavg)   # other work on the box = noise; say how much
  WORK=$(mktemp -d /tmp/ebpf-masq-bench.XXXXXX)
  mkdir -p "$WORK/log" "$WORK/out" "$WORK/cni-bin"
  RESULTS=$WORK/results.jsonl
  : >"$RESULTS"
  # `type: ebpf-masq` resolves through CNI_PATH to the binary under test
  ln -s "$(readlink -f "$PLUGIN")" "$WORK/cni-bin/ebpf-masq"
  TOOL=$WORK/benchtool
  gcc -O2 -Wall -o "$TOOL" "${TOOL_SRC[@]}"
  clang -O2 -target bpf -I"/usr/include/$(gcc -print-multiarch)" -c "$HERE/bench/empty.bpf.c" -o "$WORK/empty.o"
  clang -O2 -g -target bpf -I"/usr/include/$(gcc -print-multiarch)" -c "$HERE/bench/state.bpf.c" -o "$WORK/state.o"
  clang -O2 -g -target bpf -I"/usr/include/$(gcc -print-multiarch)" -c "$HERE/bench/redir.bpf.c" -o "$WORK/redir.o"

  [ "$(sysctl -n kernel.bpf_stats_enabled)" = 0 ] ||
    log "bench: warning: kernel.bpf_stats_enabled is already 1: every ebpf-masq test pays the stats' clock reads"
  log "bench: id $ID, plugin $PLUGIN, rounds $ROUNDS, duration ${DURATION}s, work dir $WORK"
  for mode in "${MODES[@]}"; do setup_mode "$mode"; done
  for mode in "${MODES[@]}"; do
    case $mode in ebpf|fast|log) ;; *) continue ;; esac
    [ -d "$(echo "$(pin_of "$mode")"/v*/progs)" ] || die "$mode: no pinned programs under $(pin_of "$mode")"
  done
  for mode in "${MODES[@]}"; do check_mode "$mode"; done

  log "bench: warm-up (ARP, NAT state, caches; not recorded)"
  for mode in "${MODES[@]}"; do m_tcp 0 "$mode" 1 norecord; m_udp 0 "$mode" 1 norecord; done

  for r in $(seq "$ROUNDS"); do
    if [ "$r" = 1 ]; then order=("${MODES[@]}"); else mapfile -t order < <(printf '%s\n' "${MODES[@]}" | shuf); fi
    log "bench: round $r/$ROUNDS, order ${order[*]}"
    for test in tcp udp cps churn ping; do
      for mode in "${order[@]}"; do
        case $test in
          ping) m_ping "$r" "$mode" ;;
          *) "m_$test" "$r" "$mode" "$DURATION"; sleep 0.3 ;;  # let softirq backlogs drain
        esac
        [ "$mode" != log ] || natlog_lost "$r" "$test"   # outside the timed test
      done
    done
    for mode in "${order[@]}"; do case $mode in none|ipt) ;; *) bpf_phase "$r" "$mode" ;; esac; done
  done

  # The scale target: ports tried per new flow with the range 90 % full (BPF_PROG_TEST_RUN).
  log "bench: port allocation (microbench port_allocation_cost)"
  (cd "$REPO" && cargo test --release --test microbench -- --ignored --nocapture --exact port_allocation_cost) \
    >"$WORK/portalloc.txt" 2>&1 || die "port_allocation_cost failed: $(tail -5 "$WORK/portalloc.txt")"
  "$PY" "$UTIL" portalloc "$WORK/portalloc.txt" >>"$RESULTS"

  # Did a NAT drop or fail anything (it would explain a slow number)?
  for mode in ebpf fast; do
    ne "$mode" node "$PLUGIN" status --json --pin-path "$(pin_of "$mode")" >"$WORK/$mode-status.json" 2>&1 || true
  done
  nx ipt node cat /proc/net/stat/nf_conntrack >"$WORK/ct-stat.txt" 2>&1 || true
  "$PY" "$UTIL" health "$WORK/ebpf-status.json" "$WORK/fast-status.json" "$WORK/ct-stat.txt" >"$WORK/health.json"
  echo null >"$WORK/natlog.json"
  if [ "${NATLOG:-0}" = 1 ]; then   # the log mode's evidence: lost events, what the exporter wrote
    ne log node "$PLUGIN" status --json --pin-path "$PIN_LOG" >"$WORK/log-status.json" 2>&1 || true
    stop_natlog >"$WORK/natlog.json"
    log "bench: log: $(cat "$WORK/natlog.json")"
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (d["json_records"] > 0 and (d["ipfix_records_at_collector"] or 0) > 0))' \
      "$WORK/natlog.json" || die "log: the exporter wrote no records (JSON log or collector): $(cat "$WORK/natlog.json")"
  fi

  "$PY" - "$WORK/meta.json" <<EOF
import json, os, platform, sys
json.dump({"rounds": $ROUNDS, "duration_s": $DURATION, "pings": $PINGS, "udp_len": $UDP_LEN,
           "stats_phase_s": $STATS_SECS, "kernel": platform.release(), "cpus": os.cpu_count(),
           "plugin": "$PLUGIN", "iptables": "$(iptables -V)",
           "bridge_nf_call_iptables": "$(nx ipt node sysctl -n net.bridge.bridge-nf-call-iptables 2>/dev/null || echo n/a)",
           "loadavg_start": "$load0", "loadavg_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
           "health": json.load(open("$WORK/health.json")), "natlog": json.load(open("$WORK/natlog.json")),
           "runtime_s": $((SECONDS - t_start))}, open(sys.argv[1], "w"))
EOF
  if [ -n "$JSON_OUT" ]; then
    "$PY" "$UTIL" report "$RESULTS" "$WORK/meta.json" --json "$JSON_OUT"
  else
    "$PY" "$UTIL" report "$RESULTS" "$WORK/meta.json"
  fi
}

# ---------------------------------------------------------------- sweep mode
sweep_probe() {   # sweep_probe LABEL: the gap probe on each CPU, one line per CPU
  local label=$1 cpu
  for cpu in $(seq 0 $(($(nproc) - 1))); do
    "$PY" "$UTIL" sweepline "$label" "$cpu" "$(taskset -c "$cpu" "$PY" "$HERE/bench/gap.py" "$SWEEP_SECS")"
  done
}

sweep_status() {
  ne ebpf node "$PLUGIN" status --json --pin-path "$PIN" >"$WORK/status.json"
  "$PY" "$UTIL" sweepstatus "$WORK/status.json"
}

main_sweep() {
  check_prereqs
  WORK=$(mktemp -d /tmp/ebpf-masq-bench.XXXXXX)
  mkdir -p "$WORK/log" "$WORK/cni-bin"
  ln -s "$(readlink -f "$PLUGIN")" "$WORK/cni-bin/ebpf-masq"
  TOOL=$WORK/benchtool
  gcc -O2 -Wall -o "$TOOL" "${TOOL_SRC[@]}"
  SWEEP_SECS=$DURATION
  [ "$DURATION_SET" = 1 ] || SWEEP_SECS=5
  log "bench: id $ID, plugin $PLUGIN, sweep probe ${SWEEP_SECS}s per CPU and state, work dir $WORK"
  setup_mode ebpf dual
  echo "expiry sweep stall probe (natMaxEntries default, $(nproc) CPUs, kernel $(uname -r))"
  sweep_probe "no pair (sweep not armed)"
  sweep_status
  nx ebpf pod ping -c 1 -W 1 "$EXT_IP" >/dev/null || die "ebpf: ping through the node failed"
  sleep 1
  sweep_probe "one IPv4 pair (nat4_fwd shards)"
  sweep_status
  nx ebpf pod ping -6 -c 1 -W 1 fd00:e::2 >/dev/null || die "ebpf: IPv6 ping through the node failed"
  sleep 1
  sweep_probe "IPv4 + IPv6 pairs (both maps)"
  sweep_status
  # A run's own duration with one pair and with the table nearly full (the
  # harness puts 983,040 pairs in: ~240 MB of kernel memory for a few seconds).
  echo
  (cd "$REPO" && cargo test --release --test microbench -- --ignored --nocapture --test-threads=1 sweep_run_cost 2>&1) |
    grep -E "^(expiry sweep|one pair|983,041)" || die "sweep_run_cost failed"
}

if [ "${SWEEP:-0}" = 1 ]; then main_sweep
elif [ "$ADDLAT" = 1 ]; then main_add_latency
else main; fi
