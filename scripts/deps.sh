#!/usr/bin/env bash
# deps.sh - installs the Debian packages a make target needs, only those missing.
# Usage: scripts/deps.sh build|test|bench|docker ...   (root, or sudo without a password)
set -euo pipefail

want=()
for kind in "$@"; do
    case "$kind" in
    build) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev libsystemd-dev
                  libssl-dev xxd) ;;
    test) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev libcmocka-dev
                 libsystemd-dev libssl-dev openssl xxd python3 python3-pytest python3-venv python3-wheel-whl
                 groff-base python3-prometheus-client chromium clang libclang-rt-14-dev
                 clang-format nutcracker python3-pymemcache libmemcached-tools haproxy python3-yaml) ;;
    bench) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev
                  libsystemd-dev libssl-dev openssl xxd redis-server memcached coreutils) ;;
    docker) want+=(podman buildah debootstrap runc slirp4netns uidmap) ;;
    *) echo "deps.sh: unknown kind '$kind'" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${want[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps.sh: need root to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
