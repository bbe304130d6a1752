#!/usr/bin/env bash
# docker/test.sh - builds the bloomd image with podman and checks it as a container:
# healthcheck, CREATE/CHECKADD through a published 127.0.0.1 port, a restart that keeps
# the volume's data, SIGTERM stop with exit 0 in time, and the sidecar pattern (a click
# worker sharing bloomd's network namespace, as in a pod). As root: `make docker-test`.
# No registry is needed: debian:bookworm and debian:bookworm-slim are made locally with
# debootstrap (cached as podman images; BLOOMD_REBUILD_BASE=1 remakes them).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
TAG=localhost/bloomd:test
NAME=bloomd-test-$$
VOLUME=bloomd-test-data-$$
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# runc cannot raise RLIMIT_NOFILE/NPROC inside this kind of sandbox; podman's defaults
# ask for more than the host allows, so every container gets explicit limits.
LIMITS=(--ulimit nofile=16384:16384 --ulimit nproc=4096:4096)
# Podman schedules periodic health checks with systemd timers, absent here (it logs an
# error per container, kept in $work/podman.log): the test runs the image's HEALTHCHECK
# itself with `podman healthcheck run`.
HEALTH="--health-interval=disable"
work=$(mktemp -d /tmp/bloomd-docker-test.XXXXXX)

