// A Node.js service-like workload (issue 46): six jobs run in turn from
// the event loop (setImmediate), each for a slice of wall time, as a
// server's handlers run: a hot chain TurboFan inlines, a class method
// sorting with a closure, hashing a large buffer (C++ in node), a
// recursion 300 deep, a function too large for the optimizing compilers
// (it stays in V8's interpreter or its baseline compiler), and an async
// function that burns its slice after awaiting a timer. A worker thread
// runs functions of its own beside them, a quarter of the time. Prints
// "started" once warm, ends after argv[2] seconds (or at SIGTERM) through
// process.exit, so `node --cpu-prof` writes its profiles (one per thread).
'use strict';
const crypto = require('crypto');
const vm = require('vm');
const { Worker, isMainThread } = require('worker_threads');

const seconds = Number(process.argv[2] || 10);
const SLICE_MS = 10;

function leafWork(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x + i * 31) % 1000003;
  return x;
}
function middleStep(n) { return leafWork(n) + 1; }
function outerJob(n) { return middleStep(n) * 2; }

class Sorter {
  constructor(n) { this.items = Array.from({ length: n }, (_, i) => (i * 7919) % n); }
  run() {
    const copy = this.items.slice();
    copy.sort((a, b) => a - b);
    return copy[0];
  }
}

const buffer = Buffer.alloc(4 << 20, 7);
function hashBuffer() {
  return crypto.createHash('sha256').update(buffer).digest('hex').length;
}

function recurse(depth) {
  if (depth === 0) return leafWork(2000);
  return recurse(depth - 1) + 1;
}

// Over 60 KB of bytecode: more than TurboFan and Maglev take, so it is
// never optimized. Compiled as its own script, named as a file would be.
const statements = [];
for (let i = 0; i < 6000; i++) statements.push(`x = (x * 31 + ${i}) % 1000003;`);
const stillInterpreted = vm.runInThisContext(
  `(function stillInterpreted(x) { ${statements.join(' ')} return x; })`,
  { filename: 'js_interp.js' },
);

// The worker's own functions: 5 ms of work, then 15 ms asleep.
function workerLeaf(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) x = (x + leafWork(500)) % 1000003;
  return x;
}
function workerLoop() {
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    workerLeaf(5);
    Atomics.wait(nap, 0, 0, 15);
  }
}
if (!isMainThread) {
  workerLoop();
}

let sink = 0;
function runFor(job, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) sink += job();
}
const sorter = new Sorter(20000);
function chainJob() { runFor(() => outerJob(20000), SLICE_MS); }
function sortJob() { runFor(() => sorter.run(), SLICE_MS); }
function hashJob() { runFor(hashBuffer, SLICE_MS); }
function deepJob() { runFor(() => recurse(300), SLICE_MS); }
function interpJob() { runFor(() => stillInterpreted(7), SLICE_MS); }
async function asyncJob() {
  await new Promise((resolve) => setTimeout(resolve, 1));
  runFor(() => leafWork(5000), SLICE_MS);
}

const jobs = [chainJob, sortJob, hashJob, deepJob, interpJob, asyncJob];
if (isMainThread) new Worker(__filename, { argv: ['0'] });
let turn = 0;
const started = Date.now();
let said = false;
function next() {
  if (Date.now() - started > seconds * 1000) {
    console.log(sink > 0 ? 'done' : 'done.');
    process.exit(0);
  }
  if (!said && Date.now() - started > 1000) {
    said = true;
    console.log('started');
  }
  jobs[turn++ % jobs.length]();
  setImmediate(next);
}
if (isMainThread) setImmediate(next);
// SIGTERM ends it early the same way, profiles written: a test that has
// recorded what it needs does not wait out argv[2].
if (isMainThread) process.on('SIGTERM', () => process.exit(0));
