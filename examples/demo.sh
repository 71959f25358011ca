#!/usr/bin/env bash
# The bundled examples end to end: describe the small CNN, run it with qfold's
# reference executor and compare with PyTorch's output, fold its BatchNorms;
# then the post-training path on a model trained on Fashion-MNIST: fuse,
# quantize to int8 for the Neutron NPU, evaluate float vs int8, export to TFLite.
#   examples/demo.sh [QFOLD_BINARY]       (default: build/qfold)
# Files it writes go to out/demo/ (git-ignored): the output and a DOT graph.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
qfold=${1:-build/qfold}
shown=$qfold   # as the user typed it, for the echoed commands
# The binary path is relative to where the script was started; resolve it
# before moving to the repository root.
case "$qfold" in
  */*) qfold=$(cd "$(dirname "$qfold")" && pwd)/$(basename "$qfold") ;;
esac
cd "$root"
if ! command -v "$qfold" >/dev/null 2>&1; then
  echo "demo: no qfold binary at '$qfold' (run 'make' first)" >&2
  exit 2
fi
out=out/demo
mkdir -p "$out"
model=examples/tiny_cnn.onnx

# Echo a qfold command line (bold on a terminal), then run it.
bold="" plain=""
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; fi
step() {
  printf '\n%s$ %s %s%s\n' "$bold" "$shown" "${*:2}" "$plain"
  "$@"
}

step "$qfold" --version
step "$qfold" inspect "$model" --dot "$out/tiny_cnn.dot"
step "$qfold" run "$model" -i examples/input.npy -o "$out/logits.npy"

# Compare an output with PyTorch's (examples/expected.npy, made by
# make_example.py). The error is relative to the output's scale:
# max |qfold - torch| / max |torch|; the top class must agree too.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
have_numpy=false
"$py" -c 'import numpy' >/dev/null 2>&1 && have_numpy=true
compare() {
  if ! $have_numpy; then
    echo "demo: numpy is not available ($py): output not compared (scripts/deps.sh installs it)"
    return 0
  fi
  "$py" - "$1" examples/expected.npy "$2" <<'EOF'
import sys
import numpy as np
got, want, what = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3]
if got.shape != want.shape or got.dtype != want.dtype:
    print("demo: FAIL: %s output is %s %s, PyTorch gave %s %s"
          % (what, got.dtype, list(got.shape), want.dtype, list(want.shape)))
    sys.exit(1)
err = float(np.max(np.abs(got.astype(np.float64) - want)))
scale = float(np.max(np.abs(want)))
rel = err / scale if scale > 0 else err
ok = rel <= 1e-4 and np.argmax(got) == np.argmax(want)
print("%s vs PyTorch: max abs error %.3g, relative %.3g, top class %d vs %d -> %s"
      % (what, err, rel, int(np.argmax(got)), int(np.argmax(want)), "OK" if ok else "FAIL"))
sys.exit(0 if ok else 1)
EOF
}
echo
compare "$out/logits.npy" "qfold run"

bn_count() { "$qfold" inspect "$1" | sed -n 's/^batch norms *//p'; }
nbn=$(bn_count "$model")
files="$out/logits.npy, $out/tiny_cnn.dot"
if $have_numpy; then agree="matches PyTorch (relative error <= 1e-4)"; else agree="ran (not compared)"; fi
summary=("$model: $nbn BatchNormalization nodes; 'qfold run' $agree")

# Fold the BatchNorms (when this qfold has the fuse command), run the folded
# model and compare it with PyTorch too.
if "$qfold" help fuse >/dev/null 2>&1; then
  step "$qfold" fuse "$model" -o "$out/tiny_cnn_fused.onnx" --verify --report "$out/fuse_report.json"
  step "$qfold" run "$out/tiny_cnn_fused.onnx" -i examples/input.npy -o "$out/logits_fused.npy"
  echo
  compare "$out/logits_fused.npy" "fused model"
  summary+=("'qfold fuse': $(bn_count "$out/tiny_cnn_fused.onnx") BatchNormalization nodes left; the folded model $agree")
  files="$files, $out/tiny_cnn_fused.onnx, $out/fuse_report.json"
fi

# The post-training path on the Fashion-MNIST CNN (Debian's dataset-fashion-mnist,
# installed by scripts/deps.sh): fold, quantize for Neutron, evaluate on the
# 10,000 test images.
fm=examples/fashion_mnist
if "$qfold" help quantize >/dev/null 2>&1 && $have_numpy && [ -d /usr/share/datasets/fashion-mnist ]; then
  echo
  echo "Fashion-MNIST: calibration (512 training images) and test (10,000 images) slices as .npy"
  "$py" "$fm/make_data.py" "$out/fashion" --calib 512 --test 10000
  step "$qfold" fuse "$fm/fashion_cnn.onnx" -o "$out/fashion_fused.onnx" --verify
  step "$qfold" quantize "$out/fashion_fused.onnx" -o "$out/fashion_int8.onnx" --calib "$out/fashion/calib.npy" \
       --target neutron --report "$out/quantize_report.json"
  step "$qfold" eval "$out/fashion_fused.onnx" --compare "$out/fashion_int8.onnx" \
       --data "$out/fashion/test.npy" --labels "$out/fashion/test_labels.npy"
  acc=$("$qfold" eval "$out/fashion_fused.onnx" --compare "$out/fashion_int8.onnx" \
        --data "$out/fashion/test.npy" --labels "$out/fashion/test_labels.npy" --json)
  summary+=("$("$py" -c '
import json, sys
r = json.loads(sys.argv[1])
f, q = r["models"][0]["top1"], r["models"][1]["top1"]
print("Fashion-MNIST: float top-1 %.2f %%, int8 (neutron) %.2f %%, top-1 agreement %.2f %%"
      % (100 * f, 100 * q, 100 * r["top1_agreement"]))' "$acc")")
  # The int8 model as the TFLite flatbuffer an NPU toolchain takes, with its
  # deployment report (flash, RAM, MACs).
  step "$qfold" export "$out/fashion_int8.onnx" -o "$out/fashion_int8.tflite" --report "$out/deploy_report.json"
  summary+=("$("$py" -c '
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
print("TFLite: %d ops, %.1f KiB file, %.1f KiB weights, %.1f KiB peak activations, %.2f M MACs"
      % (t["ops"], t["model_bytes"] / 1024, t["weight_bytes"] / 1024, t["peak_activation_bytes"] / 1024,
         t["macs"] / 1e6))' "$out/deploy_report.json")")
  files="$files, $out/fashion_int8.onnx, $out/quantize_report.json, $out/fashion_int8.tflite, $out/deploy_report.json"
fi

echo
echo "Summary:"
for line in "${summary[@]}"; do echo "  - $line"; done
echo "  - files: $files"
if command -v dot >/dev/null 2>&1; then
  echo "  - graph: dot -Tsvg $out/tiny_cnn.dot -o $out/tiny_cnn.svg"
fi
