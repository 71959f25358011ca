#!/usr/bin/env bash
# Install what qfold's build and tests need, idempotently.
#   scripts/deps.sh          build + test dependencies
#   scripts/deps.sh --build  only what the build needs
# Debian packages are installed only when missing; onnxruntime-node and
# node-tflite go into tests/node_modules (git-ignored), skipped when the right
# versions are there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs=(build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler
            libonnx-dev libdnnl-dev flatbuffers-compiler libflatbuffers-dev)
test_pkgs=(python3-torch python3-torchvision python3-onnx python3-numpy python3-pytest python3-venv python3-pip
           python3-setuptools nodejs npm dataset-fashion-mnist
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

# npm packages of the tests, installed together in one command: npm prunes
# what a --no-save install does not name, so installing one alone would
# remove the other. --ignore-scripts: onnxruntime-node's post-install would
# download GPU binaries from an unreachable host and node-tflite's would build
# a Node addon the tests do not use (they load its prebuilt TensorFlow Lite C
# library, libtensorflowlite_c.so, through Python's ctypes).
npm_pkgs=(onnxruntime-node@1.30.0 node-tflite@0.0.2)
npm_missing=0
for spec in "${npm_pkgs[@]}"; do
  name=${spec%@*} ver=${spec##*@}
  pj="$here/tests/node_modules/$name/package.json"
  if [ ! -f "$pj" ] || ! grep -q "\"version\": \"$ver\"" "$pj"; then npm_missing=1; fi
done
if [ "$npm_missing" = 1 ]; then
  echo "deps: installing ${npm_pkgs[*]} (npm)"
  (cd "$here/tests" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --silent \
     --no-save --ignore-scripts --prefix "$here/tests" "${npm_pkgs[@]}")
fi
echo "deps: ok"
