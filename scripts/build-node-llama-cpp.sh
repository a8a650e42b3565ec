#!/usr/bin/env bash
# Builds node-llama-cpp's native binding (llama-addon.node) with Turnpike's patch
# (scripts/node-llama-cpp/embedding-sequences.patch), caches it outside the checkout and installs it
# as node-llama-cpp's "last build", which src/engines/llamacpp/runtime.ts loads on the CPU:
#
#   ${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/node-llama-cpp/<key>/Release/
#
# Why: node-llama-cpp 3.22.1 (the latest on npm) reads the pooled embedding of sequence 0 only
# (AddonContext::GetEmbedding), so several embedding inputs cannot share one llama_decode, and
# embeddings under concurrency ran at 0.80-0.87x llama-server's rate (bench/embeddings.ts). The patch
# (small changes to the binding's C++, none to llama.cpp) reads any sequence's vector, makes an
# embedding context's KV cache unified, gives every context of more than one thread a thread pool of
# its own kept between decodes (as llama-server keeps its pools; the stock binding makes and joins
# one per decode, i.e. per generated token: with --threads 2 one stream ran at 0.46x llama-server,
# 0.84x with the pool kept) and marks the binding (`turnpikeEmbeddingSequences`).
#
# Only llama-addon.node is rebuilt. Beside it go node-llama-cpp's own prebuilt CPU libraries for this
# platform (libllama, libggml, libggml-base and every libggml-cpu-<level>.so): the same llama.cpp
# release, so the addon links to them unchanged, and every kernel is the prebuilt one that the rest
# of Turnpike (and bench/vs-llama-server.ts) measures. So the build skips llama.cpp's CPU backend
# (GGML_CPU=OFF) and takes a few minutes.
#
# <key> is node-llama-cpp's version, the llama.cpp commit its bundle holds, the architecture, the
# patch's hash and the recipe revision below: a new node-llama-cpp, a changed patch or recipe builds
# afresh. Without the patched binding (a machine that never ran this), Turnpike runs on the prebuilt
# binding and embeds one input per decode (`embeddings.ts`, lanes): `npm install && npm start` needs
# nothing of this.
#
# Usage:
#   scripts/build-node-llama-cpp.sh                build when missing, then install into node_modules
#   scripts/build-node-llama-cpp.sh --print-path   print the cached Release folder's path and exit
#   scripts/build-node-llama-cpp.sh --uninstall    remove the installed binding from node_modules (the cache stays)
#
# Environment: TURNPIKE_CACHE_DIR (default $HOME/.cache/turnpike); NODE_LLAMA_CPP_BUILD_JOBS (default 2).
set -euo pipefail

# Bump when the cmake options or the install layout below change.
RECIPE_REVISION=r1
FOLDER=turnpike-embedding-sequences

root="$(cd "$(dirname "$0")/.." && pwd)"
package="$root/node_modules/node-llama-cpp"
patch_file="$root/scripts/node-llama-cpp/embedding-sequences.patch"
bundle="$package/llama/gitRelease.bundle"
if [ ! -f "$bundle" ] || [ ! -f "$package/package.json" ]; then
  echo "build-node-llama-cpp: node-llama-cpp is not installed with its llama.cpp bundle (run npm install first)" >&2
  exit 1
fi
version="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$package/package.json" | head -n 1)"
commit="$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1; exit }')"
if [ -z "$commit" ]; then commit="$(git bundle list-heads "$bundle" | awk 'NR == 1 { print $1 }')"; fi
case "$(uname -m)" in
  x86_64) platform_dir=linux-x64 ;;
  aarch64) platform_dir=linux-arm64 ;;
  *) platform_dir="" ;;
esac
prebuilt="$root/node_modules/@node-llama-cpp/$platform_dir/bins/$platform_dir"
patch_hash="$(sha256sum "$patch_file" | cut -c1-12)"
key="$version-${commit:0:12}-$(uname -m)-$patch_hash-$RECIPE_REVISION"
cache_dir="${TURNPIKE_CACHE_DIR:-$HOME/.cache/turnpike}/node-llama-cpp"
target_dir="$cache_dir/$key"
install_dir="$package/llama/localBuilds/$FOLDER"
last_build="$package/llama/lastBuild.json"

uninstall() {
  rm -rf "$install_dir"
  if [ -f "$last_build" ] && grep -q "\"$FOLDER\"" "$last_build"; then rm -f "$last_build"; fi
}

case "${1:-}" in
  --print-path)
    echo "$target_dir/Release"
    exit 0
    ;;
  --uninstall)
    uninstall
    echo "build-node-llama-cpp: uninstalled (node-llama-cpp's prebuilt binding is used)"
    exit 0
    ;;
  "") ;;
  *)
    echo "build-node-llama-cpp: unknown argument '$1' (--print-path or --uninstall)" >&2
    exit 2
    ;;
esac

if [ -z "$platform_dir" ] || [ ! -f "$prebuilt/llama-addon.node" ]; then
  echo "build-node-llama-cpp: no prebuilt node-llama-cpp CPU binding for $(uname -m) at $prebuilt; nothing to patch (Turnpike uses the stock binding)" >&2
  exit 1
fi

install() {
  # node-llama-cpp's layout of a local build: localBuilds/<folder>/Release/{llama-addon.node, _nlcBuildMetadata.json, libs},
  # buildDone.status, and llama/lastBuild.json naming the folder (getLlama("lastBuild") loads it).
  rm -rf "$install_dir"
  mkdir -p "$install_dir"
  ln -s "$target_dir/Release" "$install_dir/Release"
  : > "$install_dir/buildDone.status"
  printf '{\n    "folderName": "%s"\n}\n' "$FOLDER" > "$last_build"
  echo "build-node-llama-cpp: installed $target_dir/Release as node-llama-cpp's last build"
}

