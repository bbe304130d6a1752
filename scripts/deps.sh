#!/usr/bin/env bash
# deps.sh - installs the Debian packages a make target needs, only those missing, after
# saying which, why, and how many packages apt will install with their dependencies.
# Usage: scripts/deps.sh build|test|bench|docker ...   (root, or sudo without a password)
set -euo pipefail

# why[package]: what it is for; one line each, printed before anything is installed.
declare -A why=(
    [gcc]="C compiler" [libc6-dev]="C library headers" [make]="the build"
    [pkg-config]="finds the libraries' flags" [xxd]="builds the page into the binary"
    [libevent-dev]="event loop, HTTP server" [libxxhash-dev]="the key hash"
    [libinih-dev]="config file parser" [libsystemd-dev]="sd_notify"
    [libssl-dev]="TLS listener" [openssl]="test and bench certificates"
    [libcmocka-dev]="unit tests" [python3]="integration tests, bench drivers"
    [python3-pytest]="integration tests" [python3-venv]="install test of the Python client"
    [python3-wheel-whl]="install test of the Python client"
    [groff-base]="man page test" [python3-prometheus-client]="/metrics parsed by the real client"
    [chromium]="page tests in a headless browser (large: pulls in ~200 packages)"
    [clang]="fuzz harnesses (libFuzzer)" [libclang-rt-14-dev]="libFuzzer runtime"
    [clang-format]="format check" [nutcracker]="twemproxy in front of the memcached port"
    [python3-pymemcache]="memcached port against a real client"
    [python3-redis]="RESP port against redis-py's bf() API" [redis-tools]="redis-cli against the RESP port"
    [libmemcached-tools]="memccapable, memcached's conformance test"
    [redis-server]="bench-net's Redis rows" [memcached]="bench-net's memcached row"
    [coreutils]="dd, timeout" [libedit-dev]="bloomd-cli's line editing"
    [tmux]="bloomd-cli's interactive test" [haproxy]="failover test: HAProxy checks ROLE"
    [python3-yaml]="checks the Kubernetes manifests" [netcat-openbsd]="nc, as the docs use it"
    [strace]="slow fdatasyncs injected (DROP durability test)"
    [podman]="docker-test: runs the image" [buildah]="docker-test: builds the image"
    [debootstrap]="docker-test: the base image" [runc]="docker-test: container runtime"
    [slirp4netns]="docker-test: rootless network" [uidmap]="docker-test: user namespaces"
)

want=()
for kind in "$@"; do
    case "$kind" in
    build) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev libsystemd-dev
                  libssl-dev xxd libedit-dev) ;;
    test) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev libcmocka-dev
                 libsystemd-dev libssl-dev openssl xxd python3 python3-pytest python3-venv python3-wheel-whl
                 groff-base python3-prometheus-client chromium clang libclang-rt-14-dev
                 clang-format nutcracker python3-pymemcache libmemcached-tools libfaketime
                 python3-redis redis-tools
                 libedit-dev tmux haproxy python3-yaml strace) ;;
    bench) want+=(gcc libc6-dev make pkg-config libevent-dev libxxhash-dev libinih-dev
                  libsystemd-dev libssl-dev openssl xxd python3 redis-server memcached nutcracker
                  coreutils libedit-dev netcat-openbsd) ;;
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
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

{
    echo "deps.sh: '$*' needs ${#missing[@]} Debian package(s) that are not installed:"
    for p in "${missing[@]}"; do printf '  %-28s %s\n' "$p" "${why[$p]:-}"; done
} >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps.sh: need root to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
n=$(apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null | grep -c '^Inst ' || true)
echo "deps.sh: apt-get installs $n package(s) with their dependencies (--no-install-recommends)" >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
