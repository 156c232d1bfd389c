(function () {
  var svg = document.documentElement;
  var framesEl = document.getElementById("frames");
  var total = +framesEl.getAttribute("data-total");
  var width = +framesEl.getAttribute("data-width");
  var pad = +framesEl.getAttribute("data-pad");
  var top = +framesEl.getAttribute("data-top");
  var bottom = +framesEl.getAttribute("data-bottom");
  var inverted = svg.getAttribute("data-inverted") === "1";
  var height0 = +svg.getAttribute("height"), height = height0;
  var head = document.getElementById("head"), foot = document.getElementById("foot");
  var bands = document.querySelectorAll(".band");
  var details = document.getElementById("details");
  var unzoomBtn = document.getElementById("unzoom");
  var searchBtn = document.getElementById("search");
  var matched = document.getElementById("matched");
  var frames = [], markers = [], cutOf = {};
  var gs = framesEl.getElementsByTagName("g");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i], r = g.getElementsByTagName("rect")[0];
    var t = g.getElementsByTagName("title")[0].textContent;
    var f = { g: g, rect: r, text: g.getElementsByTagName("text")[0],
      x: +r.getAttribute("data-x"), w: +r.getAttribute("data-w"),
      y: +r.getAttribute("y"), h: +r.getAttribute("height") + 1, fill: r.getAttribute("fill"),
      name: t.slice(0, t.lastIndexOf(" (")), title: t,
      marker: g.classList.contains("deeper"), deep: g.classList.contains("deep") };
    g.__frame = f;
    frames.push(f);
    if (f.marker) { f.levels = f.name.replace(/[^0-9]/g, ""); markers.push(f); }
    else if (f.deep) cutOf[f.x + "," + f.w + "," + f.y] = f;
  }
  // A [deeper] frame stands for the hidden frame in its place.
  for (var m = 0; m < markers.length; m++) markers[m].cut = cutOf[markers[m].x + "," + markers[m].w + "," + markers[m].y];
  function label(f, px) {
    var fits = Math.floor((px - 6) / (12 * 0.59));
    if (fits < 3) return "";
    if (f.name.length <= fits) return f.name;
    if (f.marker) return f.levels.length + 1 <= fits ? "+" + f.levels : "";
    return f.name.slice(0, fits - 2) + "..";
  }
  // Keeps the title, buttons and details on screen when the image is
  // taller than the window.
  function pin() {
    var wh = window.innerHeight, tall = height > wh + 1;
    var y = tall ? Math.max(0, Math.min(window.scrollY, height - wh)) : 0;
    head.setAttribute("transform", "translate(0," + y + ")");
    foot.setAttribute("transform", "translate(0," + (tall ? y + wh - height0 : height - height0) + ")");
    for (var i = 0; i < bands.length; i++) bands[i].classList.toggle("hide", !tall);
  }
  // Frames keep the places the server gave them; frames past the cut lie
  // beyond the image's edge, which grows (and, root at the bottom, the
  // frames move down) to hold every frame shown.
  function resize(lo, hi) {
    var shift = 0, h = height0;
    if (hi >= lo) {
      if (inverted) h = Math.max(height0, hi + bottom);
      else { shift = Math.max(0, top - lo); h = height0 + shift; }
    }
    height = h;
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + width + " " + h);
    if (shift) framesEl.setAttribute("transform", "translate(0," + shift + ")");
    else framesEl.removeAttribute("transform");
    pin();
  }
  // Lays frames out for the window [x0, x0 + w0) of samples, `zoomed`
  // being the frame it is zoomed to (null: the whole graph, cut).
  function layout(zoomed) {
    var x0 = zoomed ? zoomed.x : 0, w0 = zoomed ? zoomed.w : total;
    var scale = (width - 2 * pad) / w0;
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i], g = f.g;
      var above = zoomed && (inverted ? f.y < zoomed.y : f.y > zoomed.y);
      var inside = f.x >= x0 && f.x + f.w <= x0 + w0;
      g.classList.remove("hide");
      g.classList.remove("parent");
      var x, w;
      if (zoomed ? f.marker : f.deep) {
        g.classList.add("hide");
        continue;
      } else if (zoomed && above && f.x <= x0 && f.x + f.w >= x0 + w0) {
        g.classList.add("parent");
        x = pad; w = width - 2 * pad;
      } else if (!zoomed || (inside && !above)) {
        x = pad + (f.x - x0) * scale; w = f.w * scale;
      } else {
        g.classList.add("hide");
        continue;
      }
      lo = Math.min(lo, f.y); hi = Math.max(hi, f.y + f.h);
      f.rect.setAttribute("x", x.toFixed(2));
      f.rect.setAttribute("width", w.toFixed(2));
      f.text.setAttribute("x", (x + 3).toFixed(2));
      f.text.textContent = label(f, w);
    }
    resize(lo, hi);
    unzoomBtn.classList.toggle("hide", !zoomed);
  }
  function toRoot() {
    if (!inverted && height > window.innerHeight) window.scrollTo(0, height);
    pin();
  }
  function frameOf(e) {
    var t = e.target;
    while (t && t !== framesEl) { if (t.__frame) return t.__frame; t = t.parentNode; }
    return null;
  }
  framesEl.addEventListener("mouseover", function (e) {
    var f = frameOf(e);
    if (f) details.textContent = f.marker ? f.title + ": click to show them" : "Function: " + f.title;
  });
  framesEl.addEventListener("mouseout", function () { details.textContent = " "; });
  framesEl.addEventListener("click", function (e) {
    var f = frameOf(e); if (!f) return;
    var to = f.marker ? f.cut : f;
    if (!to) return;
    // The clicked frame stays where it is on screen.
    var was = f.rect.getBoundingClientRect().top;
    layout(to === frames[0] ? null : to);
    window.scrollBy(0, to.rect.getBoundingClientRect().top - was);
    pin();
  });
  unzoomBtn.addEventListener("click", function () { layout(null); toRoot(); });
  var searching = false;
  function resetSearch() {
    for (var i = 0; i < frames.length; i++) frames[i].rect.setAttribute("fill", frames[i].fill);
    matched.textContent = " ";
    searchBtn.textContent = "Search";
    searching = false;
  }
  function search(pattern) {
    var re;
    try { re = new RegExp(pattern); } catch (err) { matched.textContent = "bad regex: " + err.message; return; }
    resetSearch();
    var spans = [], shown = [];
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      if (f.marker || f.name === "all" || !re.test(f.name)) continue;
      f.rect.setAttribute("fill", "rgb(230,0,230)");
      spans.push([f.x, f.x + f.w]);
      if (!f.g.classList.contains("hide")) shown.push(f);
      else if (f.deep) {
        for (var m = 0; m < markers.length; m++) {
          var k = markers[m];
          if (k.x <= f.x && f.x + f.w <= k.x + k.w && !k.g.classList.contains("hide")) {
            k.rect.setAttribute("fill", "rgb(230,0,230)");
            shown.push(k);
          }
        }
      }
    }
    // Nested matches (a recursive function) count once.
    spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
    var sum = 0, end = -1;
    for (var j = 0; j < spans.length; j++) {
      var a = Math.max(spans[j][0], end), b = spans[j][1];
      if (b > a) { sum += b - a; end = b; }
    }
    matched.textContent = "Matched: " + (total ? (100 * sum / total).toFixed(1) : "0.0") + "%";
    searchBtn.textContent = "Reset Search";
    searching = true;
    // The widest match comes into view if no match is wholly on screen
    // (clear of the bands over the frames, when they show).
    var best = null, tall = height > window.innerHeight + 1;
    var lo = tall ? top - 6 : 0, hi = window.innerHeight - (tall ? bottom : 0);
    for (var s = 0; s < shown.length; s++) {
      var rc = shown[s].rect.getBoundingClientRect();
      if (rc.top >= lo && rc.bottom <= hi) { best = null; break; }
      if (!best || shown[s].w > best.w) best = shown[s];
    }
    if (best) {
      window.scrollBy(0, best.rect.getBoundingClientRect().top - window.innerHeight / 2);
      pin();
    }
  }
  searchBtn.addEventListener("click", function () {
    if (searching) { resetSearch(); return; }
    var p = window.prompt("Search for frames matching (regular expression):", "");
    if (p) search(p);
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      var p = window.prompt("Search for frames matching (regular expression):", "");
      if (p) search(p);
    }
  });
  window.addEventListener("scroll", pin);
  window.addEventListener("resize", pin);
  window.addEventListener("load", toRoot);
  toRoot();
})();
