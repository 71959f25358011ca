#!/usr/bin/env bash
# Install what qfold's build and tests need, idempotently.
#   scripts/deps.sh          build + test dependencies
#   scripts/deps.sh --build  only what the build needs
# Debian packages are installed only when missing; onnxruntime-node goes into
# tests/node_modules (git-ignored), skipped when the right version is there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs=(build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler
            libonnx-dev libdnnl-dev flatbuffers-compiler libflatbuffers-dev)
test_pkgs=(python3-torch python3-torchvision python3-onnx python3-numpy nodejs npm dataset-fashion-mnist
           python3-flatbuffers python3-pyarmnn libarmnn-cpuref-backend22)

want=("${build_pkgs[@]}")
[ "${1:-}" = "--build" ] || want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (a machine image); accept them.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  tmp=()
  for p in "${missing[@]}"; do [ "$p" = nodejs ] || [ "$p" = npm ] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--build" ] && exit 0

ort_ver=1.30.0
ort_dir="$here/tests/node_modules/onnxruntime-node"
if [ ! -f "$ort_dir/package.json" ] || ! grep -q "\"version\": \"$ort_ver\"" "$ort_dir/package.json"; then
  echo "deps: installing onnxruntime-node@$ort_ver (npm)"
  # The post-install step would download GPU binaries from an unreachable host;
  # the CPU binaries ship inside the package, so skip it.
  (cd "$here/tests" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --silent \
     --no-save --prefix "$here/tests" "onnxruntime-node@$ort_ver")
fi
echo "deps: ok"
