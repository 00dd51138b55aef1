#!/usr/bin/env bash
# Builds Weir's container image from the release binary: assembles a root filesystem (the binary,
# the libraries `ldd` names, the CA bundle, a non-root user) in target/image and runs
# `podman build` on deploy/container/Containerfile, FROM scratch: nothing is pulled.
#
#   deploy/container/build.sh [WEIR_BIN]     # default target/release/weir
#   IMAGE=localhost/weir:dev deploy/container/build.sh
#
# Podman's settings for this machine (runc, cgroupfs) come from deploy/container/containers.conf
# unless CONTAINERS_CONF is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:-$repo/target/release/weir}
version=$("$bin" --version | awk '{print $2}')
image=${IMAGE:-localhost/weir:$version}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
ctx=${CARGO_TARGET_DIR:-$repo/target}/image
rootfs=$ctx/rootfs

rm -rf "$ctx"
mkdir -p "$rootfs"/{usr/bin,etc/ssl/certs,var/lib,tmp} "$ctx/data"
# The data directory is copied on its own, to give it to the broker's user (Containerfile).
touch "$ctx/data/.weir-data-dir"
cp "$here/Containerfile" "$ctx/"
# Debug info out (a fifth of the size), symbols kept: a panic's backtrace still names functions.
objcopy --strip-debug "$bin" "$rootfs/usr/bin/weir"
# The shared libraries the binary loads, at the paths it looks for them.
for lib in $(ldd "$bin" | awk '/=>/ {print $3} /^[[:space:]]*\/lib/ {print $1}'); do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nweir:x:65532:65532:weir:/var/lib/weir:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nweir:x:65532:\n' > "$rootfs/etc/group"
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
chmod 1777 "$rootfs/tmp"

podman build --quiet --tag "$image" --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)" \
  -f "$ctx/Containerfile" "$ctx" >/dev/null
size=$(podman image inspect "$image" --format '{{.Size}}')
echo "$image: $((size / 1024 / 1024)) MiB"
