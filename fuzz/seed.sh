#!/bin/sh
# Collect a seed corpus for the fuzzers from what the tests generate.
#   fuzz/seed.sh BUILD_DIR OUT_DIR
# BUILD_DIR is a build whose ctest has run (its tests/work holds the small
# models and arrays the tests write); OUT_DIR gets onnx/ and npy/ seeds.
set -eu
build=$1
out=$2
mkdir -p "$out/onnx" "$out/npy"
find "$build/tests/work" -name '*.onnx' -size -64k | while read -r f; do
    cp "$f" "$out/onnx/$(printf '%s' "$f" | cksum | cut -d' ' -f1).onnx"
done
find "$build/tests/work" -name '*.npy' -size -16k | while read -r f; do
    cp "$f" "$out/npy/$(printf '%s' "$f" | cksum | cut -d' ' -f1).npy"
done
echo "$(ls "$out/onnx" | wc -l) onnx seeds, $(ls "$out/npy" | wc -l) npy seeds in $out"
