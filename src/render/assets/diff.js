(function () {
  var svg = document.documentElement;
  var details = document.getElementById("details");
  var height0 = +svg.getAttribute("height"), height = height0;
  var afterRoot = +svg.getAttribute("data-after-root"), grow = +svg.getAttribute("data-grow");
  // Keeps the details line on screen when the image is taller than the window.
  function pin() {
    var wh = window.innerHeight;
    var y = height > wh + 1 ? Math.min(height, window.scrollY + wh) : height;
    details.setAttribute("y", y - 12);
  }
  // Opens with the after graph's root on screen.
  function toRoot() {
    if (afterRoot + 24 > window.innerHeight) window.scrollTo(0, afterRoot + 24 - window.innerHeight);
    pin();
  }
  // Shows the frames past the cut: each graph grows by `grow`, its frames
  // (placed from its root, at the bottom) moving down with it.
  function uncut(marker) {
    if (!grow) return;
    var was = marker.getBoundingClientRect().top;
    var moves = [['g.graph[data-col="1"]', grow], ['g.top[data-col="0"]', grow], ['g.graph[data-col="0"]', 2 * grow]];
    for (var i = 0; i < moves.length; i++) {
      var el = document.querySelector(moves[i][0]);
      if (el) el.setAttribute("transform", "translate(0," + moves[i][1] + ")");
    }
    var deep = document.querySelectorAll("g.f.deep");
    for (var i = 0; i < deep.length; i++) deep[i].classList.remove("hide");
    var marks = document.querySelectorAll("g.f.deeper");
    for (var i = 0; i < marks.length; i++) marks[i].classList.add("hide");
    height = height0 + 2 * grow; grow = 0;
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + svg.getAttribute("width") + " " + height);
    var same = marker.parentNode.querySelector('g.f.deep[data-n="' + marker.getAttribute("data-n") + '"]');
    if (same) window.scrollBy(0, same.getBoundingClientRect().top - was);
    pin();
  }
  document.addEventListener("click", function (e) {
    var g = group(e); if (g && g.classList.contains("deeper")) uncut(g);
  });
  window.addEventListener("scroll", pin);
  window.addEventListener("resize", pin);
  window.addEventListener("load", toRoot);
  function group(e) { var t = e.target; while (t && !(t.classList && t.classList.contains("f"))) t = t.parentNode; return t; }
  function mark(n, on) {
    var all = document.querySelectorAll('g.f[data-n="' + n + '"]');
    for (var i = 0; i < all.length; i++) all[i].classList.toggle("hl", on);
  }
  document.addEventListener("mouseover", function (e) {
    var g = group(e); if (!g) return;
    var t = g.querySelector("title").textContent.split("\n");
    details.textContent = t[0] + ": " + t.slice(1).join(", ");
    mark(g.getAttribute("data-n"), true);
  });
  document.addEventListener("mouseout", function (e) {
    var g = group(e); if (!g) return;
    details.textContent = " ";
    mark(g.getAttribute("data-n"), false);
  });
  toRoot();
})();
