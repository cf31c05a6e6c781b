#!/usr/bin/env bash
# Install (idempotently) everything ebpf-masq needs to build and to run its
# integration tests on Debian bookworm, build cnitool if missing, mount bpffs.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "install-deps: must run as root" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)

pkgs=(
  # BPF toolchain (clang brings libclang1-14, which bindgen in plugin/core/build.rs loads)
  clang llvm libbpf-dev bpftool
  # networking tools used by the plugin and the tests
  iproute2 iptables nftables iperf3 tcpdump socat ncat iputils-ping procps
  util-linux kmod wireguard-tools wireguard-go busybox-static
  # test runner (Debian's python, not pyenv's)
  python3 python3-scapy python3-pytest python3-pytest-xdist python3-prometheus-client python3-pip python3-yaml
  # CNI reference plugins + what build-cnitool.sh needs
  containernetworking-plugins golang-go golang-github-appc-cni-dev dpkg-dev
  tar gzip xz-utils ca-certificates
  # real container runtimes for integration/test_runtimes.py (podman pulls conmon)
  podman containerd runc
  # a STUN server and an RFC 5780 behaviour-discovery client (integration/test_stun.py)
  coturn
  # real IPFIX collectors for the NAT session log (integration/test_natlog.py)
  nfdump pmacct
  # netfilter's own connection events, the yardstick beside the NAT log (test_natlog.py)
  conntrack
  # a second kernel in a virtual machine (scripts/kernel-vm.sh: virtme-ng needs udev, and a venv for it)
  qemu-system-x86 udev python3-venv
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  # Refresh package lists only when they are older than a day (or absent).
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 -print -quit 2>/dev/null)" ]; then
    echo "install-deps: apt-get update"
    apt-get update -q
  fi
  echo "install-deps: installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    echo "install-deps: install failed, retrying after apt-get update"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
else
  echo "install-deps: all ${#pkgs[@]} packages already installed"
fi

/usr/bin/python3 -m pip show -q kubernetes-validate >/dev/null 2>&1 || /usr/bin/python3 -m pip install -q --break-system-packages kubernetes-validate  # offline Kubernetes schemas (integration/test_install.py)
/usr/bin/python3 -m pip show -q container-runtime-interface-api >/dev/null 2>&1 || /usr/bin/python3 -m pip install -q --break-system-packages container-runtime-interface-api  # a CRI v1 client, with grpcio (integration/test_cri.py)

if command -v cnitool >/dev/null 2>&1; then
  echo "install-deps: cnitool present ($(command -v cnitool))"
else
  echo "install-deps: building cnitool"
  "$here/build-cnitool.sh"
fi

if mountpoint -q /sys/fs/bpf; then
  echo "install-deps: bpffs already mounted at /sys/fs/bpf"
else
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf
  echo "install-deps: mounted bpffs at /sys/fs/bpf"
fi
