#!/usr/bin/env bash
# Build a tiny container image from Debian's busybox-static, locally (no registry):
#   make-test-image.sh OUTDIR [IMAGE_NAME [CMD_JSON]]
# writes
#   OUTDIR/rootfs.tar   the root filesystem (for `podman import`)
#   OUTDIR/oci.tar      an OCI image layout of it, one uncompressed layer, named
#                       IMAGE_NAME (default localhost/ebpf-masq-test:latest)
#                       (for `ctr image import`, `podman load`)
# CMD_JSON is the image's default command (default ["/bin/sh"]); a CRI sandbox
# image must block forever, e.g. '["/bin/sleep","2147483647"]'.
# The rootfs holds /bin/busybox and applet symlinks (sh, ping, nc, wget, ip, ...).
# The output is reproducible: same busybox, same bytes, same digests.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [IMAGE_NAME]" >&2; exit 2; }
out=$1
name=${2:-localhost/ebpf-masq-test:latest}
cmd=${3:-'["/bin/sh"]'}
busybox=/bin/busybox
[ -x "$busybox" ] || { echo "make-test-image: $busybox missing (apt-get install busybox-static)" >&2; exit 1; }
{ ldd "$busybox" 2>&1 || true; } | grep -q 'not a dynamic executable' \
  || { echo "make-test-image: $busybox is not static (install busybox-static)" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- rootfs ---------------------------------------------------------------
root=$work/rootfs
mkdir -p "$root"/{bin,dev,proc,sys,etc,tmp,root,run,var}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in sh ash ping nc wget ip cat echo ls sleep hostname ifconfig route sha256sum true false \
              env id ps grep sed head tail wc tr cut mkdir rm; do
  ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
: > "$root/etc/hosts"
: > "$root/etc/resolv.conf"

tar_opts=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix
          --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
tar "${tar_opts[@]}" -C "$root" -cf "$out/rootfs.tar" .

# --- OCI image layout -----------------------------------------------------
oci=$work/oci
blobs=$oci/blobs/sha256
mkdir -p "$blobs"

put_blob() {  # put_blob FILE -> prints "sha256:<hex> <size>", stores the blob
  local hex size
  hex=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  cp "$1" "$blobs/$hex"
  echo "sha256:$hex $size"
}

case $(dpkg --print-architecture 2>/dev/null || uname -m) in
  amd64|x86_64) arch=amd64 ;;
  arm64|aarch64) arch=arm64 ;;
  armhf|armel|arm*) arch=arm ;;
  i386|i686) arch=386 ;;
  ppc64el|ppc64le) arch=ppc64le ;;
  s390x) arch=s390x ;;
  riscv64) arch=riscv64 ;;
  *) arch=$(dpkg --print-architecture) ;;
esac

read -r layer_digest layer_size < <(put_blob "$out/rootfs.tar")

printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{"created_by":"scripts/make-test-image.sh (busybox-static)"}]}' \
  "$arch" "$cmd" "$layer_digest" > "$work/config.json"
read -r config_digest config_size < <(put_blob "$work/config.json")

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$work/manifest.json"
read -r manifest_digest manifest_size < <(put_blob "$work/manifest.json")

tag=${name##*:}
[ "$tag" != "$name" ] && [[ "$tag" != */* ]] || tag=latest
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest_digest" "$manifest_size" "$arch" "$name" "$tag" > "$oci/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
tar "${tar_opts[@]}" -C "$oci" -cf "$out/oci.tar" .

echo "make-test-image: $out/rootfs.tar ($layer_size bytes), $out/oci.tar ($name, manifest $manifest_digest)"