if [ -f "$target_dir/Release/llama-addon.node" ]; then
  echo "build-node-llama-cpp: already built"
  install
  exit 0
fi

jobs="${NODE_LLAMA_CPP_BUILD_JOBS:-2}"
echo "build-node-llama-cpp: building node-llama-cpp $version's binding (llama.cpp ${commit:0:12}) with Turnpike's patch into $target_dir with $jobs jobs"
mkdir -p "$cache_dir"
find "$cache_dir" -mindepth 1 -maxdepth 1 -name '.build-*' -mmin +180 -exec rm -rf {} + 2>/dev/null || true
work="$(mktemp -d "$cache_dir/.build-$key.XXXXXX")"
# node-llama-cpp builds inside its own package folder: the patch is taken back, and its llama.cpp
# clone and build folders removed, however this ends.
cleanup() {
  if [ -f "$work/patched" ]; then patch -p1 -R --silent -d "$package" < "$patch_file" || true; fi
  rm -rf "$package/llama/llama.cpp" "$package/llama/localBuilds/"*-release-* "$package/llama/localBuilds/"linux-* 2>/dev/null || true
  if [ -f "$last_build" ] && ! grep -q "\"$FOLDER\"" "$last_build"; then rm -f "$last_build"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
started=$SECONDS
node_bin="$root/node_modules/.bin"

echo "build-node-llama-cpp: cloning llama.cpp from the bundle"
(cd "$package" && PATH="$node_bin:$PATH" NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node-llama-cpp source download --skipBuild --noUsageExample --gpu false) > "$work/download.log" 2>&1 \
  || { tail -n 40 "$work/download.log" >&2; exit 1; }
patch -p1 --forward --silent -d "$package" < "$patch_file"
touch "$work/patched"

echo "build-node-llama-cpp: compiling the binding without llama.cpp's CPU backend (a few minutes on 2 cores)"
(
  cd "$package"
  export PATH="$node_bin:$PATH" NODE_LLAMA_CPP_SKIP_DOWNLOAD=true CMAKE_BUILD_PARALLEL_LEVEL="$jobs"
  # As node-llama-cpp's releases are built (its CI mode): no OpenMP, backends loaded at start.
  export NODE_LLAMA_CPP_CMAKE_OPTION_GGML_NATIVE=OFF NODE_LLAMA_CPP_CMAKE_OPTION_GGML_BACKEND_DL=ON \
    NODE_LLAMA_CPP_CMAKE_OPTION_GGML_CPU_ALL_VARIANTS=OFF NODE_LLAMA_CPP_CMAKE_OPTION_GGML_OPENMP=OFF \
    NODE_LLAMA_CPP_CMAKE_OPTION_GGML_CPU=OFF
  node-llama-cpp source build --gpu false --noUsageExample
) 2>&1 | tee "$work/build.log" | awk '/^\[ *[0-9]+(\/[0-9]+|%)\]/ { n++; if (n % 20 == 1) { print "build-node-llama-cpp: " $1 " " $2; fflush() } }'
if [ "${PIPESTATUS[0]}" != "0" ]; then
  tail -n 40 "$work/build.log" >&2
  exit 1
fi
built="$(find "$package/llama/localBuilds" -path "*/Release/llama-addon.node" -not -path "*/$FOLDER/*" | head -n 1)"
if [ -z "$built" ]; then
  echo "build-node-llama-cpp: the build finished without a llama-addon.node" >&2
  exit 1
fi

mkdir -p "$work/out/Release"
# The prebuilt release's libraries and CPU backends, then the patched addon and its build metadata over them.
cp -P "$prebuilt/"*.so* "$work/out/Release/"
cp "$built" "$work/out/Release/llama-addon.node"
cp "$(dirname "$built")/_nlcBuildMetadata.json" "$work/out/Release/_nlcBuildMetadata.json"
# A local build names its libraries with its folder's hash (libllama.v0.5.0.<hash>.so) where the
# release says libllama.v0.5.0.so: the addon asks for those names, which point at the release's files.
for library in "$(dirname "$built")"/lib*.so; do
  name="$(basename "$library")"
  [ -e "$work/out/Release/$name" ] && continue
  release_name="$(echo "$name" | sed -E 's/\.[0-9a-z]{8}\.so$/.so/')"
  if [ ! -e "$work/out/Release/$release_name" ]; then
    echo "build-node-llama-cpp: the build made $name, which the prebuilt release has no counterpart of" >&2
    exit 1
  fi
  ln -s "$release_name" "$work/out/Release/$name"
done
printf '{"nodeLlamaCpp":"%s","llamaCppCommit":"%s","patch":"%s","recipe":"%s"}\n' "$version" "$commit" "$patch_hash" "$RECIPE_REVISION" > "$work/out/turnpike-build.json"
# Loads and says it carries the patch, or nothing is cached.
(cd "$work/out/Release" && "$node_bin/node" -e 'const b = require("./llama-addon.node"); if (b.turnpikeEmbeddingSequences !== 1) { console.error("the built binding lacks the patch"); process.exit(1); }') \
  || { echo "build-node-llama-cpp: the patched binding does not load" >&2; exit 1; }
if ! mv -T "$work/out" "$target_dir" 2>/dev/null; then
  if [ ! -f "$target_dir/Release/llama-addon.node" ]; then
    echo "build-node-llama-cpp: could not move the build into $target_dir" >&2
    exit 1
  fi
fi
echo "build-node-llama-cpp: built in $((SECONDS - started)) s"
install
