# Turnpike's container image.
#   CPU (the default target):  docker build -t turnpike .                    (or podman build)
#   CUDA:                      docker build --target cuda -t turnpike:cuda .
#
# Stages: `dependencies` (production node_modules, no install scripts), `console` (every dependency,
# to build the web console with Vite), `runtime` (node, node_modules, the server's TypeScript, which
# Node 24 runs as is, and console/dist; llama.cpp's CPU backends; no compilers), `cuda` (runtime plus
# node-llama-cpp's prebuilt CUDA backends and the CUDA libraries they link). The image runs as uid
# 1000 on a read-only root filesystem: everything it writes goes to the volume at /data.

ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS dependencies
WORKDIR /app
# node-llama-cpp ships prebuilt binaries as optional packages: never download or build llama.cpp.
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY package.json package-lock.json ./
# `npm install` from the lockfile, as CI does (`npm ci` refuses this lockfile: it lacks
# node-llama-cpp's optional packages for riscv64, macOS and Windows, which the registry it was made
# against does not hold). Of node-llama-cpp's prebuilt backends the CPU one of this architecture
# stays, the CUDA ones are set aside for `cuda`, the rest (Vulkan, other architectures) go, and so
# does the llama.cpp source bundle, used only to build llama.cpp. TypeScript (node-llama-cpp's
# optional peer, which npm keeps as a dev-or-optional package) is never loaded: Node strips the
# types itself.
RUN --mount=type=cache,target=/root/.npm \
    npm install --omit=dev --ignore-scripts --no-audit --no-fund \
 && platform="linux-$(node -p process.arch)" && mkdir /gpu-backends \
 && for backend in node_modules/@node-llama-cpp/*; do \
      case "${backend##*/}" in \
        "$platform") ;; \
        "$platform"-cuda*) mv "$backend" /gpu-backends/ ;; \
        *) rm -rf "$backend" ;; \
      esac; \
    done \
 && rm -rf node_modules/node-llama-cpp/llama/gitRelease.bundle node_modules/typescript node_modules/@typescript

FROM ${NODE_IMAGE} AS console
WORKDIR /app
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm install --ignore-scripts --no-audit --no-fund
COPY console console
COPY src/protocol src/protocol
RUN node console/build.ts

FROM ${NODE_IMAGE} AS runtime
WORKDIR /app
ENV NODE_ENV=production \
    NODE_LLAMA_CPP_SKIP_DOWNLOAD=true \
    TURNPIKE_HOST=0.0.0.0 \
    TURNPIKE_PORT=8080 \
    TURNPIKE_DATA_DIR=/data
COPY --from=dependencies /app/node_modules node_modules
COPY --from=console /app/console/dist console/dist
COPY package.json ./
COPY bin bin
COPY src src
RUN mkdir -p /data && chown 1000:1000 /data
VOLUME /data
USER 1000:1000
EXPOSE 8080
ENTRYPOINT ["node", "bin/turnpike.js"]
CMD ["serve"]

FROM runtime AS cuda
USER root
# The CUDA 13 runtime and cuBLAS that node-llama-cpp's prebuilt CUDA backend links, from NVIDIA's
# Debian 12 repository; the driver comes from the host (NVIDIA container toolkit: --gpus all, or CDI).
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/cuda-keyring.deb
RUN dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update && apt-get install -y --no-install-recommends cuda-cudart-13-0 libcublas-13-0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=dependencies /gpu-backends/ node_modules/@node-llama-cpp/
ENV LD_LIBRARY_PATH=/usr/local/cuda-13.0/lib64 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    TURNPIKE_GPU=cuda
USER 1000:1000

# The default target: the CPU image.
FROM runtime
