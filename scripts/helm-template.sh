#!/usr/bin/env bash
# Renders a Helm chart as `helm template` does, without helm (no helm binary is packaged for
# Debian or npm): builds scripts/helm-template/main.go with Debian's Go and sprig when it is not
# built yet, then runs it with this script's arguments. The binary is cached outside the checkout:
#
#   ${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/helm-template/<sha256 of main.go, 16 hex>/helm-template
#
# so a changed main.go builds afresh and anything else finds the cached binary.
#
# Needs (no network at build time; Go finds the libraries in Debian's GOPATH, /usr/share/gocode):
#   apt-get install golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
#
# Usage:
#   scripts/helm-template.sh [RELEASE] CHART [-n NS] [-f values.yaml]... [--set k=v]... [--kube-version v1.36.0] ...
#   scripts/helm-template.sh --print-path    the binary's path (built or not); builds nothing
#   scripts/helm-template.sh --build         build when missing, print the path
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
source_file="$root/scripts/helm-template/main.go"
key="$(sha256sum "$source_file" | cut -c1-16)"
cache="${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/helm-template/$key"
binary="$cache/helm-template"

if [ "${1:-}" = "--print-path" ]; then
  echo "$binary"
  exit 0
fi

if [ ! -x "$binary" ]; then
  if ! command -v go >/dev/null; then
    echo "helm-template: no Go toolchain. Install Debian's: apt-get install golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev (.ci/run does)" >&2
    exit 127
  fi
  if [ ! -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || [ ! -d /usr/share/gocode/src/gopkg.in/yaml.v3 ]; then
    echo "helm-template: Go libraries missing. Install Debian's: apt-get install golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev (.ci/run does)" >&2
    exit 127
  fi
  mkdir -p "$cache"
  # GOPATH mode: the imports come from Debian's packages, nothing is fetched.
  (cd "$root/scripts/helm-template" &&
    GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$cache/go-build" \
      go build -o "$binary.partial" .)
  mv "$binary.partial" "$binary"
  # Builds of older main.go versions are not needed any more (a checkout that still has one rebuilds it in seconds).
  find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
fi

if [ "${1:-}" = "--build" ]; then
  echo "$binary"
  exit 0
fi
exec "$binary" "$@"
