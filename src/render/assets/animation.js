(function () {
  "use strict";
  // Everything this script needs is in the document: the renderer writes
  // values as attributes, never into this text. One tick of the timeline
  // per phase, with the phase's label.
  var root = document.documentElement;
  var framesEl = document.getElementById("frames"), track = document.getElementById("track");
  var ticks = document.querySelectorAll("rect[data-phase]");
  var K = ticks.length, PAD = +framesEl.getAttribute("data-pad"), INNER = +framesEl.getAttribute("data-inner");
  var FACTOR = +framesEl.getAttribute("data-factor"), UNIT = framesEl.getAttribute("data-unit");
  var PHASES = Array.prototype.map.call(ticks, function (t) { return t.getAttribute("data-phase"); });
  var TRACK_X = +track.getAttribute("x"), TRACK_W = +track.getAttribute("width"), SECONDS_PER_PHASE = 1.5;
  var gs = document.querySelectorAll("#frames g.f");
  var n = gs.length, depth = [], vals = [], gaps = [], parent = [], rects = [], texts = [], names = [], shown = [];
  var deep = [], cutN = [], grow = +root.getAttribute("data-grow");
  if (n === 0) return;
  var stack = [];
  for (var i = 0; i < n; i++) {
    var g = gs[i];
    depth.push(+g.getAttribute("data-d"));
    vals.push(g.getAttribute("data-v").split(",").map(Number));
    var gap = g.getAttribute("data-g");
    gaps.push(gap ? gap.split(",").map(Number) : null);
    while (stack.length && depth[stack[stack.length - 1]] >= depth[i]) stack.pop();
    parent.push(stack.length ? stack[stack.length - 1] : -1);
    stack.push(i);
    rects.push(g.querySelector("rect"));
    texts.push(g.querySelector("text"));
    names.push(g.querySelector("title").textContent);
    shown.push(g.hasAttribute("display") ? -2 : -1);
    deep.push(g.classList.contains("deep"));
    cutN.push(g.getAttribute("data-deeper"));
  }
  // Frames past the cut show once a [deeper] frame is clicked: the image
  // grows by `grow` and the frames (placed from the root, at the bottom)
  // move down with it.
  function uncut() {
    if (!grow) return;
    var h = +root.getAttribute("height") + grow;
    root.setAttribute("height", h);
    root.setAttribute("viewBox", "0 0 " + root.getAttribute("width") + " " + h);
    document.getElementById("frames").setAttribute("transform", "translate(0," + grow + ")");
    var d = document.getElementById("details");
    d.setAttribute("y", +d.getAttribute("y") + grow);
    grow = 0;
    for (var i = 0; i < n; i++) if (cutN[i]) { cutN[i] = null; shown[i] = -1; }
    draw();
  }
  var X, W, relative = root.getAttribute("data-relative") === "1";
  function layout() {
    X = new Float64Array(n * K); W = new Float64Array(n * K);
    var max = 0;
    for (var p = 0; p < K; p++) max = Math.max(max, vals[0][p]);
    for (var p = 0; p < K; p++) {
      var total = relative ? vals[0][p] : max;
      var scale = total > 0 ? INNER / total : 0;
      var next = new Float64Array(n);
      for (var i = 0; i < n; i++) {
        if (parent[i] >= 0 && gaps[i]) next[parent[i]] += gaps[i][p] * scale;
        var x = parent[i] < 0 ? PAD : next[parent[i]];
        var w = vals[i][p] * scale;
        X[i * K + p] = x; W[i * K + p] = w;
        next[i] = x;
        if (parent[i] >= 0) next[parent[i]] += w;
      }
    }
  }
  function fit(name, w) {
    var c = Math.floor((w - 6) / 7.08);
    if (c < 3) return "";
    return name.length <= c ? name : name.substring(0, c - 2) + "..";
  }
  function fitDeeper(levels, w) {
    var full = "[deeper: " + levels + " frames]", c = Math.floor((w - 6) / 7.08);
    return full.length <= c ? full : (levels.length + 1 <= c && c >= 3 ? "+" + levels : "");
  }
  var t = 0, playing = false, speed = 1, last = null;
  function fmt(v) { v = v * FACTOR; return Math.abs(v - Math.round(v)) < 1e-9 ? String(Math.round(v)) : v.toFixed(3); }
  function draw() {
    var i0 = Math.floor(t), f = t - i0;
    if (i0 >= K - 1) { i0 = K - 1; f = 0; }
    var i1 = Math.min(i0 + 1, K - 1);
    var e = f * f * (3 - 2 * f);
    for (var i = 0; i < n; i++) {
      var a = i * K + i0, b = i * K + i1;
      var x = X[a] + (X[b] - X[a]) * e, w = W[a] + (W[b] - W[a]) * e;
      var g = gs[i];
      if (w < 0.05 || (grow && deep[i])) { if (shown[i] !== -2) { g.setAttribute("display", "none"); shown[i] = -2; } continue; }
      if (shown[i] === -2) g.removeAttribute("display");
      var r = rects[i];
      r.setAttribute("x", x.toFixed(1)); r.setAttribute("width", w.toFixed(1));
      texts[i].setAttribute("x", (x + 3).toFixed(1));
      var c = Math.floor((w - 6) / 7.08);
      if (c !== shown[i]) { texts[i].textContent = cutN[i] ? fitDeeper(cutN[i], w) : fit(names[i], w); shown[i] = c; }
      var pa = f > 0 ? i0 : Math.max(0, i0 - 1), pb = f > 0 ? i1 : i0;
      var from = vals[i][pa], to = vals[i][pb];
      if (relative) {
        // Sizes are shares of each phase: so is growth.
        from = vals[0][pa] > 0 ? from / vals[0][pa] * 1000 : 0;
        to = vals[0][pb] > 0 ? to / vals[0][pb] * 1000 : 0;
      }
      var cls = to > from * 1.1 && to - from > 1 ? "f grow" : (to * 1.1 < from && from - to > 1 ? "f shrink" : "f");
      if (g.getAttribute("class") !== cls) g.setAttribute("class", cls);
    }
    var p = Math.min(K - 1, Math.round(t));
    document.getElementById("phase").textContent = "phase " + (p + 1) + "/" + K + ": " + PHASES[p] + (relative ? " (sized to its own total)" : "");
    var kx = K > 1 ? TRACK_X + TRACK_W * t / (K - 1) : TRACK_X;
    document.getElementById("knob").setAttribute("x", (kx - 3).toFixed(1));
    root.setAttribute("data-t", t.toFixed(3));
    root.setAttribute("data-playing", playing ? "1" : "0");
  }
  function label(id, text) { document.querySelector("#" + id + " text").textContent = text; }
  function setPlaying(on) {
    var was = playing;
    playing = on; label("play", on ? "pause" : "play");
    // One animation loop at a time.
    if (on && !was) { last = null; requestAnimationFrame(tick); }
    draw();
  }
  function tick(ts) {
    if (!playing) return;
    if (last !== null) t += (ts - last) / 1000 * speed / SECONDS_PER_PHASE;
    last = ts;
    if (t >= K - 1) { t = K - 1; playing = false; label("play", "play"); }
    draw();
    if (playing) requestAnimationFrame(tick);
  }
  function on(id, f) { document.getElementById(id).addEventListener("click", f); }
  on("play", function () { if (!playing && t >= K - 1) t = 0; setPlaying(!playing); });
  on("restart", function () { t = 0; setPlaying(true); });
  on("back", function () { t = Math.max(0, Math.ceil(t - 1e-6) - 1); setPlaying(false); });
  on("forward", function () { t = Math.min(K - 1, Math.floor(t + 1e-6) + 1); setPlaying(false); });
  var speeds = [0.5, 1, 2, 4];
  on("speed", function () { speed = speeds[(speeds.indexOf(speed) + 1) % speeds.length]; label("speed", "speed " + speed + "x"); });
  on("scale", function () { relative = !relative; root.setAttribute("data-relative", relative ? "1" : "0"); label("scale", relative ? "relative" : "global"); layout(); draw(); });
  var dragging = false;
  function scrub(e) {
    var pt = root.createSVGPoint(); pt.x = e.clientX; pt.y = e.clientY;
    var sp = pt.matrixTransform(root.getScreenCTM().inverse());
    t = Math.max(0, Math.min(K - 1, (sp.x - TRACK_X) / TRACK_W * (K - 1)));
    draw();
  }
  document.getElementById("track").addEventListener("mousedown", function (e) { dragging = true; setPlaying(false); scrub(e); });
  document.addEventListener("mousemove", function (e) { if (dragging) scrub(e); });
  document.addEventListener("mouseup", function () { dragging = false; });
  document.addEventListener("keydown", function (e) {
    if (e.key === " ") { document.getElementById("play").dispatchEvent(new MouseEvent("click")); e.preventDefault(); }
    else if (e.key === "ArrowRight") document.getElementById("forward").dispatchEvent(new MouseEvent("click"));
    else if (e.key === "ArrowLeft") document.getElementById("back").dispatchEvent(new MouseEvent("click"));
  });
  var details = document.getElementById("details");
  document.getElementById("frames").addEventListener("mouseover", function (e) {
    var g = e.target.parentNode; var i = Array.prototype.indexOf.call(gs, g); if (i < 0) return;
    var p = Math.min(K - 1, Math.round(t)), tot = vals[0][p];
    details.textContent = (cutN[i] ? "[deeper: " + cutN[i] + " frames, click to show them] " : "") + names[i] + ": " + fmt(vals[i][p]) + " " + UNIT + " in phase " + (p + 1) +
      " (" + (tot > 0 ? (100 * vals[i][p] / tot).toFixed(2) : "0") + "% of it); by phase: " + vals[i].map(fmt).join(", ");
  });
  document.getElementById("frames").addEventListener("mouseout", function () { details.textContent = " "; });
  document.getElementById("frames").addEventListener("click", function (e) {
    var i = Array.prototype.indexOf.call(gs, e.target.parentNode);
    if (i >= 0 && cutN[i]) uncut();
  });
  layout();
  draw();
})();
