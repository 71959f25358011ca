// ONNX Runtime's side of bench/run: create one session, then time
// session.run as often as the driver asks (same line protocol as
// bench/run_bench.c).
//
//   node bench/ort_run.js MODEL.onnx IN.npy THREADS [PROFILE]
//
// The session uses the CPU provider, graphOptimizationLevel 'all' (ORT's
// default: it folds BatchNorm itself), THREADS intra-op threads, one inter-op
// thread, sequential execution. Start-up prints {"create_ms": ...}; "run K"
// prints K wall times in ms; "save P" writes output 0 as raw float32 to P.
// With PROFILE (a file name prefix, bench/layers) ORT records every node's
// time, and "profile" ends the record (ORT writes it to PROFILE_<date>.json).
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const ort = require(path.join(__dirname, '..', 'tests', 'node_modules', 'onnxruntime-node'));

// A little-endian float32 C-order .npy (format 1.x/2.x).
function loadNpy(file) {
  const buf = fs.readFileSync(file);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  if (!/'descr':\s*'<f4'/.test(header) || /'fortran_order':\s*True/.test(header))
    throw new Error(`${file}: expected a C-order float32 array`);
  const dims = header.match(/'shape':\s*\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const off = hstart + hlen;
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + buf.length));
  return { data, dims };
}

async function main() {
  const [model, input, threads, profile] = process.argv.slice(2);
  if (!model || !input) throw new Error('usage: node ort_run.js MODEL.onnx IN.npy [THREADS]');
  const x = loadNpy(input);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: Number(threads || 2),
    interOpNumThreads: 1,
    ...(profile ? { enableProfiling: true, profileFilePrefix: profile } : {}),
  });
  const t1 = process.hrtime.bigint();
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) };
  let last = null;
  console.log(JSON.stringify({ create_ms: Number(t1 - t0) / 1e6 }));
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.startsWith('run ')) {
      const k = Number(line.slice(4));
      const times = [];
      for (let i = 0; i < k; i++) {
        const a = process.hrtime.bigint();
        last = await session.run(feeds);
        times.push((Number(process.hrtime.bigint() - a) / 1e6).toFixed(3));
      }
      console.log(times.join(' '));
    } else if (line.startsWith('save ')) {
      const y = last[session.outputNames[0]].data;
      fs.writeFileSync(line.slice(5), Buffer.from(y.buffer, y.byteOffset, y.byteLength));
      console.log('ok');
    } else if (line === 'profile') {
      // With PROFILE: ends ORT's per-node record (written to PROFILE_<date>.json).
      if (profile) session.endProfiling();
      console.log('ok');
    } else if (line === 'quit') {
      break;
    } else {
      throw new Error(`bad request: ${line}`);
    }
  }
  if (session.release) await session.release();
}

main().catch((e) => {
  console.error(`ort_run: ${e.message}`);
  process.exit(1);
});
