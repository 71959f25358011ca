// Run an ONNX model with ONNX Runtime (onnxruntime-node from tests/node_modules)
// on .npy inputs and write its outputs as .npy.
//
//   node ort_run.js MODEL.onnx OUTDIR IN0.npy [IN1.npy ...]
//
// Inputs are fed in the model's input order; output j (model output order) is
// written to OUTDIR/out<j>.npy. Supports .npy v1-3, little-endian, C order,
// float32/float64/float16/int8/uint8/int32/int64/bool. Exit status 1 on any error.
// QF_ORT_CHUNK=B runs the inputs B samples at a time (a model with a fixed
// batch B given more samples), the outputs stacked on dim 0.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

const DTYPES = {
  '<f4': ['float32', Float32Array, 4],
  '<f8': ['float64', Float64Array, 8],
  '<f2': ['float16', Uint16Array, 2],
  '|i1': ['int8', Int8Array, 1],
  '|u1': ['uint8', Uint8Array, 1],
  '<i4': ['int32', Int32Array, 4],
  '<i8': ['int64', BigInt64Array, 8],
  '|b1': ['bool', Uint8Array, 1],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  let hlen, off;
  if (major === 1) { hlen = buf.readUInt16LE(8); off = 10; } else { hlen = buf.readUInt32LE(8); off = 12; }
  const header = buf.toString('latin1', off, off + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const order = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !order || !shape) throw new Error(`${file}: bad .npy header`);
  if (order[1] === 'True') throw new Error(`${file}: Fortran order not supported`);
  const dt = DTYPES[descr[1]];
  if (!dt) throw new Error(`${file}: dtype ${descr[1]} not supported`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const start = off + hlen;
  if (buf.length < start + n * dt[2]) throw new Error(`${file}: truncated data`);
  const bytes = buf.subarray(start, start + n * dt[2]);
  const copy = new Uint8Array(bytes); // aligned copy
  const data = new dt[1](copy.buffer, 0, n);
  if (dt[0] === 'bool') return new ort.Tensor('bool', Uint8Array.from(data), dims);
  return new ort.Tensor(dt[0], data, dims);
}

function writeNpy(file, tensor) {
  const entry = Object.entries(DTYPES).find(([, v]) => v[0] === tensor.type);
  if (!entry) throw new Error(`output dtype ${tensor.type} not supported`);
  const [descr, [, , size]] = entry;
  const dims = tensor.dims;
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  const body = Buffer.from(data.buffer, data.byteOffset, data.length * size);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), body]));
}

async function main() {
  const [model, outdir, ...inputs] = process.argv.slice(2);
  if (!model || !outdir) throw new Error('usage: node ort_run.js MODEL.onnx OUTDIR IN0.npy ...');
  // QF_ORT_OPT=all lets ORT fuse QDQ groups into its integer kernels (the default: run as written).
  const session = await ort.InferenceSession.create(model, { graphOptimizationLevel: process.env.QF_ORT_OPT || 'disabled' });
  if (inputs.length !== session.inputNames.length) {
    throw new Error(`model has ${session.inputNames.length} inputs, got ${inputs.length} .npy files`);
  }
  const tensors = inputs.map(readNpy);
  // QF_ORT_CHUNK=B: run B samples (dim 0) at a time and stack the outputs,
  // for a model exported with a fixed batch B fed more samples.
  const chunk = Number(process.env.QF_ORT_CHUNK || 0);
  const n = tensors.length ? tensors[0].dims[0] : 0;
  const runs = chunk > 0 ? Math.ceil(n / chunk) : 1;
  const parts = session.outputNames.map(() => []);
  for (let c = 0; c < runs; c++) {
    const feeds = {};
    session.inputNames.forEach((name, i) => {
      const t = tensors[i];
      if (chunk <= 0) { feeds[name] = t; return; }
      const per = t.data.length / t.dims[0];
      const dims = [chunk, ...t.dims.slice(1)];
      feeds[name] = new ort.Tensor(t.type, t.data.slice(c * chunk * per, (c + 1) * chunk * per), dims);
    });
    const results = await session.run(feeds);
    session.outputNames.forEach((name, j) => parts[j].push(results[name]));
  }
  session.outputNames.forEach((name, j) => {
    const ps = parts[j];
    if (ps.length === 1) { writeNpy(path.join(outdir, `out${j}.npy`), ps[0]); return; }
    const total = ps.reduce((a, t) => a + t.data.length, 0);
    const data = new ps[0].data.constructor(total);
    let off = 0;
    for (const t of ps) { data.set(t.data, off); off += t.data.length; }
    const dims = [ps.reduce((a, t) => a + t.dims[0], 0), ...ps[0].dims.slice(1)];
    writeNpy(path.join(outdir, `out${j}.npy`), new ort.Tensor(ps[0].type, data, dims));
  });
}

main().catch((e) => { console.error(`ort_run: ${e.message}`); process.exit(1); });
