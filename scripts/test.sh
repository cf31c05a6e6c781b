#!/usr/bin/env bash
# Run every test of ebpf-masq on this machine, as root:
#   1. unit tests (config, prevResult, CIDR/port logic, netlink in private netns)
#   2. BPF_PROG_TEST_RUN tests on crafted packets through the real programs
#   3. end-to-end tests in throwaway network namespaces (cnitool, real traffic)
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

echo "== end-to-end tests (pytest, network namespaces)"
/usr/bin/python3 -m pytest integration/ -q -p no:cacheprovider --durations=30 "$@"
