#!/usr/bin/env bash
# Run every test of ebpf-masq on this machine, as root:
#   1. unit tests (config, prevResult, CIDR/port logic, netlink in private netns)
#   2. BPF_PROG_TEST_RUN tests on crafted packets through the real programs
#   3. every BPF program loaded on Linux 6.1 in a virtual machine (scripts/kernel-vm.sh)
#   4. end-to-end tests in throwaway network namespaces (cnitool, real traffic)
# It installs what it needs first (scripts/install-deps.sh). Nothing is skipped:
# a test that cannot run fails.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "test.sh: must run as root (network namespaces, bpffs)" >&2; exit 1; }
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "== build"
cargo build --release --locked

echo "== unit and BPF_PROG_TEST_RUN tests (cargo test)"
cargo test --release --locked -- --test-threads=2

echo "== the data plane on Linux 6.1 (a virtual machine)"
vm_rc=0
scripts/kernel-vm.sh || vm_rc=$?

# Each test builds its own namespaces, pins, temp and cache entries, so most run side by side
# (pytest-xdist, EBPF_MASQ_TEST_JOBS workers); the tests marked `serial` (they count stalls,
# refusals or what a rate allows: they need the machine to themselves) run after, one at a time.
# Both passes always run; the script fails if either did. Each prints its slowest tests.
jobs=${EBPF_MASQ_TEST_JOBS:-4}
rc=$vm_rc
pass() {
  local r=0
  /usr/bin/python3 -m pytest integration/ -q -p no:cacheprovider --durations=30 "$@" || r=$?
  [ "$r" = 5 ] && r=0  # nothing selected in this pass (a filter in "$@")
  [ "$r" = 0 ] || rc=$r
}
echo "== end-to-end tests in parallel (pytest -n $jobs, network namespaces)"
pass -n "$jobs" -m "not serial" "$@"
echo "== end-to-end tests that need the whole machine, one at a time"
pass -m serial "$@"
exit $rc
