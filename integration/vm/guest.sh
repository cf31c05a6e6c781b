#!/bin/bash
# What scripts/kernel-vm.sh runs inside the virtual machine: load.sh (every program loads and
# passes this kernel's verifier), then, if they did, e2e.sh on the data plane load.sh pinned
# (traffic through it). Writes to $OUT: load.sh's files, e2e.log, e2e.result ("E2E rc=N").
# Usage (inside the guest): guest.sh BIN OUT KERNEL_MODULES_DIR
BIN=$1 OUT=$2 MODS=$3
HERE=$(dirname "$0")
rm -f "$OUT"/e2e.log "$OUT"/e2e.result
"$HERE/load.sh" "$BIN" "$OUT" "$MODS"
grep -q '^LOADED 3' "$OUT/result" || exit 1
"$HERE/e2e.sh" "$BIN" /sys/fs/bpf/ebpf-masq >"$OUT/e2e.log" 2>&1
echo "E2E rc=$?" >"$OUT/e2e.result"
