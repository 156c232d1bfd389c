// A busy JS function for argv[2] seconds; run with node --perf-basic-prof.
'use strict';
const seconds = Number(process.argv[2] || 10);
function emberdBusyJsWork(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x + i * 31) % 1000003;
  return x;
}
const end = Date.now() + seconds * 1000;
let sink = 0;
while (Date.now() < end) sink += emberdBusyJsWork(2e6);
console.log(sink > 0 ? 'done' : 'done.');
