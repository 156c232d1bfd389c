// Awaits a 50 ms timer in a loop for argv[2] seconds (issue 46's off-CPU
// case): the thread sleeps in libuv's poll with no JavaScript on its
// stack, while waitTimer() is the function that waits.
'use strict';

const seconds = Number(process.argv[2] || 10);

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitTimer(end) {
  let rounds = 0;
  while (Date.now() < end) {
    await sleep(50);
    rounds++;
  }
  return rounds;
}

console.log('started');
waitTimer(Date.now() + seconds * 1000).then((n) => console.log(`done: ${n} rounds`));
