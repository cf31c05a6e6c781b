#!/usr/bin/env bash
# Soak the data plane: the load parts of the end-to-end suite (churn, port exhaustion,
# map pressure, hostile input), longer and bigger than in CI. As root:
#
#   scripts/soak.sh                 # 60 s of churn
#   scripts/soak.sh --seconds 600   # 10 minutes of churn
#   scripts/soak.sh --seconds 120 -k churn -x    # anything after the options goes to pytest
#
# Sets (unless already set in the environment):
#   EBPF_MASQ_CHURN_SECONDS   how long the churn test opens connections (CI: 20)
#   EBPF_MASQ_MAP_FLOWS       UDP flows per map-pressure flood (CI: 2600)
#   EBPF_MASQ_HOSTILE_ROUNDS  repetitions of every hostile volley (CI: 1)
#   EBPF_MASQ_HOSTILE_SEED    seed of the random frames (CI: fixed)
# and, with --fuzz, runs the config property tests with EBPF_MASQ_FUZZ_CASES_MULT cases
# per property multiplied (default 20).
# Uses the release binary (scripts/binpath.sh, or EBPF_MASQ_BIN); builds it if it is missing.
# Everything runs in throwaway namespaces; nothing touches the machine's interfaces.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "soak.sh: must run as root (network namespaces, bpffs)" >&2; exit 1; }
cd "$(dirname "$0")/.."

seconds=60
fuzz=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
        --seconds=*) seconds="${1#*=}"; shift ;;
        --fuzz) fuzz=1; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
case "$seconds" in ''|*[!0-9]*) echo "soak.sh: --seconds wants a whole number, got '$seconds'" >&2; exit 2 ;; esac

export EBPF_MASQ_CHURN_SECONDS="${EBPF_MASQ_CHURN_SECONDS:-$seconds}"
export EBPF_MASQ_MAP_FLOWS="${EBPF_MASQ_MAP_FLOWS:-$(( seconds >= 300 ? 8192 : 4096 ))}"
export EBPF_MASQ_HOSTILE_ROUNDS="${EBPF_MASQ_HOSTILE_ROUNDS:-$(( seconds / 30 > 1 ? seconds / 30 : 2 ))}"
export EBPF_MASQ_HOSTILE_SEED="${EBPF_MASQ_HOSTILE_SEED:-$RANDOM$RANDOM}"

bin="${EBPF_MASQ_BIN:-$(scripts/binpath.sh)}"
if [ ! -x "$bin" ]; then
    echo "== build"
    cargo build --release
fi

if [ "$fuzz" = 1 ]; then
    echo "== config property tests, ${EBPF_MASQ_FUZZ_CASES_MULT:-20}x cases"
    EBPF_MASQ_FUZZ_CASES_MULT="${EBPF_MASQ_FUZZ_CASES_MULT:-20}" \
        cargo test --release --test fuzz_config
fi

echo "== soak: churn ${EBPF_MASQ_CHURN_SECONDS}s, map floods of ${EBPF_MASQ_MAP_FLOWS} flows," \
     "hostile volleys x${EBPF_MASQ_HOSTILE_ROUNDS} (seed ${EBPF_MASQ_HOSTILE_SEED})"
start=$(date +%s)
rc=0
/usr/bin/python3 -m pytest integration/test_churn.py integration/test_hostile.py \
    -p no:cacheprovider -rxXfE -s "$@" || rc=$?
echo "== soak finished in $(( $(date +%s) - start ))s (pytest exit $rc)"
exit "$rc"
