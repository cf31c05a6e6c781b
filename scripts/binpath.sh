#!/usr/bin/env bash
# Print where `cargo build --release` puts the ebpf-masq binary. .cargo/config.toml
# names the target (the binary is static: crt-static must not reach the host's
# proc-macros), so it lands under target/<host tuple>/release/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
echo "${CARGO_TARGET_DIR:-$repo/target}/$(rustc --print host-tuple)/release/ebpf-masq"
