#!/usr/bin/env bash
# Sets up the code sandbox (called by `make sandbox`, so by `make test` and CI). Idempotent and fast when done:
#   1. apt-get installs docker.io and bubblewrap, only when `dockerd` / `bwrap` are missing, and the host
#      toolchains the bubblewrap backend runs from the host's /usr (gcc, g++, a headless JDK, nodejs);
#   2. starts `dockerd` in the background when `docker info` fails, and waits for it (60 s at most);
#   3. builds the sandbox image only when `docker image inspect` fails: from the cached root-fs tarball under
#      /var/cache/rlvr-sandbox/ when present, else debootstrap (minbase + $RLVR_SANDBOX_PACKAGES: python3,
#      gcc/g++, openjdk-17-jdk-headless, nodejs) into that tarball first. A new tag in image.env is built
#      alongside the old image, so containers of the old tag keep working until it is imported.
# No registry is used. Needs root; as another user it only reports what is missing and exits 0.
# When Docker cannot be made to work here (no dockerd allowed, no mirror), it says so and exits 0: the
# sandbox then uses bubblewrap and the Docker tests skip, naming the reason.
# Environment: RLVR_SANDBOX_CACHE (tarball folder), RLVR_SANDBOX_MIRROR (Debian mirror for debootstrap).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=sandbox/image.env
source "$here/image.env"
cache_dir="${RLVR_SANDBOX_CACHE:-/var/cache/rlvr-sandbox}"
tarball="$cache_dir/$(echo "$RLVR_SANDBOX_IMAGE" | tr ':/' '__').rootfs.tar"
dockerd_log=/var/log/rlvr-dockerd.log
SECONDS=0
log() { echo "[sandbox/setup ${SECONDS}s] $*"; }
give_up_on_docker() {  # give_up_on_docker REASON: Docker stays unusable; bubblewrap remains.
  log "WARNING: $1"
  log "WARNING: the Docker backend is unavailable here; sandboxes fall back to bubblewrap and Docker tests skip."
  exit 0
}

if [ "$(id -u)" != 0 ]; then
  log "not root: skipping setup (Docker tests will skip, bubblewrap is used if installed)."
  command -v bwrap >/dev/null || log "bubblewrap is missing: apt-get install bubblewrap"
  exit 0
fi

apt_updated=0
apt_install() {  # apt_install PKG...: install Debian packages, running `apt-get update` once.
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install $*"
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. Packages.
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v g++ >/dev/null || missing+=(g++)
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v node >/dev/null || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; else log "docker.io, bubblewrap and the toolchains present"; fi

# 2. Engine.
if docker info >/dev/null 2>&1; then
  log "Docker engine answers"
else
  log "starting dockerd (log: $dockerd_log)"
  # setsid + nohup: the daemon must outlive this script and the make that called it.
  setsid nohup dockerd >"$dockerd_log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    tail -n 20 "$dockerd_log" || true
    give_up_on_docker "dockerd did not answer within 60 s (its log is above)"
  fi
  log "dockerd is up"
fi

# 3. Image.
if docker image inspect "$RLVR_SANDBOX_IMAGE" >/dev/null 2>&1; then
  log "image $RLVR_SANDBOX_IMAGE present"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || apt_install debootstrap
  mirror="${RLVR_SANDBOX_MIRROR:-}"
  if [ -z "$mirror" ]; then
    # The machine's own Debian mirror (deb822 or one-line format), else the public one.
    mirror=$(grep -hoE '^URIs:[[:space:]]*\S+/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 | awk '{print $2}' || true)
    [ -n "$mirror" ] || mirror=$(grep -hoE '^deb[[:space:]]+\S+/debian/?[[:space:]]' /etc/apt/sources.list 2>/dev/null | head -n 1 | awk '{print $2}' || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  fi
  rootfs=$(mktemp -d /tmp/rlvr-sandbox-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
  log "debootstrap $RLVR_SANDBOX_SUITE (minbase + $RLVR_SANDBOX_PACKAGES) from $mirror"
  debootstrap --variant=minbase --include="$RLVR_SANDBOX_PACKAGES" "$RLVR_SANDBOX_SUITE" "$rootfs" "$mirror" \
    >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log"; give_up_on_docker "debootstrap failed (its log is above)"; }
  rm -f "$rootfs.log"
  # Nothing a program needs: package caches, docs, man pages.
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
         "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/*
  mkdir -p "$cache_dir"
  # Java's class-data-sharing archive stays (it halves the JVM's start-up); javadoc and sources do not.
  rm -rf "$rootfs"/usr/lib/jvm/*/lib/src.zip "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  log "cached root fs: $tarball ($(du -h "$tarball" | cut -f1))"
fi
log "docker import $tarball -> $RLVR_SANDBOX_IMAGE"
docker import "$tarball" "$RLVR_SANDBOX_IMAGE" >/dev/null || give_up_on_docker "docker import failed"
log "image $RLVR_SANDBOX_IMAGE ready"
