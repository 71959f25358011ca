// ONNX Runtime's basic-level optimizer writing its folded model: the speed
// peer of `qfold fuse` in bench/fuse.
//
//   node bench/ort_optimize.js IN.onnx OUT.onnx
//
// Prints one JSON line: {"create_ms": time of InferenceSession.create, which
// loads, optimizes (basic level: constant folding, Conv+BN fusion, ...) and
// writes OUT; "require_ms": loading onnxruntime-node itself}.
'use strict';
const path = require('path');
const t0 = process.hrtime.bigint();
const ort = require(path.join(__dirname, '..', 'tests', 'node_modules', 'onnxruntime-node'));
const t1 = process.hrtime.bigint();

async function main() {
  const [src, dst] = process.argv.slice(2);
  if (!src || !dst) throw new Error('usage: node ort_optimize.js IN.onnx OUT.onnx');
  const t2 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(src, {
    graphOptimizationLevel: 'basic',
    optimizedModelFilePath: dst,
    executionProviders: ['cpu'],
    intraOpNumThreads: 1,
  });
  const t3 = process.hrtime.bigint();
  if (session.release) await session.release();
  console.log(JSON.stringify({ require_ms: Number(t1 - t0) / 1e6, create_ms: Number(t3 - t2) / 1e6 }));
}

main().catch((e) => {
  console.error(`ort_optimize: ${e.message}`);
  process.exit(1);
});
