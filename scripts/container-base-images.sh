#!/usr/bin/env bash
# Builds, from Debian's archive, the base images the project's Dockerfile and compose files name,
# for machines that reach no image registry (see /work/shared/CONTAINERS.md), and tags each with its
# official name, so the real Dockerfile and compose files run unchanged:
#
#   localhost/debian:bookworm                  debootstrap --variant=minbase, imported
#   node:24-bookworm-slim                      + the Node 24 of the `node` dev dependency, npm, user node (1000)
#   postgres:15-bookworm                       + Debian's postgresql-15 and an entrypoint reading POSTGRES_*
#   redis:7-bookworm                           + Debian's redis-server
#   nginx:stable-bookworm                      + Debian's nginx
#   ghcr.io/ggml-org/llama.cpp:server          + scripts/build-llama-server.sh's binary and libraries in /app
#
# (each Docker Hub name both as docker.io/library/… and localhost/…, so podman never resolves a short
# name to another image). An image is kept in podman's storage and rebuilt only when its recipe
# (scripts/container-stand-ins/, the Node version, the llama-server build) changed: a warm run takes
# seconds. The stand-ins are not the official images; they check the project's own steps.
#
# It also writes the private containers.conf these machines need (runtime runc, ulimits no higher than
# the machine's hard limits) and prints `export CONTAINERS_CONF=…` as its last line; nothing under /etc
# changes. Needs root, podman, runc and debootstrap.
#
# Usage: scripts/container-base-images.sh [--conf-only]
# Environment: TURNPIKE_CACHE_DIR (default $HOME/.cache/turnpike): the containers.conf and the
# debootstrap root live in $TURNPIKE_CACHE_DIR/containers.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
recipes="$root/scripts/container-stand-ins"
work="${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/containers"
mkdir -p "$work"

# The two settings the defaults need here: runc (Debian's crun refuses the hybrid cgroup layout) and
# container ulimits no higher than this shell's hard limits (podman's defaults fail setrlimit).
nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=1048576
nproc="$(ulimit -Hu)"; { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
cat > "$work/containers.conf.new" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
CONF
mv "$work/containers.conf.new" "$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"
if [ "${1:-}" = --conf-only ]; then echo "export CONTAINERS_CONF=$CONTAINERS_CONF"; exit 0; fi

log() { echo "container-base-images: $*" >&2; }

# The recipe label an image was built from, or nothing when it is missing.
built_recipe() { podman image inspect --format '{{ index .Labels "turnpike.stand-in" }}' "$1" 2>/dev/null || true; }

# build NAME RECIPE-HASH CONTEXT CONTAINERFILE TAG... : builds unless NAME carries RECIPE-HASH.
build() {
  local name="$1" recipe="$2" context="$3" containerfile="$4"; shift 4
  if [ "$(built_recipe "$name")" = "$recipe" ]; then log "$name: cached"; return; fi
  local started=$SECONDS tag_args=()
  for tag in "$name" "$@"; do tag_args+=(--tag "$tag"); done
  log "$name: building"
  podman build --quiet --label "turnpike.stand-in=$recipe" "${tag_args[@]}" --file "$containerfile" "$context" >/dev/null
  log "$name: built in $((SECONDS - started)) s"
}

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# 1. Debian bookworm, minbase, from the archive this machine uses.
debian_recipe="bookworm-minbase-1"
if [ "$(built_recipe localhost/debian:bookworm)" != "$debian_recipe" ]; then
  started=$SECONDS
  log "localhost/debian:bookworm: debootstrap"
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs"/var/cache/apt/archives/*.deb "$work/rootfs"/var/lib/apt/lists/*
  tar -C "$work/rootfs" -c . | podman import --quiet --change "LABEL turnpike.stand-in=$debian_recipe" --change 'CMD ["bash"]' - localhost/debian:bookworm >/dev/null
  podman tag localhost/debian:bookworm docker.io/library/debian:bookworm
  rm -rf "$work/rootfs"
  log "localhost/debian:bookworm: imported in $((SECONDS - started)) s"
else
  log "localhost/debian:bookworm: cached"
fi
debian_id="$(podman image inspect --format '{{.Id}}' localhost/debian:bookworm)"

# 2. node:24-bookworm-slim: the project's Node 24 and the machine's npm.
node_binary="$(readlink -f "$root/node_modules/node/bin/node")"
npm_directory="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
context="$work/node-context"
rm -rf "$context" && mkdir -p "$context"
cp "$node_binary" "$context/node"
cp -r "$npm_directory" "$context/npm"
cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
node_recipe="$(printf '%s %s %s\n' "$debian_id" "$("$node_binary" --version)" "$(npm --version)" | cat - "$recipes/node.Containerfile" "$context/ca-certificates.crt" | sha256sum | cut -c1-16)"
build localhost/node:24-bookworm-slim "$node_recipe" "$context" "$recipes/node.Containerfile" docker.io/library/node:24-bookworm-slim
rm -rf "$context"

# 3. PostgreSQL, Redis and nginx from Debian's packages.
build docker.io/library/postgres:15-bookworm "$(echo "$debian_id" | cat - "$recipes/postgres.Containerfile" "$recipes/postgres-entrypoint.sh" | sha256sum | cut -c1-16)" \
  "$recipes" "$recipes/postgres.Containerfile" localhost/postgres:15-bookworm
build docker.io/library/redis:7-bookworm "$(echo "$debian_id" | cat - "$recipes/redis.Containerfile" | sha256sum | cut -c1-16)" \
  "$recipes" "$recipes/redis.Containerfile" localhost/redis:7-bookworm
build docker.io/library/nginx:stable-bookworm "$(echo "$debian_id" | cat - "$recipes/nginx.Containerfile" | sha256sum | cut -c1-16)" \
  "$recipes" "$recipes/nginx.Containerfile" localhost/nginx:stable-bookworm

# 4. llama-server, from the binary scripts/build-llama-server.sh caches (with its libraries beside it).
llama_server="$("$root/scripts/build-llama-server.sh" --print-path)"
if [ -x "$llama_server" ]; then
  context="$work/llama-server-context"
  rm -rf "$context" && mkdir -p "$context/bin"
  cp -a "$(dirname "$llama_server")"/. "$context/bin/"
  llama_recipe="$( (echo "$debian_id $llama_server"; cat "$recipes/llama-server.Containerfile") | sha256sum | cut -c1-16)"
  build ghcr.io/ggml-org/llama.cpp:server "$llama_recipe" "$context" "$recipes/llama-server.Containerfile"
  rm -rf "$context"
else
  log "ghcr.io/ggml-org/llama.cpp:server: NOT built, no llama-server at $llama_server (run scripts/build-llama-server.sh)"
fi

echo "export CONTAINERS_CONF=$CONTAINERS_CONF"
