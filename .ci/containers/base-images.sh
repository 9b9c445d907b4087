#!/usr/bin/env bash
# The images deploy/Dockerfile and deploy/smoke.sh build on, made from Debian's own packages
# on a machine that reaches no container registry (the project's copy of the steps of the
# shared recipe, build-image.sh; docs/deployment.md, "What CI tests").
#
#   .ci/containers/base-images.sh [engine] [debian] [python] [standins]   (none: all four)
#
# engine    /etc/containers/containers.conf when absent: runc (crun refuses this kind of VM's
#           hybrid cgroups), cgroupfs, lower default ulimits (podman's defaults exceed the
#           hard limits of a process without CAP_SYS_RESOURCE: every container fails on
#           setrlimit). podman itself is installed by .ci/run (apt), not here.
# debian    docker.io/library/debian:bookworm-slim (and :12): debootstrap --variant=minbase
#           from the Debian mirror apt already uses.
# python    docker.io/library/python:3.11-slim-bookworm: Debian's python3.11 on the above.
# standins  postgres:16, redis:7, nginx:1.27: standins/*, on one shared apt layer.
#
# An image that exists is kept (FORCE=1 makes it again): a second run costs nothing.
# Each step prints how long it took.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-${TMPDIR:-/tmp}/llmrelay-base-images}
DEBIAN=docker.io/library/debian:bookworm-slim
PYTHON=docker.io/library/python:3.11-slim-bookworm

say() { printf '[base-images %s] %s\n' "$(date -u +%T)" "$*"; }
have() { [ -z "${FORCE:-}" ] && podman image exists "$1"; }
# quiet: a build's messages less apt's note that it has no apt-utils (every apt run says it).
quiet() { grep -v '^debconf: delaying package configuration' >&2 || true; }
timed() {  # timed NAME COMMAND...: run it, then say how long it took
  local started=$SECONDS name=$1
  shift
  "$@"
  say "$name: $((SECONDS - started)) s"
}

step_engine() {
  [ -e /etc/containers/containers.conf ] && return
  mkdir -p /etc/containers
  cat >/etc/containers/containers.conf <<'EOF'
[containers]
# podman's default nofile=1048576 / nproc=4194304 exceed the hard limits of a process without
# CAP_SYS_RESOURCE ("setrlimit `RLIMIT_NOFILE`: Operation not permitted")
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
# Debian's podman package also ships a CNI config: say which backend, whatever is found.
network_backend = "netavark"
EOF
  say "wrote /etc/containers/containers.conf"
}

mirror() {  # the Debian mirror this machine's apt uses (first URIs: line, or first deb line)
  local found
  found=$( (grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2; exit}') || true)
  [ -n "$found" ] || found=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$found" ] || { echo "no Debian mirror found in apt's sources: set MIRROR" >&2; return 2; }
  echo "$found"
}

step_debian() {
  have "$DEBIAN" && return
  local mirror=${MIRROR:-$(mirror)} root="$WORK/rootfs"
  rm -rf "$root" && mkdir -p "$WORK"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; return 1; }
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar --numeric-owner -C "$root" -c . | podman import -q --change 'CMD ["bash"]' - "$DEBIAN" >/dev/null
  podman tag "$DEBIAN" docker.io/library/debian:12
  rm -rf "$root"
}

step_python() {
  have "$PYTHON" && return
  mkdir -p "$WORK/python"
  cat >"$WORK/python/Containerfile" <<'EOF'
FROM docker.io/library/debian:bookworm-slim
ENV LANG=C.UTF-8
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv python3-dev python-is-python3 \
 && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
EOF
  podman build -q --format docker -t "$PYTHON" "$WORK/python" 2>&1 >/dev/null | quiet
}

step_standins() {
  local name
  if ! have localhost/llmrelay-ci/standins-base:latest; then
    podman build -q --format docker -t localhost/llmrelay-ci/standins-base:latest \
      "$HERE/standins/base" 2>&1 >/dev/null | quiet
  fi
  for name in postgres:16 redis:7 nginx:1.27; do
    have "docker.io/library/$name" && continue
    podman build -q --format docker -t "docker.io/library/$name" "$HERE/standins/${name%%:*}" 2>&1 >/dev/null | quiet
  done
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(engine debian python standins)
for step in "${steps[@]}"; do
  case $step in
    engine | debian | python | standins) timed "$step" "step_$step" ;;
    *) echo "usage: $0 [engine] [debian] [python] [standins]" >&2; exit 2 ;;
  esac
done
