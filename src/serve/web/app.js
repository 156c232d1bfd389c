// emberd's web page: the history of one event as a strip of its slots
// (drag to choose a time range), and the flame graph of that range drawn on
// a canvas (hover, click to zoom, browser back to unzoom, search). All state
// lives in the URL's fragment, so a view can be shared as a link. Data
// comes from /heatmap.json and /profile.json of this daemon only.
'use strict';
(function () {
  const EVENTS = ['cpu', 'offcpu', 'wakeup', 'offwake', 'pagefault', 'blockio', 'brk', 'mmap',
    'munmap', 'malloc', 'malloc_objects'];
  const ROW = 16; // flame graph row height, CSS pixels
  const $ = (id) => document.getElementById(id);
  const state = {
    event: 'cpu', range: 3600, from: 0, to: 0, zoom: '', search: '', icicle: false,
    comm: '', pid: '', group: 'process',
  };
  let heat = null; // /heatmap.json
  let prof = null; // /profile.json plus its layout
  let rects = null; // drawn flame rectangles, for hit tests
  let drag = null;
  const api = { state, loads: 0, error: '' };
  window.emberd = api;

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    state.event = h.get('event') || 'cpu';
    state.range = +(h.get('range') || 3600);
    state.from = +(h.get('from') || 0);
    state.to = +(h.get('to') || 0);
    state.zoom = h.get('zoom') || '';
    state.search = h.get('search') || '';
    state.icicle = h.get('icicle') === '1';
    state.comm = h.get('comm') || '';
    state.pid = h.get('pid') || '';
    state.group = h.get('group') || 'process';
  }

  function writeHash(push) {
    const h = new URLSearchParams();
    for (const k of ['event', 'range', 'from', 'to', 'zoom', 'search', 'comm', 'pid', 'group']) {
      if (state[k] !== '' && state[k] !== 0) h.set(k, state[k]);
    }
    if (state.icicle) h.set('icicle', '1');
    const url = '#' + h.toString();
    if (url === location.hash) return;
    if (push) history.pushState(null, '', url);
    else history.replaceState(null, '', url);
  }

  function filters() {
    const p = new URLSearchParams({ event: state.event, group: state.group });
    if (state.comm) p.set('comm', state.comm);
    if (state.pid) p.set('pid', state.pid);
    return p;
  }

  async function fetchJson(url) {
    const r = await fetch(url);
    const text = await r.text();
    if (!r.ok) throw new Error(text.trim() || r.statusText);
    return JSON.parse(text);
  }

  function status(msg) {
    $('status').textContent = msg;
  }

  function syncControls() {
    $('event').value = state.event;
    $('range').value = String(state.range);
    $('comm').value = state.comm;
    $('pid').value = state.pid;
    $('group').value = state.group;
    $('search').value = state.search;
    $('icicle').checked = state.icicle;
  }

  // ---- the history strip ----

  function fitCanvas(c, cssHeight) {
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth;
    c.width = Math.round(w * dpr);
    c.height = Math.round(cssHeight * dpr);
    c.style.height = cssHeight + 'px';
    const ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, w, h: cssHeight };
  }

  function timeToX(t) {
    const c = $('heatmap');
    if (!heat || heat.to <= heat.from) return 0;
    return (t - heat.from) / (heat.to - heat.from) * c.clientWidth;
  }

  function xToTime(x) {
    const c = $('heatmap');
    return heat.from + x / c.clientWidth * (heat.to - heat.from);
  }
  api.timeToX = timeToX;

  async function loadHeat() {
    const p = filters();
    p.set('seconds', state.range);
    try {
      heat = await fetchJson('heatmap.json?' + p);
      api.error = '';
    } catch (e) {
      heat = null;
      api.error = e.message;
      $('selection-info').textContent = e.message;
    }
    drawHeat();
  }

  function drawHeat() {
    const { ctx, w, h } = fitCanvas($('heatmap'), 90);
    ctx.clearRect(0, 0, w, h);
    if (!heat) return;
    let max = 0;
    for (const [, len, v] of heat.slots) max = Math.max(max, v / len);
    // Colour: the rate of each slot (value per second); the line on top
    // reads the same rate for long ranges.
    for (const [start, len, v] of heat.slots) {
      const x0 = timeToX(start), x1 = timeToX(start + len);
      const f = max > 0 ? v / len / max : 0;
      ctx.fillStyle = f > 0 ? `rgb(255,${Math.round(235 - 180 * f)},${Math.round(200 - 200 * f)})` : '#f4f4f4';
      ctx.fillRect(x0, 0, Math.max(1, x1 - x0), h - 14);
    }
    ctx.strokeStyle = '#840';
    ctx.beginPath();
    heat.slots.forEach(([start, len, v], i) => {
      const x = timeToX(start + len / 2), y = (h - 16) - (max > 0 ? v / len / max : 0) * (h - 24);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = '#555';
    ctx.font = '11px sans-serif';
    const step = Math.max(1, Math.ceil((heat.to - heat.from) / 8));
    for (let t = heat.from; t < heat.to; t += step) {
      ctx.fillText(new Date(t * 1000).toLocaleTimeString(), timeToX(t) + 2, h - 3);
    }
    const sel = drag ? [Math.min(drag.t0, drag.t1), Math.max(drag.t0, drag.t1)] : [state.from, state.to];
    if (sel[1] > sel[0]) {
      ctx.fillStyle = 'rgba(40,90,220,0.25)';
      ctx.fillRect(timeToX(sel[0]), 0, Math.max(2, timeToX(sel[1]) - timeToX(sel[0])), h - 14);
    }
  }

  function heatX(ev) {
    return ev.clientX - $('heatmap').getBoundingClientRect().left;
  }

  function onHeatDown(ev) {
    if (!heat) return;
    const t = xToTime(heatX(ev));
    drag = { t0: t, t1: t };
    drawHeat();
  }

  function onHeatMove(ev) {
    if (!drag) return;
    drag.t1 = xToTime(heatX(ev));
    drawHeat();
  }

  function onHeatUp() {
    if (!drag) return;
    const a = Math.floor(Math.min(drag.t0, drag.t1));
    const b = Math.ceil(Math.max(drag.t0, drag.t1));
    drag = null;
    state.from = a;
    state.to = Math.max(b, a + 1);
    state.zoom = '';
    writeHash(true);
    loadProfile();
  }

  // ---- the flame graph ----

  async function loadProfile() {
    if (!heat) return;
    if (!state.from || !state.to) {
      state.to = heat.to;
      state.from = Math.max(heat.from, heat.to - 60);
      writeHash(false);
    }
    drawHeat();
    const p = filters();
    p.set('from', state.from);
    p.set('to', state.to);
    const from = new Date(state.from * 1000).toLocaleTimeString();
    const to = new Date(state.to * 1000).toLocaleTimeString();
    $('selection-info').textContent = `${from} to ${to} (${state.to - state.from} s)`;
    status('loading...');
    try {
      const t = await fetchJson('profile.json?' + p);
      prof = layout(t);
      api.error = '';
    } catch (e) {
      prof = null;
      api.error = e.message;
      status(e.message);
    }
    api.loads += 1;
    draw();
  }

  function layout(t) {
    const n = t.nodes.length;
    const x = new Float64Array(n), next = new Float64Array(n), depth = new Int32Array(n);
    const child = new Map();
    let maxDepth = 0;
    for (let i = 0; i < n; i++) {
      const [name, total, , parent] = t.nodes[i];
      if (parent < 0) {
        x[i] = 0;
      } else {
        x[i] = next[parent];
        next[parent] += total;
        depth[i] = depth[parent] + 1;
        child.set(parent + ':' + name, i);
        if (depth[i] > maxDepth) maxDepth = depth[i];
      }
      next[i] = x[i];
    }
    return Object.assign(t, { x, depth, child, maxDepth });
  }

  function pathOf(i) {
    const names = [];
    while (i > 0) {
      names.push(prof.names[prof.nodes[i][0]]);
      i = prof.nodes[i][3];
    }
    return names.reverse().join(';');
  }

  function nodeOfPath(path) {
    if (!path) return 0;
    let i = 0;
    for (const name of path.split(';')) {
      const id = prof.names.indexOf(name);
      const c = prof.child.get(i + ':' + id);
      if (c === undefined) return 0;
      i = c;
    }
    return i;
  }

  function color(name, hit) {
    if (hit) return 'rgb(230,0,230)';
    let h = 0;
    for (let k = 0; k < name.length; k++) h = (h * 31 + name.charCodeAt(k)) >>> 0;
    const kernel = name.endsWith('_[k]');
    const r = kernel ? 200 + (h % 40) : 205 + (h % 50);
    const g = kernel ? 120 + ((h >> 8) % 60) : 80 + ((h >> 8) % 130);
    const b = kernel ? 40 : 30 + ((h >> 16) % 40);
    return `rgb(${r},${g},${b})`;
  }

  function matcher() {
    if (!state.search) return null;
    try {
      return new RegExp(state.search);
    } catch (e) {
      return null;
    }
  }

  function draw() {
    const c = $('flame');
    if (!prof) {
      fitCanvas(c, 40);
      return;
    }
    const rows = prof.maxDepth + 1;
    const { ctx, w, h } = fitCanvas(c, rows * ROW + 4);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px monospace';
    ctx.textBaseline = 'middle';
    const z = nodeOfPath(state.zoom);
    const zx = prof.x[z], zw = prof.nodes[z][1] || 1;
    const re = matcher();
    const hit = re ? prof.names.map((s) => re.test(s)) : null;
    // Ancestors of the zoomed node are drawn whole width.
    const ancestor = new Set();
    for (let a = z; a >= 0; a = prof.nodes[a][3]) ancestor.add(a);
    const zd = prof.depth[z];
    rects = [];
    let matched = 0;
    const covered = new Uint8Array(prof.nodes.length);
    for (let i = 0; i < prof.nodes.length; i++) {
      const [name, total, , parent] = prof.nodes[i];
      const m = hit ? hit[name] : false;
      covered[i] = (parent >= 0 && covered[parent]) || m ? 1 : 0;
      if (m && !(parent >= 0 && covered[parent])) matched += total;
      let px, pw;
      if (ancestor.has(i)) {
        px = 0;
        pw = w;
      } else if (prof.depth[i] > zd && prof.x[i] >= zx && prof.x[i] + total <= zx + zw + 1e-9) {
        px = (prof.x[i] - zx) / zw * w;
        pw = total / zw * w;
      } else {
        continue;
      }
      if (pw < 0.3) continue;
      const d = prof.depth[i];
      const py = state.icicle ? d * ROW : (rows - 1 - d) * ROW;
      ctx.fillStyle = color(prof.names[name], m);
      ctx.fillRect(px, py, Math.max(pw - 0.5, 0.3), ROW - 1);
      if (pw > 28) {
        ctx.fillStyle = '#000';
        const label = prof.names[name];
        const fit = Math.floor((pw - 6) / 6.6);
        ctx.fillText(label.length > fit ? label.slice(0, Math.max(fit - 2, 0)) + '..' : label, px + 3, py + ROW / 2);
      }
      rects.push([px, py, pw, i]);
    }
    const total = prof.nodes.length ? prof.nodes[0][1] : 0;
    api.matchedShare = re && total ? matched / total : 0;
    $('matched').textContent = re ? `matched ${(api.matchedShare * 100).toFixed(1)}% of total` : '';
    status(`${prof.nodes.length - 1} frames, ${fmt(total)} in all` + (z ? `, zoomed to ${prof.names[prof.nodes[z][0]]}` : ''));
  }

  function fmt(v) {
    const [unit, factor] = prof.display;
    const x = v * factor;
    return (factor === 1 ? String(x) : x.toFixed(1)) + ' ' + unit;
  }

  function rectAt(ev) {
    if (!rects) return null;
    const b = $('flame').getBoundingClientRect();
    const x = ev.clientX - b.left, y = ev.clientY - b.top;
    for (const [px, py, pw, i] of rects) {
      if (x >= px && x < px + pw && y >= py && y < py + ROW) return i;
    }
    return null;
  }

  function onFlameMove(ev) {
    const tip = $('tooltip');
    const i = rectAt(ev);
    if (i === null) {
      tip.hidden = true;
      return;
    }
    const [name, total, own, parent] = prof.nodes[i];
    const all = prof.nodes[0][1] || 1;
    const ofParent = parent >= 0 ? total / (prof.nodes[parent][1] || 1) : 1;
    tip.textContent = `${prof.names[name]}\n${fmt(total)} (${(total / all * 100).toFixed(2)}% of total, ` +
      `${(ofParent * 100).toFixed(1)}% of parent), self ${fmt(own)}`;
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 420) + 'px';
    tip.style.top = ev.clientY + 14 + 'px';
  }

  function onFlameClick(ev) {
    const i = rectAt(ev);
    if (i === null) return;
    state.zoom = pathOf(i);
    writeHash(true);
    draw();
  }

  // Totals per frame name (each name counted once per stack), for tests
  // and scripts that read the page.
  api.frameTotals = function () {
    const out = {};
    if (!prof) return out;
    const seen = new Map();
    for (let i = 1; i < prof.nodes.length; i++) {
      const [name, total, , parent] = prof.nodes[i];
      // Count a name only where no ancestor has it (recursion).
      let a = parent, dup = false;
      while (a > 0) {
        if (prof.nodes[a][0] === name) { dup = true; break; }
        a = prof.nodes[a][3];
      }
      if (dup) continue;
      const key = prof.names[name];
      seen.set(key, (seen.get(key) || 0) + total);
    }
    for (const [k, v] of seen) out[k] = v;
    return out;
  };
  api.zoomed = () => (prof ? pathOf(nodeOfPath(state.zoom)) : '');
  api.clickFrame = function (name) {
    const r = rects && rects.find(([, , , i]) => prof.names[prof.nodes[i][0]] === name);
    if (!r) return false;
    state.zoom = pathOf(r[3]);
    writeHash(true);
    draw();
    return true;
  };

  // ---- wiring ----

  function onHashChange() {
    const before = [state.event, state.range, state.from, state.to, state.comm, state.pid, state.group].join();
    readHash();
    syncControls();
    const after = [state.event, state.range, state.from, state.to, state.comm, state.pid, state.group].join();
    if (before !== after) {
      loadHeat().then(loadProfile);
    } else {
      draw();
    }
  }

  function init() {
    const sel = $('event');
    for (const e of EVENTS) sel.add(new Option(e, e));
    readHash();
    syncControls();
    const reload = (clearWindow) => () => {
      state.event = $('event').value;
      state.range = +$('range').value;
      state.comm = $('comm').value.trim();
      state.pid = $('pid').value.trim();
      state.group = $('group').value;
      if (clearWindow) { state.from = 0; state.to = 0; }
      state.zoom = '';
      writeHash(true);
      loadHeat().then(loadProfile);
    };
    $('event').addEventListener('change', reload(false));
    $('range').addEventListener('change', reload(false));
    $('group').addEventListener('change', reload(false));
    $('comm').addEventListener('change', reload(false));
    $('pid').addEventListener('change', reload(false));
    $('refresh').addEventListener('click', reload(true));
    $('search').addEventListener('input', () => {
      state.search = $('search').value;
      writeHash(false);
      draw();
    });
    $('icicle').addEventListener('change', () => {
      state.icicle = $('icicle').checked;
      writeHash(false);
      draw();
    });
    $('reset').addEventListener('click', () => {
      state.zoom = '';
      writeHash(true);
      draw();
    });
    const hm = $('heatmap');
    hm.addEventListener('mousedown', onHeatDown);
    window.addEventListener('mousemove', onHeatMove);
    window.addEventListener('mouseup', onHeatUp);
    const fl = $('flame');
    fl.addEventListener('mousemove', onFlameMove);
    fl.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
    fl.addEventListener('click', onFlameClick);
    window.addEventListener('hashchange', onHashChange);
    window.addEventListener('popstate', onHashChange);
    window.addEventListener('resize', () => { drawHeat(); draw(); });
    loadHeat().then(loadProfile);
  }

  init();
})();
