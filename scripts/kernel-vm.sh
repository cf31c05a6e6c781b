#!/usr/bin/env bash
# The data plane on another kernel: boots Debian 12's Linux 6.1 LTS in a virtual machine
# (virtme-ng, QEMU's software emulation: /dev/kvm here cannot boot a stock kernel) and loads
# every BPF program there through `ebpf-masq apply` on a veth uplink (6.1 has no TCX: tc clsact),
# then sends traffic through it (integration/vm/e2e.sh: pods over IPv4 and IPv6, a tunnel rule,
# the bridge plugin's iptables MASQUERADE beside it, a DEL, an upgrade from the previous layout).
# The kernel package is downloaded and extracted under target/vm/, never installed.
#   scripts/kernel-vm.sh   build (release), boot, load, traffic; exit 0 when all three programs
#                          load and every traffic check passes
# Needs root (apt-get, the guest's bpf); a few minutes after the first download.
set -euo pipefail
cd "$(dirname "$0")/.."
VM=$PWD/target/vm
mkdir -p "$VM/out"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v udevadm >/dev/null || need+=(udev)
python3 -c 'import venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
[ -x "$VM/venv/bin/vng" ] || { python3 -m venv "$VM/venv" && "$VM/venv/bin/pip" install -q virtme-ng==1.42; }
if ! ls "$VM"/k61/boot/vmlinuz-6.1.0-* >/dev/null 2>&1; then
	pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' | awk '{print $1}' | sort -V | tail -1)
	[ -n "$pkg" ] || { apt-get update -qq; pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' | awk '{print $1}' | sort -V | tail -1); }
	(cd "$VM" && apt-get download "$pkg" && dpkg-deb -x "$pkg"_*.deb k61 && rm -f "$pkg"_*.deb)
fi
kernel=$(ls "$VM"/k61/boot/vmlinuz-6.1.0-* | head -1)
mods=$(ls -d "$VM"/k61/lib/modules/6.1.0-* | head -1)
bin=$(scripts/binpath.sh 2>/dev/null || echo "$PWD/target/x86_64-unknown-linux-gnu/release/ebpf-masq")
[ -x "$bin" ] || cargo build --release --locked
# What the guest writes, never a previous run's: a guest that does not boot leaves no result.
rm -f "$VM"/out/result "$VM"/out/run.log "$VM"/out/e2e.result "$VM"/out/e2e.log
start=$(date +%s)
"$VM/venv/bin/vng" --run "$kernel" --disable-kvm --cpus 2 --memory 2G --rwdir "$VM/out" \
	--exec "$PWD/integration/vm/guest.sh $bin $VM/out $mods" >"$VM/out/vng.log" 2>&1 || true
echo "kernel-vm: $(basename "$kernel") in $(( $(date +%s) - start )) s: $(cat "$VM/out/result" 2>/dev/null || echo 'no result'); $(tail -1 "$VM/out/e2e.log" 2>/dev/null)"
grep -q '^LOADED 3' "$VM/out/result" 2>/dev/null || { tail -50 "$VM/out/run.log" "$VM/out/vng.log" 2>/dev/null; exit 1; }
grep -q '^E2E rc=0$' "$VM/out/e2e.result" 2>/dev/null || { cat "$VM/out/e2e.log" 2>/dev/null; tail -20 "$VM/out/vng.log"; exit 1; }
grep -E '^(PASS|FAIL)' "$VM/out/e2e.log"
