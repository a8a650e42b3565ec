#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only) from the llama.cpp source that node-llama-cpp ships
# (node_modules/node-llama-cpp/llama/gitRelease.bundle) the way llama.cpp's release binaries are
# built, and caches it outside the checkout:
#
#   ${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/llama-server/<key>/bin/llama-server
#
# <key> is the llama.cpp commit the bundle holds (12 hex digits), the machine architecture and the
# recipe revision below; so a new node-llama-cpp (a new bundle) or a change of recipe builds afresh,
# and anything else finds the cached binary. This script is the one source of truth for that path:
# test/helpers/llama-server.ts asks it with --print-path.
#
# Why not -DGGML_NATIVE=ON: a binary built for the build machine's own CPU runs every instruction
# that CPU lists, and on Intel VMs whose virtual CPU lists AMX it dies with SIGILL in llama.cpp's AMX
# kernels as soon as it runs a quantised model with weight repacking. So, as llama.cpp's releases do:
# GGML_NATIVE=OFF, GGML_BACKEND_DL=ON (the CPU backend is a shared library loaded at start) and
# GGML_CPU_ALL_VARIANTS=ON (one library per x86 level, libggml-cpu-<level>.so; the best one the CPU
# can run is picked at start). The binary finds its libraries beside itself (RPATH $ORIGIN), and
# bench/vs-llama-server.ts swaps in node-llama-cpp's own prebuilt CPU backends, so both sides run
# the same kernels.
#
# Usage:
#   scripts/build-llama-server.sh                     build when missing; the binary's path is the last line of stdout
#   scripts/build-llama-server.sh --with-llama-bench  the same, and llama-bench beside it (bench/vs-llama-server.ts)
#   scripts/build-llama-server.sh --print-path        print the path the binary has (or would have) and exit; builds nothing
#
# Environment: TURNPIKE_CACHE_DIR (default $HOME/.cache/turnpike); LLAMA_SERVER_BUILD_JOBS (default 2).
set -euo pipefail

# Bump when the cmake options below change, so a binary built the old way is not reused.
RECIPE_REVISION=r2

root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [ ! -f "$bundle" ]; then
  echo "build-llama-server: no llama.cpp bundle at $bundle (run npm install first)" >&2
  exit 1
fi

# The bundle's HEAD commit, read from the bundle's header (no clone needed).
commit="$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1; exit }')"
if [ -z "$commit" ]; then
  commit="$(git bundle list-heads "$bundle" | awk 'NR == 1 { print $1 }')"
fi
if ! [[ "$commit" =~ ^[0-9a-f]{40}$ ]]; then
  echo "build-llama-server: cannot read the commit held by $bundle" >&2
  exit 1
fi

key="${commit:0:12}-$(uname -m)-cpu-$RECIPE_REVISION"
cache_dir="${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/llama-server"
target_dir="$cache_dir/$key"
binary="$target_dir/bin/llama-server"

bench_binary="$target_dir/bin/llama-bench"

with_bench=false
case "${1:-}" in
  --print-path)
    echo "$binary"
    exit 0
    ;;
  --with-llama-bench) with_bench=true ;;
  "") ;;
  *)
    echo "build-llama-server: unknown argument '$1' (--print-path or --with-llama-bench)" >&2
    exit 2
    ;;
esac

if [ -x "$binary" ] && { [ "$with_bench" = false ] || [ -x "$bench_binary" ]; }; then
  echo "build-llama-server: already built"
  echo "$binary"
  exit 0
fi
# What is missing: both on a new machine (when asked for llama-bench), or llama-bench alone.
targets=(llama-server)
if [ "$with_bench" = true ]; then targets+=(llama-bench); fi
if [ -x "$binary" ]; then targets=(llama-bench); fi

jobs="${LLAMA_SERVER_BUILD_JOBS:-2}"
tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$root/node_modules/node-llama-cpp/llama/llama.cpp.info.json" 2>/dev/null || true)"
echo "build-llama-server: building llama.cpp ${tag:-?} (commit ${commit:0:12}) into $target_dir with $jobs jobs"

mkdir -p "$cache_dir"
# Folders of builds killed too hard to clean up after themselves (SIGKILL, power loss).
find "$cache_dir" -mindepth 1 -maxdepth 1 -name '.build-*' -mmin +180 -exec rm -rf {} + 2>/dev/null || true
# Everything happens in a temporary folder beside the target (same file system, so the final
# rename is atomic); an interrupted build leaves only that folder, removed on exit.
work="$(mktemp -d "$cache_dir/.build-$key.XXXXXX")"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$SECONDS
echo "build-llama-server: cloning the bundle"
git clone --quiet --no-checkout "$bundle" "$work/src"
git -C "$work/src" -c advice.detachedHead=false checkout --quiet "$commit"

echo "build-llama-server: configuring (Release, CPU, shared, backends loaded at start, every x86 level)"
cmake -S "$work/src" -B "$work/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' \
  -DGGML_NATIVE=OFF \
  -DGGML_BACKEND_DL=ON \
  -DGGML_CPU_ALL_VARIANTS=ON \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
  -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON \
  > "$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" >&2; exit 1; }

echo "build-llama-server: compiling ${targets[*]} and the CPU backends (20-40 minutes on 2 cores)"
# Progress: cmake's "[ NN%]" lines, one in ten, so a CI log shows it moving without drowning.
cmake --build "$work/build" --config Release --target "${targets[@]}" -j "$jobs" 2>&1 \
  | tee "$work/build.log" \
  | awk '/^\[ *[0-9]+%\]/ { n++; if (n % 10 == 1) { print "build-llama-server: " $0; fflush() } }'
if [ "${PIPESTATUS[0]}" != "0" ]; then
  tail -n 40 "$work/build.log" >&2
  exit 1
fi

if [ "${targets[0]}" = llama-bench ]; then
  # llama-server is there already: add llama-bench beside it (copied, then renamed into place).
  if [ ! -x "$work/build/bin/llama-bench" ]; then
    echo "build-llama-server: the build finished without $work/build/bin/llama-bench" >&2
    exit 1
  fi
  cp "$work/build/bin/llama-bench" "$target_dir/bin/.llama-bench.$$"
  mv -f "$target_dir/bin/.llama-bench.$$" "$bench_binary"
  echo "build-llama-server: llama-bench built in $((SECONDS - started)) s"
  echo "$binary"
  exit 0
fi

built="$work/build/bin/llama-server"
if [ ! -x "$built" ]; then
  echo "build-llama-server: the build finished without $built" >&2
  exit 1
fi
"$built" --version > "$work/version.txt" 2>&1 || { cat "$work/version.txt" >&2; exit 1; }

mkdir -p "$work/out/bin"
cp "$built" "$work/out/bin/llama-server"
# The shared libraries it loads: libllama, libggml, libggml-base, libmtmd and each CPU backend.
cp -P "$work/build/bin/"*.so* "$work/out/bin/"
if [ "$with_bench" = true ]; then cp "$work/build/bin/llama-bench" "$work/out/bin/llama-bench"; fi
cp "$work/version.txt" "$work/out/version.txt"
echo "$commit" > "$work/out/commit.txt"
# The atomic step: the whole folder appears at once or not at all. If another build won the race,
# keep its result.
if ! mv -T "$work/out" "$target_dir" 2>/dev/null; then
  if [ ! -x "$binary" ]; then
    echo "build-llama-server: could not move the build into $target_dir" >&2
    exit 1
  fi
fi
echo "build-llama-server: built in $((SECONDS - started)) s"
echo "$binary"
