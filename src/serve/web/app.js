// emberd's web page: the history of one event as a strip of its slots
// (drag to choose a time range), the recent seconds as a FlameScope heat
// map of 20 ms rows (drag from cell to cell to choose a part of a second),
// and the flame graph of that range drawn on
// a canvas in a panel that fits the window and opens on its root (hover,
// click to zoom, browser back to unzoom, search). All state
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
    comm: '', unit: '', container: '', pid: '', tid: '', include: '', exclude: '', group: 'process', sandwich: '', before: '', phases: 0, sort: 'self',
  };
  let heat = null; // /heatmap.json
  let prof = null; // /profile.json plus its layout
  let rects = null; // drawn flame rectangles, for hit tests
  let drag = null;
  let tickDrag = null; // [ms, ms] while dragging over the sub-second map
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
    state.unit = h.get('unit') || '';
    state.container = h.get('container') || '';
    state.pid = h.get('pid') || '';
    state.tid = h.get('tid') || '';
    state.include = h.get('include') || '';
    state.exclude = h.get('exclude') || '';
    state.group = h.get('group') || 'process';
    state.sandwich = h.get('sandwich') || '';
    state.before = h.get('before') || '';
    state.phases = +(h.get('phases') || 0);
    state.sort = h.get('sort') || 'self';
  }

  function writeHash(push) {
    const h = new URLSearchParams();
    for (const k of ['event', 'range', 'from', 'to', 'zoom', 'search', 'comm', 'unit', 'container',
      'pid', 'tid', 'include', 'exclude', 'group',
      'sandwich', 'before', 'phases', 'sort']) {
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
    if (state.unit) p.set('unit', state.unit);
    if (state.container) p.set('container', state.container);
    if (state.pid) p.set('pid', state.pid);
    if (state.tid) p.set('tid', state.tid);
    if (state.include) p.set('include', state.include);
    if (state.exclude) p.set('exclude', state.exclude);
    return p;
  }

  // Login (src/serve/auth.rs says why): `emberd login` prints this page's
  // URL with a one-time code in the fragment (#login=CODE), which is never
  // sent to a server. The code leaves the address bar at once and is
  // traded for a session kept in this tab's sessionStorage, which only this
  // origin (this daemon's port) can read; the session goes as a header on
  // this page's own requests, never as a cookie (a cookie would go to every
  // port of the host). No cookie is sent at all (credentials: 'omit').
  const SESSION_KEY = 'emberd_session';
  const SESSION_HEADER = 'X-Emberd-Session';

  function takeLoginCode() {
    const h = new URLSearchParams(location.hash.slice(1));
    const code = h.get('login');
    if (!code) return '';
    h.delete('login');
    const rest = h.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
    return code;
  }

  async function login(code) {
    if (!code) return;
    const r = await fetch('login/session', { method: 'POST', body: code, credentials: 'omit' });
    const text = (await r.text()).trim();
    if (!r.ok) throw new Error(text || r.statusText);
    if (text) sessionStorage.setItem(SESSION_KEY, text);
  }

  function authHeaders() {
    const s = sessionStorage.getItem(SESSION_KEY);
    return s ? { [SESSION_HEADER]: s } : {};
  }

  // A framed SVG is loaded by URL, which carries no header: with a session
  // it carries a one-time view ticket instead (POST /login/view).
  async function viewUrl(url) {
    const h = authHeaders();
    if (!h[SESSION_HEADER]) return url;
    const r = await fetch('login/view', { method: 'POST', credentials: 'omit', headers: h });
    if (!r.ok) return url;
    return url + '&view=' + encodeURIComponent((await r.text()).trim());
  }
  api.loggedIn = () => !!sessionStorage.getItem(SESSION_KEY);

  // A 401's text says how to log in.
  async function fetchJson(url) {
    const r = await fetch(url, { credentials: 'omit', headers: authHeaders() });
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
    $('unit').value = state.unit;
    $('container').value = state.container;
    $('pid').value = state.pid;
    $('tid').value = state.tid;
    $('include').value = state.include;
    $('exclude').value = state.exclude;
    $('group').value = state.group;
    $('search').value = state.search;
    $('icicle').checked = state.icicle;
  }

  // ---- the history strip ----

  // Every canvas spans the page's width. Measured once and on resize:
  // reading an element's width after the page changed forces a layout of
  // the whole page (with its table), which cost more than the drawing.
  let width = 0;
  function canvasWidth() {
    if (!width) width = $('heatmap').clientWidth;
    return width;
  }

  // `cssWidth`: the flame panel's inside, narrower than the page by its
  // scrollbar's gutter.
  function fitCanvas(c, cssHeight, cssWidth) {
    const dpr = window.devicePixelRatio || 1;
    const w = cssWidth || canvasWidth();
    const pw = Math.round(w * dpr), ph = Math.round(cssHeight * dpr);
    // Resizing reallocates the canvas: only when the size changes.
    if (c.width !== pw || c.height !== ph) {
      c.width = pw;
      c.height = ph;
      c.style.height = cssHeight + 'px';
    }
    const ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, w, h: cssHeight };
  }

  // The unix second the daemon's history begins, if it told (older
  // daemons did not).
  function historyFrom() {
    return heat && typeof heat.history_from === 'number' ? heat.history_from : 0;
  }

  // A count as the legends write it: whole, or to a tenth.
  function num(x) {
    return Number.isInteger(x) ? String(x) : x.toFixed(1);
  }

  function timeToX(t) {
    if (!heat || heat.to <= heat.from) return 0;
    return (t - heat.from) / (heat.to - heat.from) * canvasWidth();
  }

  function xToTime(x) {
    return heat.from + x / canvasWidth() * (heat.to - heat.from);
  }
  api.timeToX = timeToX;

  async function loadHeat() {
    const p = filters();
    p.set('seconds', state.range);
    try {
      heat = await fetchJson('heatmap.json?' + p);
      api.heat = heat;
      api.error = '';
    } catch (e) {
      heat = null;
      api.error = e.message;
      $('selection-info').textContent = e.message;
    }
    drawHeat();
    // The sub-second map may have come or gone above the flame graph.
    boxHeight = 0;
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
    // Beyond a day a time alone is ambiguous: the date goes with it.
    const days = heat.to - heat.from > 86400;
    for (let t = heat.from; t < heat.to; t += step) {
      const d = new Date(t * 1000);
      const label = days
        ? d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' }) + ' ' +
          d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' })
        : d.toLocaleTimeString();
      ctx.fillText(label, timeToX(t) + 2, h - 3);
    }
    drawHistoryStart(ctx, h - 14);
    const sel = drag ? [Math.min(drag.t0, drag.t1), Math.max(drag.t0, drag.t1)] : [state.from, state.to];
    if (sel[1] > sel[0]) {
      // Filled and edged: a one-second selection in an hour is a pixel
      // wide, and the edges still show it.
      const x0 = timeToX(sel[0]), x1 = Math.max(x0 + 2, timeToX(sel[1]));
      ctx.fillStyle = 'rgba(40,90,220,0.25)';
      ctx.fillRect(x0, 0, x1 - x0, h - 14);
      ctx.fillStyle = 'rgb(40,90,220)';
      ctx.fillRect(x0 - 1, 0, 2, h - 14);
      ctx.fillRect(x1 - 1, 0, 2, h - 14);
      ctx.font = 'bold 11px sans-serif';
      const label = 'selected';
      const lw = ctx.measureText(label).width;
      ctx.fillText(label, x1 + 4 + lw < w ? x1 + 4 : Math.max(0, x0 - 4 - lw), 11);
    }
    heatLegend(max);
    drawTicks();
  }

  // Before the daemon's history begins the strip is empty because
  // nothing was recorded, not because nothing ran: hatched, with a line
  // and its time where the history begins.
  function drawHistoryStart(ctx, h) {
    const t0 = historyFrom();
    const note = $('history-start');
    if (!t0) {
      note.textContent = '';
      return;
    }
    const d0 = new Date(t0 * 1000);
    const clock = heat.to - heat.from > 86400 ? d0.toLocaleString() : d0.toLocaleTimeString();
    if (t0 <= heat.from) {
      note.textContent = `history since ${clock}`;
      return;
    }
    note.textContent = `no history before ${clock} (hatched): the daemon's history begins there`;
    const x = Math.min(timeToX(t0), canvasWidth());
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, 0, x, h);
    ctx.clip();
    ctx.fillStyle = '#ececec';
    ctx.fillRect(0, 0, x, h);
    ctx.strokeStyle = '#d2d2d2';
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = -h; k < x; k += 7) {
      ctx.moveTo(k, h);
      ctx.lineTo(k + h, 0);
    }
    ctx.stroke();
    ctx.restore();
    ctx.fillStyle = '#555';
    ctx.fillRect(x - 1, 0, 2, h);
    ctx.font = '11px sans-serif';
    const label = `no history before ${clock}`;
    const lw = ctx.measureText(label).width;
    ctx.fillStyle = '#333';
    ctx.fillText(label, x - 6 - lw > 0 ? x - 6 - lw : x + 6, h - 6);
  }

  // The strip's colour is a slot's rate: its value per second.
  function heatLegend(max) {
    const lg = $('heat-legend');
    lg.hidden = !heat;
    if (!heat) return;
    lg.querySelector('.what').textContent = `${heat.unit} per second`;
    lg.querySelector('.max').textContent = num(max);
    lg.title = `the lightest: a slot with few ${heat.unit} per second; the darkest: the busiest slot shown, ${num(max)}`;
  }

  // ---- the sub-second heat map: a column per second, a row per tick ----

  const TICK_ROW = 3; // CSS pixels per 20 ms row

  // The columns (seconds that keep their ticks) and the cell geometry.
  function tickGrid() {
    const cols = heat ? heat.ticks : [];
    const rows = heat ? Math.round(1000 / heat.tick_ms) : 0;
    return { cols, rows, cw: cols.length ? canvasWidth() / cols.length : 0 };
  }

  function drawTicks() {
    const c = $('ticks');
    const { cols, rows, cw } = tickGrid();
    c.hidden = cols.length === 0;
    $('ticks-info').hidden = c.hidden;
    if (c.hidden) return;
    const { ctx, w, h } = fitCanvas(c, rows * TICK_ROW + 14);
    ctx.clearRect(0, 0, w, h);
    // Colour scale: the 99th percentile of the cells, so one busy start-up
    // tick does not wash out the rest (FlameScope scales similarly).
    const all = [];
    for (const [, v] of cols) for (const x of v) if (x > 0) all.push(x);
    all.sort((a, b) => a - b);
    const max = all.length ? all[Math.min(all.length - 1, Math.floor(all.length * 0.99))] : 0;
    ticksLegend(max, all.length ? all[all.length - 1] : 0);
    const sel = tickDrag
      ? [Math.min(...tickDrag), Math.max(...tickDrag) + heat.tick_ms]
      : [Math.round(state.from * 1000), Math.round(state.to * 1000)];
    for (let i = 0; i < cols.length; i++) {
      const [start, v] = cols[i];
      for (let r = 0; r < rows; r++) {
        const f = max > 0 ? Math.min(1, v[r] / max) : 0;
        const t = start * 1000 + r * heat.tick_ms;
        const inSel = t >= sel[0] && t < sel[1];
        if (f > 0) {
          ctx.fillStyle = `rgb(255,${Math.round(235 - 200 * f)},${Math.round(210 - 210 * f)})`;
          ctx.fillRect(i * cw, r * TICK_ROW, Math.max(1, cw - 0.5), TICK_ROW);
        }
        if (inSel) {
          ctx.fillStyle = 'rgba(40,90,220,0.35)';
          ctx.fillRect(i * cw, r * TICK_ROW, Math.max(1, cw), TICK_ROW);
        }
      }
    }
    ctx.fillStyle = '#555';
    ctx.font = '11px sans-serif';
    const every = Math.max(1, Math.ceil(cols.length / 8));
    for (let i = 0; i < cols.length; i += every) {
      ctx.fillText(new Date(cols[i][0] * 1000).toLocaleTimeString(), i * cw + 2, h - 3);
    }
  }

  // Cells from 1 to `scale` samples shade from light to dark; busier ones
  // (up to `busiest`) are as dark as `scale`: the bar shows both parts.
  function ticksLegend(scale, busiest) {
    const lg = $('ticks-legend');
    lg.querySelector('.what').textContent = `${heat.unit} per ${heat.tick_ms} ms cell`;
    lg.querySelector('.max').textContent = num(busiest);
    const at = busiest > 0 ? Math.round(scale / busiest * 100) : 100;
    lg.querySelector('.bar').style.background =
      `linear-gradient(to right, rgb(255,235,210), rgb(255,35,0) ${at}%, rgb(255,35,0))`;
    lg.title = at < 100
      ? `the darkest colour from ${num(scale)} (99% of the cells have fewer) to the busiest cell's ${num(busiest)}`
      : `the darkest colour: the busiest cell, ${num(busiest)}`;
  }

  // The start (unix ms) of the cell under a mouse event, or null.
  function tickAt(ev) {
    const { cols, rows, cw } = tickGrid();
    // Cells start inside the canvas's border.
    const c = $('ticks'), b = c.getBoundingClientRect();
    const i = Math.floor((ev.clientX - b.left - c.clientLeft) / cw);
    const r = Math.floor((ev.clientY - b.top - c.clientTop) / TICK_ROW);
    if (!cols.length) return null;
    const col = cols[Math.max(0, Math.min(cols.length - 1, i))];
    return col[0] * 1000 + Math.max(0, Math.min(rows - 1, r)) * heat.tick_ms;
  }

  // Where the cell of unix ms `t` is, in client coordinates (for tests).
  api.tickCell = function (t) {
    const { cols, cw } = tickGrid();
    const i = cols.findIndex(([s]) => s === Math.floor(t / 1000));
    if (i < 0) return null;
    const c = $('ticks'), b = c.getBoundingClientRect();
    const r = Math.floor((t % 1000) / heat.tick_ms);
    return {
      x: b.left + c.clientLeft + i * cw + cw / 2,
      y: b.top + c.clientTop + r * TICK_ROW + TICK_ROW / 2,
    };
  };

  api.tickColumns = () => tickGrid().cols.map(([start]) => start);

  function onTicksDown(ev) {
    const t = tickAt(ev);
    if (t === null) return;
    tickDrag = [t, t];
    ev.preventDefault();
    drawTicks();
  }

  function onTicksMove(ev) {
    if (!tickDrag) return;
    const t = tickAt(ev);
    if (t !== null) tickDrag[1] = t;
    drawTicks();
  }

  function onTicksUp() {
    if (!tickDrag) return;
    const a = Math.min(...tickDrag), b = Math.max(...tickDrag) + heat.tick_ms;
    tickDrag = null;
    select(a / 1000, b / 1000);
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
    select(a, Math.max(b, a + 1));
  }

  // A new time range [a, b) in unix seconds (fractions for parts of a
  // second): the selection, or the second range of a comparison.
  function select(a, b) {
    if (pendingCompare) {
      // The first range is the before; this one the after.
      state.before = Math.floor(state.from) + ',' + Math.ceil(state.to);
      pendingCompare = false;
    } else {
      state.before = '';
    }
    state.phases = 0;
    state.from = a;
    state.to = b;
    state.zoom = '';
    writeHash(true);
    loadProfile();
  }
  let pendingCompare = false;

  // Unix seconds as a query parameter, to the millisecond.
  function timeParam(t) {
    const ms = Math.round(t * 1000);
    return ms % 1000 ? `${Math.floor(ms / 1000)}.${String(ms % 1000).padStart(3, '0')}` : String(ms / 1000);
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
    p.set('from', timeParam(state.from));
    p.set('to', timeParam(state.to));
    const ms = (t) => Math.round(t * 1000) % 1000;
    const clock = (t) => new Date(t * 1000).toLocaleTimeString() + (ms(state.from) || ms(state.to) ? '.' + String(ms(t)).padStart(3, '0') : '');
    const secs = Math.round((state.to - state.from) * 1000) / 1000;
    $('selection-info').textContent = `${clock(state.from)} to ${clock(state.to)} (${secs} s)`;
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

  // Positions (x in value units), depths, and where each subtree ends:
  // nodes are in pre-order, so node i's subtree is [i, end[i]).
  function layout(t) {
    const n = t.nodes.length;
    const x = new Float64Array(n), next = new Float64Array(n), depth = new Int32Array(n);
    const end = new Int32Array(n);
    const child = new Map();
    let maxDepth = 0;
    for (let i = 0; i < n; i++) {
      const [name, total, , parent] = t.nodes[i];
      end[i] = 1;
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
    for (let i = n - 1; i > 0; i--) end[t.nodes[i][3]] += end[i];
    for (let i = 0; i < n; i++) end[i] += i;
    return Object.assign(t, { x, depth, end, child, maxDepth });
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

  const HIT = 'rgb(230,0,230)';

  function color(name, hit) {
    if (hit) return HIT;
    let h = 0;
    for (let k = 0; k < name.length; k++) h = (h * 31 + name.charCodeAt(k)) >>> 0;
    // Python frames, `qualname (file.py)`: blue, as the SVG's palette.
    if (/\.py(:\d+)?\)$/.test(name)) {
      return `rgb(${80 + (h % 60)},${80 + ((h >> 8) % 60)},${205 + ((h >> 16) % 50)})`;
    }
    const kernel = name.endsWith('_[k]');
    const r = kernel ? 200 + (h % 40) : 205 + (h % 50);
    const g = kernel ? 120 + ((h >> 8) % 60) : 80 + ((h >> 8) % 130);
    const b = kernel ? 40 : 30 + ((h >> 16) % 40);
    return `rgb(${r},${g},${b})`;
  }

  // Which names match the search, once per profile and search.
  let hitsFor = null, hitsKey = '', hits = null;
  function hitsOf(re) {
    if (hitsFor !== prof || hitsKey !== state.search) {
      hits = prof.names.map((n) => re.test(n));
      hitsFor = prof;
      hitsKey = state.search;
    }
    return hits;
  }

  function matcher() {
    if (!state.search) return null;
    try {
      return new RegExp(state.search);
    } catch (e) {
      return null;
    }
  }

  // Draws tree `p` (laid out) on canvas `c`, `w` CSS pixels wide, zoomed
  // to node `z`: the zoomed node's ancestors whole width, then its
  // subtree, skipping every subtree narrower than a third of a pixel, so
  // the cost follows what is visible, not the profile's size. The canvas
  // is as tall as the deepest frame drawn (one too thin to draw adds no
  // empty rows). Keeps the rectangles for hit tests, each with whether
  // its whole name is written on it.
  function drawTree(c, p, z, icicle, hit, w) {
    w = w || canvasWidth();
    const zx = p.x[z], zw = p.nodes[z][1] || 1;
    const todo = [];
    for (let a = p.nodes[z][3]; a >= 0; a = p.nodes[a][3]) todo.push(a, 0, w);
    todo.push(z, 0, w);
    let deepest = p.depth[z];
    for (let i = z + 1; i < p.end[z];) {
      const pw = p.nodes[i][1] / zw * w;
      if (pw < 0.3) {
        i = p.end[i];
        continue;
      }
      todo.push(i, (p.x[i] - zx) / zw * w, pw);
      if (p.depth[i] > deepest) deepest = p.depth[i];
      i++;
    }
    const rows = deepest + 1;
    const { ctx, h } = fitCanvas(c, rows * ROW + 4, w);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px monospace';
    ctx.textBaseline = 'middle';
    const out = [];
    // Colours by name index, computed once per tree.
    const colors = p.colors || (p.colors = []);
    const box = (i, px, pw) => {
      const name = p.nodes[i][0];
      const d = p.depth[i];
      const py = icicle ? d * ROW : (rows - 1 - d) * ROW;
      ctx.fillStyle = hit && hit[name] ? HIT : colors[name] || (colors[name] = color(p.names[name], false));
      ctx.fillRect(px, py, Math.max(pw - 0.5, 0.3), ROW - 1);
      const label = p.names[name];
      const fit = Math.floor((pw - 6) / 6.6);
      if (pw > 28) {
        ctx.fillStyle = '#000';
        ctx.fillText(label.length > fit ? label.slice(0, Math.max(fit - 2, 0)) + '..' : label, px + 3, py + ROW / 2);
      }
      out.push([px, py, pw, i, pw > 28 && label.length <= fit]);
    };
    for (let k = 0; k < todo.length; k += 3) box(todo[k], todo[k + 1], todo[k + 2]);
    c._rects = out;
    c._prof = p;
    c._rows = rows;
  }

  // ---- where the flame panel scrolls to ----

  // The panel is as tall as the window leaves below its top (at least
  // MIN_BOX): its first screen shows the root and the widest frames
  // whatever the deepest stack, which scrolls inside it.
  const MIN_BOX = 320;
  let boxHeight = 0, flameWidth = 0;
  function fitBox() {
    const box = $('flame-box');
    if (!boxHeight) {
      const top = box.getBoundingClientRect().top + window.scrollY;
      boxHeight = Math.max(MIN_BOX, Math.floor(window.innerHeight - top - 10));
      box.style.maxHeight = boxHeight + 'px';
    }
    if (!flameWidth) flameWidth = box.clientWidth;
    return box;
  }

  // Scrolls the panel so that canvas row `py` shows; `near` keeps it
  // as near that end of the panel as it goes (a root stays at the
  // bottom in flame order), else it is centred.
  function reveal(box, py, near) {
    const view = box.clientHeight;
    if (py >= box.scrollTop && py + ROW <= box.scrollTop + view) return;
    box.scrollTop = near === 'bottom' ? py + 3 * ROW - view
      : near === 'top' ? py - 2 * ROW : py + ROW / 2 - view / 2;
  }

  // What the panel last scrolled for: a new profile, zoom, orientation
  // or sandwich goes back to the root (the hot paths); a new search to
  // its heaviest match (most samples; the first drawn among equals), as
  // the matches of a flame graph on a busy host are mostly off screen.
  let placed = { prof: null, view: '', search: '' };
  function place(box, c, p, z, hit) {
    const view = [state.zoom, state.icicle, state.sandwich].join('\u0000');
    // A sandwich's trees are made anew at every draw: the profile tells.
    const fresh = placed.prof !== prof || placed.view !== view;
    const searched = state.search !== placed.search;
    placed = { prof, view, search: state.search };
    if (!fresh && !searched) return;
    let best = null;
    if (hit) {
      for (const r of c._rects) {
        if (hit[p.nodes[r[3]][0]] && (!best || p.nodes[r[3]][1] > p.nodes[best[3]][1])) best = r;
      }
    }
    // The match scrolled to, for tests.
    api.firstMatch = best ? p.names[p.nodes[best[3]][0]] : '';
    if (best) {
      reveal(box, best[1], '');
      box.scrollIntoView({ block: 'nearest' });
    } else if (fresh) {
      const zr = c._rects.find((r) => r[3] === z);
      box.scrollTop = state.icicle ? 0 : box.scrollHeight;
      if (zr) reveal(box, zr[1], state.icicle ? 'top' : 'bottom');
    }
  }

  // Where the heaviest drawn frame named `name` is, in client
  // coordinates, and whether its whole name is written on it (for tests).
  api.frameRect = function (name) {
    const c = $('flame'), p = c._prof;
    if (!c._rects) return null;
    let best = null;
    for (const r of c._rects) {
      if (p.names[p.nodes[r[3]][0]] === name && (!best || r[2] > best[2])) best = r;
    }
    if (!best) return null;
    const b = c.getBoundingClientRect();
    return { left: b.left + best[0], top: b.top + best[1], width: best[2], height: ROW - 1, label: best[4] };
  };

  // The share of the total in frames matching the search (a frame inside
  // a matching one counted once), per tree and search.
  let matchedOf = null, matchedKey = '', matchedTotal = 0;
  function matchedShare(p, hit, key) {
    if (matchedOf === p && matchedKey === key) return matchedTotal;
    const covered = new Uint8Array(p.nodes.length);
    let m = 0;
    for (let i = 0; i < p.nodes.length; i++) {
      const [name, total, , parent] = p.nodes[i];
      const under = parent >= 0 && covered[parent];
      if (hit[name] && !under) m += total;
      covered[i] = under || hit[name] ? 1 : 0;
    }
    matchedOf = p;
    matchedKey = key;
    matchedTotal = m;
    return m;
  }

  function draw() {
    const c = $('flame'), callers = $('callers'), frame = $('compared');
    const comparing = state.before || state.phases > 1;
    frame.hidden = !comparing;
    c.hidden = !!comparing;
    $('flame-box').hidden = !!comparing;
    callers.hidden = !state.sandwich || !!comparing;
    $('sandwich-head').hidden = !state.sandwich || !!comparing;
    if (comparing) {
      showComparison();
      return;
    }
    const box = fitBox();
    if (!prof) {
      fitCanvas(c, 40, flameWidth);
      return;
    }
    const re = matcher();
    const hit = re ? hitsOf(re) : null;
    let shown = prof, z = nodeOfPath(state.zoom);
    if (state.sandwich) {
      const [callees, callerTree] = sandwich(prof, state.sandwich);
      $('sandwich-name').textContent = state.sandwich;
      shown = callees;
      z = 0;
      drawTree(callers, callerTree, 0, true, hit);
      api.sandwich = { callees: treeNames(callees), callers: treeNames(callerTree) };
    }
    drawTree(c, shown, z, state.icicle, hit, flameWidth);
    rects = c._rects;
    place(box, c, shown, z, hit);
    const matched = hit ? matchedShare(shown, hit, state.search) : 0;
    const total = shown.nodes.length ? shown.nodes[0][1] : 0;
    api.matchedShare = re && total ? matched / total : 0;
    $('matched').textContent = re ? `matched ${(api.matchedShare * 100).toFixed(1)}% of total` : '';
    const more = c._rows * ROW + 4 > box.clientHeight
      ? `; ${c._rows} levels: scroll ${state.icicle ? 'down' : 'up'} for the deeper` : '';
    status(`${prof.nodes.length - 1} frames, ${fmt(prof.nodes[0][1])} in all` +
      (z ? `, zoomed to ${prof.names[prof.nodes[z][0]]}` : '') + more);
    // A zoom leaves the table as it is.
    const key = [state.sort, state.search].join('\u0000');
    if (tableOf !== prof || tableKey !== key) {
      tableOf = prof;
      tableKey = key;
      drawTable(hit);
    }
  }
  let tableOf = null, tableKey = '';

  // ---- sandwich: a function's callers and callees, merged ----

  // A tree under construction: nodes {name, total, own, parent, kids}.
  function builder(rootName) {
    const nodes = [{ name: rootName, total: 0, own: 0, parent: -1, kids: new Map() }];
    return {
      nodes,
      child(at, name) {
        let c = nodes[at].kids.get(name);
        if (c === undefined) {
          nodes.push({ name, total: 0, own: 0, parent: at, kids: new Map() });
          c = nodes.length - 1;
          nodes[at].kids.set(name, c);
        }
        return c;
      },
      // Pre-order, heaviest first, as /profile.json lays trees out.
      done(names, display) {
        const out = [];
        const todo = [[0, -1]];
        while (todo.length) {
          const [i, parent] = todo.pop();
          const n = nodes[i];
          out.push([n.name, n.total, n.own, parent]);
          const me = out.length - 1;
          const kids = [...n.kids.values()].sort((a, b) => nodes[a].total - nodes[b].total);
          for (const k of kids) todo.push([k, me]);
        }
        return layout({ names, display, nodes: out });
      },
    };
  }

  function sandwich(p, fname) {
    const f = p.names.indexOf(fname);
    const callees = builder(f), callers = builder(f);
    const inside = new Int32Array(p.nodes.length).fill(-1);
    for (let i = 1; i < p.nodes.length; i++) {
      const [name, total, own, parent] = p.nodes[i];
      if (inside[parent] >= 0) {
        const c = callees.child(inside[parent], name);
        callees.nodes[c].total += total;
        callees.nodes[c].own += own;
        inside[i] = c;
      } else if (name === f) {
        // An outermost call of f: its subtree above, its callers below.
        inside[i] = 0;
        callees.nodes[0].total += total;
        callees.nodes[0].own += own;
        callers.nodes[0].total += total;
        let at = 0;
        for (let a = parent; a > 0; a = p.nodes[a][3]) {
          at = callers.child(at, p.nodes[a][0]);
          callers.nodes[at].total += total;
        }
        callers.nodes[at].own += total;
      }
    }
    return [callees.done(p.names, p.display), callers.done(p.names, p.display)];
  }

  function treeNames(t) {
    return t.nodes.map((n) => t.names[n[0]]);
  }

  // ---- the function table ----

  function functionTotals(p) {
    const own = new Float64Array(p.names.length), total = new Float64Array(p.names.length);
    const onPath = new Int32Array(p.names.length);
    // Pre-order with an explicit path: a name counts in total once per
    // stack (recursion does not double it).
    const path = [];
    for (let i = 1; i < p.nodes.length; i++) {
      const [name, t, o, parent] = p.nodes[i];
      while (path.length && path[path.length - 1] !== parent) onPath[p.nodes[path.pop()][0]] -= 1;
      own[name] += o;
      if (onPath[name] === 0) total[name] += t;
      onPath[name] += 1;
      path.push(i);
    }
    return { own, total };
  }

  function drawTable(hit) {
    const body = $('table').tBodies[0];
    body.textContent = '';
    const { own, total } = functionTotals(prof);
    let ids = [];
    for (let i = 1; i < prof.names.length; i++) if (total[i] > 0 || own[i] > 0) ids.push(i);
    const key = state.sort;
    const byName = (a, b) => (prof.names[a] < prof.names[b] ? -1 : prof.names[a] > prof.names[b] ? 1 : 0);
    ids.sort((a, b) => (key === 'name' ? byName(a, b)
      : key === 'total' ? total[b] - total[a] : own[b] - own[a]));
    ids = ids.slice(0, 300);
    api.table = ids.map((i) => [prof.names[i], own[i], total[i]]);
    for (const th of $('table').tHead.rows[0].cells) th.classList.toggle('sorted', th.dataset.key === key);
    for (const i of ids) {
      const tr = body.insertRow();
      if (hit && hit[i]) tr.className = 'hit';
      tr.insertCell().textContent = prof.names[i];
      tr.insertCell().textContent = fmt(own[i]);
      tr.insertCell().textContent = fmt(total[i]);
      const b = document.createElement('button');
      b.className = 'link';
      b.textContent = 'sandwich';
      b.dataset.name = prof.names[i];
      tr.insertCell().appendChild(b);
      tr.dataset.name = prof.names[i];
    }
  }

  function onTableClick(ev) {
    const th = ev.target.closest('th');
    if (th && th.dataset.key) {
      state.sort = th.dataset.key;
      writeHash(false);
      draw();
      return;
    }
    const b = ev.target.closest('button');
    if (b && b.dataset.name) {
      state.sandwich = b.dataset.name;
      writeHash(true);
      draw();
      return;
    }
    const tr = ev.target.closest('tr');
    if (tr && tr.dataset.name) {
      // A row drives the graph: its function highlighted.
      state.search = '^' + tr.dataset.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$';
      $('search').value = state.search;
      writeHash(false);
      draw();
    }
  }

  // ---- comparisons: the daemon's differential and animation SVGs ----

  function showComparison() {
    const p = filters();
    let url;
    if (state.before) {
      p.set('before', state.before);
      p.set('after', Math.floor(state.from) + ',' + Math.ceil(state.to));
      url = 'diff.svg?' + p;
      const t = (x) => new Date(x * 1000).toLocaleTimeString();
      const [b0, b1] = state.before.split(',').map(Number);
      status(`before ${t(b0)}-${t(b1)}, after ${t(state.from)}-${t(state.to)}: red grew, blue shrank, hatched is gone`);
    } else {
      // The range in K windows of whole seconds (at least one each).
      const [from, to] = [Math.floor(state.from), Math.ceil(state.to)];
      const k = Math.max(1, Math.min(state.phases, to - from));
      for (let i = 0; i < k; i++) {
        const a = from + Math.round((to - from) * i / k);
        const b = from + Math.round((to - from) * (i + 1) / k);
        p.append('window', a + ',' + b);
      }
      url = 'animation.svg?' + p;
      status(`${state.phases} phases of the selected range`);
    }
    const frame = $('compared');
    if (frame.dataset.view === url) return;
    frame.dataset.view = url;
    viewUrl(url).then((u) => {
      if (frame.dataset.view === url) frame.setAttribute('src', u);
    });
  }

  function fmt(v) {
    const [unit, factor] = prof.display;
    const x = v * factor;
    return (factor === 1 ? String(x) : x.toFixed(1)) + ' ' + unit;
  }

  // The node under the mouse on canvas `ev.currentTarget`, and its tree.
  function rectAt(ev) {
    const c = ev.currentTarget;
    if (!c._rects) return null;
    const b = c.getBoundingClientRect();
    const x = ev.clientX - b.left, y = ev.clientY - b.top;
    for (const [px, py, pw, i] of c._rects) {
      if (x >= px && x < px + pw && y >= py && y < py + ROW) return [c._prof, i];
    }
    return null;
  }

  function onFlameMove(ev) {
    const tip = $('tooltip');
    const at = rectAt(ev);
    if (at === null) {
      tip.hidden = true;
      return;
    }
    const [p, i] = at;
    const [name, total, own, parent] = p.nodes[i];
    const all = p.nodes[0][1] || 1;
    const ofParent = parent >= 0 ? total / (p.nodes[parent][1] || 1) : 1;
    tip.textContent = `${p.names[name]}\n${fmt(total)} (${(total / all * 100).toFixed(2)}% of total, ` +
      `${(ofParent * 100).toFixed(1)}% of parent), self ${fmt(own)}`;
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 420) + 'px';
    tip.style.top = ev.clientY + 14 + 'px';
  }

  function onFlameClick(ev) {
    const at = rectAt(ev);
    if (at === null) return;
    const [p, i] = at;
    if (p === prof) {
      state.zoom = pathOf(i);
    } else {
      // In a sandwich, a click makes the clicked function the middle.
      state.sandwich = p.names[p.nodes[i][0]];
    }
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
  // Benchmark hooks (scripts/bench web): shows tree `json` as if it had
  // just arrived and returns the milliseconds to lay it out and draw it,
  // then to redraw zoomed into its heaviest child.
  api.benchShow = function (json) {
    const t0 = performance.now();
    prof = layout(json);
    state.zoom = '';
    state.sandwich = '';
    draw();
    const t1 = performance.now();
    state.zoom = prof.nodes.length > 1 ? pathOf(1) : '';
    draw();
    const t2 = performance.now();
    const drawn = rects.length;
    state.zoom = '';
    draw();
    return { paint: t1 - t0, zoom: t2 - t1, nodes: prof.nodes.length, drawn };
  };
  api.sandwichOf = function (name) {
    state.sandwich = name;
    writeHash(true);
    draw();
    return api.sandwich;
  };
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
    // A login URL opened in a tab already showing this page.
    const code = takeLoginCode();
    if (code) {
      login(code).then(() => loadHeat().then(loadProfile), showLoginError);
      return;
    }
    const key = () => [state.event, state.range, state.from, state.to, state.comm, state.unit,
      state.container, state.pid, state.tid, state.include, state.exclude, state.group].join();
    const before = key();
    readHash();
    syncControls();
    const after = key();
    if (before !== after) {
      loadHeat().then(loadProfile);
    } else {
      draw();
    }
  }

  function init() {
    const code = takeLoginCode();
    const sel = $('event');
    for (const e of EVENTS) sel.add(new Option(e, e));
    readHash();
    syncControls();
    const reload = (clearWindow) => () => {
      state.event = $('event').value;
      state.range = +$('range').value;
      state.comm = $('comm').value.trim();
      state.unit = $('unit').value.trim();
      state.container = $('container').value.trim();
      state.pid = $('pid').value.trim();
      state.tid = $('tid').value.trim();
      state.include = $('include').value.trim();
      state.exclude = $('exclude').value.trim();
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
    $('unit').addEventListener('change', reload(false));
    $('container').addEventListener('change', reload(false));
    $('pid').addEventListener('change', reload(false));
    $('tid').addEventListener('change', reload(false));
    $('include').addEventListener('change', reload(false));
    $('exclude').addEventListener('change', reload(false));
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
      state.before = '';
      state.phases = 0;
      writeHash(true);
      draw();
    });
    $('compare').addEventListener('click', () => {
      pendingCompare = true;
      $('selection-info').textContent = 'now drag the range to compare with the selected one';
    });
    $('animate').addEventListener('click', () => {
      state.before = '';
      state.phases = Math.min(60, Math.max(2, +$('phases').value || 4));
      writeHash(true);
      draw();
    });
    $('sandwich-close').addEventListener('click', () => {
      state.sandwich = '';
      writeHash(true);
      draw();
    });
    $('table').addEventListener('click', onTableClick);
    const callers = $('callers');
    callers.addEventListener('mousemove', onFlameMove);
    callers.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
    callers.addEventListener('click', onFlameClick);
    const hm = $('heatmap');
    hm.addEventListener('mousedown', onHeatDown);
    window.addEventListener('mousemove', onHeatMove);
    window.addEventListener('mouseup', onHeatUp);
    $('ticks').addEventListener('mousedown', onTicksDown);
    window.addEventListener('mousemove', onTicksMove);
    window.addEventListener('mouseup', onTicksUp);
    const fl = $('flame');
    fl.addEventListener('mousemove', onFlameMove);
    fl.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
    fl.addEventListener('click', onFlameClick);
    window.addEventListener('hashchange', onHashChange);
    window.addEventListener('popstate', onHashChange);
    window.addEventListener('resize', () => {
      width = 0;
      boxHeight = 0;
      flameWidth = 0;
      placed.prof = null;
      drawHeat();
      draw();
    });
    login(code).then(() => loadHeat().then(loadProfile), showLoginError);
  }

  function showLoginError(e) {
    api.error = e.message;
    $('selection-info').textContent = e.message;
  }

  init();
})();
