#!/usr/bin/env bash
# Installs what Hotline needs to build, test and run, from Debian's packages and PyPI. Idempotent:
# a second run installs nothing and takes seconds.
#   HOTLINE_VENV  where the Python environment lives (default ~/.cache/hotline/venv), outside the
#                 checkout so that fresh clones on the same machine reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libonnx-dev libprotobuf-dev protobuf-compiler libdnnl-dev
  ocl-icd-opencl-dev opencl-c-headers  # dnnl-config.cmake looks for OpenCL (not a Recommends)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev libhiredis-dev
  redis-server prometheus libcpp-httplib-dev tmux
  libssl-dev openssl curl        # TLS for gRPC and HTTP; the TLS tests make certificates, use curl
  iproute2                       # ss: the HTTP listen backlog test (tests/e2e/test_pressure.py)
  clang libclang-rt-dev          # the libFuzzer targets (fuzz/), run in make test and make fuzz
  libpq-dev postgresql           # work orders in PostgreSQL; tests run a throwaway cluster
  python3 python3-venv python3-pip python3-numpy python3-yaml
  python3-torch libopenblas0-openmp
  chromium chromium-driver fonts-wqy-zenhei  # the console's tests in headless Chromium (CJK font)
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python: Debian's interpreter with its python3-torch (1.13, CPU, OpenBLAS) visible, plus PyPI
# packages in a venv. PyPI's torch would pull several GB of CUDA libraries we do not need here.
VENV="${HOTLINE_VENV:-$HOME/.cache/hotline/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating Python environment in $VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
REQ=requirements.txt
STAMP="$VENV/.hotline-requirements"
if ! cmp -s "$REQ" "$STAMP" 2>/dev/null; then
  echo "setup: installing Python packages from $REQ"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  cp "$REQ" "$STAMP"
fi
# CUTLASS's C++ headers for the own FP8 GEMM (src/engine/cuda/fp8_gemm_sm90.h), from PyPI's
# nvidia-cutlass wheel; only its headers are used, so none of its Python dependencies.
CUTLASS_VERSION=4.2.0.0
if [ "$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('nvidia-cutlass'))" 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
  echo "setup: installing CUTLASS headers (nvidia-cutlass $CUTLASS_VERSION)"
  "$VENV/bin/python" -m pip install -q --no-deps "nvidia-cutlass==$CUTLASS_VERSION"
fi
echo "setup: ok (python: $VENV/bin/python)"
