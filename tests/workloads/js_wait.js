// Reads a pipe (argv[2]) synchronously, a line at a time, for argv[3]
// seconds (issue 46's off-CPU case): the main thread blocks in read(2)
// under readPipe() while the writer is slow.
'use strict';
const fs = require('fs');

const seconds = Number(process.argv[3] || 10);
const fd = fs.openSync(process.argv[2], 'r');
const buf = Buffer.alloc(64);

function readPipe() {
  return fs.readSync(fd, buf, 0, buf.length, null);
}

// A timer armed, as a server's are, due long after the run: its arm
// (bpf/node_timers.h) must not claim the read's waits, which are in
// read(2), not in the loop's poll.
setTimeout(() => {}, 600000).unref();

console.log('started');
const end = Date.now() + seconds * 1000;
let got = 0;
while (Date.now() < end) {
  const n = readPipe();
  if (n === 0) break;
  got += n;
}
console.log(got > 0 ? 'done' : 'done.');
