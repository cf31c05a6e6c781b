#!/usr/bin/env bash
# Build cnitool (not packaged in Debian) offline from Debian's source package
# golang-github-appc-cni, against the libcni of golang-github-appc-cni-dev,
# and install it to /usr/local/bin/cnitool. The system's apt config is untouched:
# deb-src lists live in a private, temporary apt directory.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "build-cnitool: must run as root" >&2; exit 1; }
for c in go apt-get tar; do
  command -v "$c" >/dev/null || { echo "build-cnitool: $c missing (run scripts/install-deps.sh)" >&2; exit 1; }
done
[ -d /usr/share/gocode/src/github.com/containernetworking/cni/libcni ] ||
  { echo "build-cnitool: golang-github-appc-cni-dev missing" >&2; exit 1; }

work=$(mktemp -d /tmp/build-cnitool.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"   # apt downloads as the _apt user
apt_dir=$work/apt
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/src"
touch "$apt_dir/sources.list"
chown -R _apt:root "$apt_dir/lists" "$apt_dir/cache" "$work/src" 2>/dev/null || true

# deb-src entries derived from the machine's own sources (deb822 and one-line).
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
  sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$apt_dir/sources.list.d/$(basename "$f")"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  sed -nE 's/^[[:space:]]*deb([[:space:]])/deb-src\1/p' "$f" >>"$apt_dir/sources.list"
done

apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
)
echo "build-cnitool: fetching deb-src lists (private apt dir $apt_dir)"
apt-get -q "${apt_opts[@]}" update >"$work/update.log" 2>&1 ||
  { cat "$work/update.log" >&2; exit 1; }

# Prefer the source version matching the installed libcni.
pkg=golang-github-appc-cni
ver=$(dpkg-query -W -f='${Version}' golang-github-appc-cni-dev 2>/dev/null || true)
cd "$work/src"
echo "build-cnitool: apt-get source --download-only $pkg${ver:+=$ver}"
apt-get -q "${apt_opts[@]}" source --download-only "$pkg${ver:+=$ver}" ||
  apt-get -q "${apt_opts[@]}" source --download-only "$pkg"

orig=$(ls "$pkg"_*.orig.tar.* | head -n1)
mkdir tree
tar -xf "$orig" -C tree --strip-components=1
main=tree/cnitool/cnitool.go
[ -f "$main" ] || { echo "build-cnitool: $main not in $orig" >&2; exit 1; }

echo "build-cnitool: go build $main"
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$work/gocache" GOFLAGS= CGO_ENABLED=0 \
  go build -o "$work/cnitool" "$main"
install -m 0755 "$work/cnitool" /usr/local/bin/cnitool

# cnitool with no arguments prints its usage and exits 1: check it ran at all.
out=$(/usr/local/bin/cnitool 2>&1 || true)
[[ $out == *"cnitool: Add, check, or remove network interfaces"* ]] ||
  { echo "build-cnitool: built cnitool does not run as expected:" >&2; echo "$out" >&2; exit 1; }
echo "build-cnitool: installed /usr/local/bin/cnitool (from $(basename "$orig"))"