say() { printf '== %s\n' "$*"; }
fail() { printf 'docker/test.sh: FAIL: %s\n' "$*" >&2; exit 1; }
# The build stage's images (Dockerfile: LABEL io.bloomd.stage=build) are untagged once
# the image is built, ~780 MB: removed, a few rounds since each removal can leave its
# parent dangling.
stage_images() { podman images -a -q --filter label=io.bloomd.stage=build --filter dangling=true; }
prune_stages() {
    for _ in $(seq 16); do
        [ -n "$(stage_images 2>/dev/null)" ] || return 0
        podman image prune -f --filter label=io.bloomd.stage=build >/dev/null 2>&1 || true
    done
}
cleanup() {
    set +e
    podman rm -f -t 5 "$NAME" >/dev/null 2>&1
    podman volume rm -f "$VOLUME" >/dev/null 2>&1
    prune_stages
    rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || fail "run as root (podman with runc, debootstrap)"
for c in podman debootstrap runc; do
    command -v "$c" >/dev/null || fail "$c missing: scripts/deps.sh docker"
done

# ---- base images: debootstrap --variant=minbase bookworm, imported twice ----
make_bases() {
    local root=$work/rootfs
    say "debootstrap bookworm (minbase) from $MIRROR"
    timeout 900 debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
    # As Debian's official images: apt keeps no package caches in image layers.
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CLEAN'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CLEAN
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
    tar -C "$root" -c . | podman import --change 'CMD ["bash"]' - docker.io/library/debian:bookworm >/dev/null
    # The slim variant, as Debian's official one: no docs, man pages or translations,
    # and dpkg told not to install them again.
    find "$root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
    rm -rf "$root"/usr/share/{man,info,locale}/*
    cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
SLIM
    tar -C "$root" -c . | podman import --change 'CMD ["bash"]' - docker.io/library/debian:bookworm-slim >/dev/null
    rm -rf "$root"
}
if [ "${BLOOMD_REBUILD_BASE:-0}" = 1 ] || ! podman image exists docker.io/library/debian:bookworm \
        || ! podman image exists docker.io/library/debian:bookworm-slim; then
    make_bases
else
    say "reusing local debian:bookworm and debian:bookworm-slim"
fi

# ---- the image ----
say "building $TAG"
timeout 1200 podman build --format docker --pull=never "${LIMITS[@]}" \
    --ignorefile docker/Dockerfile.dockerignore -f docker/Dockerfile -t "$TAG" . \
    >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "podman build"; }
[ "$(podman image inspect --format '{{.Config.User}}' "$TAG")" = bloomd ] || fail "image user is not bloomd"
podman image inspect --format '{{json .Config.Healthcheck}}' "$TAG" | grep -q -- '--ping' \
    || fail "image has no HEALTHCHECK (was it built with --format docker?)"
say "image size: $(podman image inspect --format '{{.Size}}' "$TAG") bytes"
prune_stages
[ -z "$(stage_images)" ] || fail "untagged build-stage images left: $(stage_images | tr '\n' ' ')"
say "build stage images removed"

port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run_bloomd() {
    podman run -d --name "$NAME" "${LIMITS[@]}" $HEALTH -p "127.0.0.1:$port:8673" \
        -v "$VOLUME:/data" "$TAG" >/dev/null 2>>"$work/podman.log"
}
wait_healthy() {
    for _ in $(seq 50); do
        if podman healthcheck run "$NAME" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    podman logs "$NAME" | tail -20
    fail "healthcheck never passed"
}
stop_bloomd() {  # SIGTERM; bloomd must exit 0 well within the 10 s grace period
    local t0=$SECONDS
    podman stop -t 10 "$NAME" >/dev/null 2>>"$work/podman.log"
    local code elapsed=$((SECONDS - t0))
    code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
    podman logs "$NAME" >"$work/bloomd.log" 2>&1
    [ "$code" = 0 ] || { tail -20 "$work/bloomd.log"; fail "bloomd exited $code on SIGTERM"; }
    [ "$elapsed" -lt 10 ] || fail "stop took ${elapsed}s (SIGTERM not handled?)"
    podman rm "$NAME" >/dev/null 2>>"$work/podman.log"
    say "stopped: exit 0 after ${elapsed}s"
}

say "running on 127.0.0.1:$port with volume $VOLUME"
podman volume create "$VOLUME" >/dev/null
run_bloomd
wait_healthy
say "healthy; uid inside: $(podman exec "$NAME" id -u)"
[ "$(podman exec "$NAME" id -u)" != 0 ] || fail "bloomd runs as root"
# The check can fail: pointed at a port nobody listens on, --ping exits 1.
if podman exec -e BLOOMD_PORT=1 "$NAME" bloomd --ping >/dev/null 2>&1; then
    fail "bloomd --ping succeeded against a closed port"
fi

# Raw protocol through the published port, then the Python client.
reply=$($PY - "$port" <<'PYEOF'
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
    s.sendall(b"CREATE clicks capacity=10000 error=0.001\r\nCHECKADD clicks a b a\r\n")
    data = b""
    while data.count(b"\r\n") < 2:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
print(data.decode().replace("\r\n", "|"))
PYEOF
)
[ "$reply" = "CREATED|0 0 1|" ] || fail "CREATE/CHECKADD replied '$reply'"
PYTHONPATH=clients/python/src $PY - "$port" <<'PYEOF' || fail "CHECKADD/FLUSH through the client"
import sys
from bloomd_client import Client
with Client("127.0.0.1", int(sys.argv[1])) as c:
    keys = ["click-%d" % i for i in range(10000)]
    assert c.checkadd("clicks", keys) == [False] * len(keys)
    assert all(c.check("clicks", keys))
    c.flush("clicks")
PYEOF
say "CREATE/CHECKADD through the port: ok"

stop_bloomd
say "new container, same volume"
run_bloomd
wait_healthy
PYTHONPATH=clients/python/src $PY - "$port" <<'PYEOF' || fail "data lost across the restart"
import sys
from bloomd_client import Client
with Client("127.0.0.1", int(sys.argv[1])) as c:
    keys = ["a", "b"] + ["click-%d" % i for i in range(10000)]
    assert all(c.check("clicks", keys)), "data lost across the restart"
    assert c.check("clicks", "never-added") is False
PYEOF
say "data kept across the restart"
stop_bloomd

# ---- the sidecar pattern: a worker sharing bloomd's network namespace ----
# (--network container:<bloomd> is what compose's network_mode: service:bloomd does and
# what a Kubernetes pod gives its containers; a podman pod would need a pause image.)
say "sidecar: click worker in bloomd's network namespace"
podman build --format docker --pull=never "${LIMITS[@]}" \
    --ignorefile docker/worker.Dockerfile.dockerignore -f docker/worker.Dockerfile \
    -t localhost/bloomd-click-worker:test . >"$work/worker-build.log" 2>&1 \
    || { tail -20 "$work/worker-build.log"; fail "worker build"; }
podman run -d --name "$NAME" "${LIMITS[@]}" $HEALTH -v "$VOLUME:/data" "$TAG" >/dev/null 2>>"$work/podman.log"
wait_healthy
out=$(timeout 120 podman run --rm --network "container:$NAME" "${LIMITS[@]}" \
    localhost/bloomd-click-worker:test --demo 20000 --seed 7 2>&1 >/dev/null | tail -1)
echo "   worker: $out"
# Every repeat the demo made must come back as a duplicate (no false negatives), and
# false positives (error 0.001) stay far below 1% of the first-seen clicks.
dups=$(sed -n 's/^processed 20000 clicks: [0-9]* first seen, \([0-9]*\) duplicates$/\1/p' <<<"$out")
[ -n "$dups" ] || fail "worker output '$out'"
repeats=$(PYTHONPATH=docker:clients/python/src $PY -c 'from click_worker import demo_clicks
ids = [e["click_id"] for e in demo_clicks(20000, 7)]
print(len(ids) - len(set(ids)))')
[ "$dups" -ge "$repeats" ] && [ $((dups - repeats)) -le $(((20000 - repeats) / 100)) ] \
    || fail "worker counted $dups duplicates; the demo made $repeats repeats"
stop_bloomd

say "docker/test.sh: all passed"
