// shardq dashboard. On every page: a form (or its submit button) with data-confirm asks before it
// is sent; the task list's bulk form asks with the number of tasks ticked, and "all" ticks them. On the
// overview: polls the JSON API, keeps the last samples per series (a ring buffer, also kept in
// sessionStorage so a reload keeps the charts), redraws the SVG charts and updates the table's
// cells in place (focus and text selection survive a refresh). Text goes into the page only
// through textContent (never innerHTML), so queue names and values cannot become markup.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var message = (button && button.getAttribute && button.getAttribute("data-confirm")) ||
      (form.getAttribute && form.getAttribute("data-confirm"));
    if (form.getAttribute && form.getAttribute("id") === "bulk") {  // not form.id: the inputs named "id" shadow it
      // A bulk action names the tasks ticked on this page; it asks with their number.
      var chosen = form.querySelectorAll("input[type=checkbox][name=id]:checked").length;
      if (!chosen) { window.alert("Tick the tasks to act on first."); event.preventDefault(); return; }
      if (message) { message = message.replace("the selected tasks", chosen + " selected task(s)"); }
    }
    if (message && !window.confirm(message)) { event.preventDefault(); }
  });

  document.addEventListener("change", function (event) {
    var name = event.target.getAttribute && event.target.getAttribute("data-select-all");
    if (!name) { return; }
    var boxes = document.querySelectorAll("input[type=checkbox][name=" + name + "]");
    for (var i = 0; i < boxes.length; i++) { boxes[i].checked = event.target.checked; }
  });

  // The dashboard's mount prefix ("" at the top, "/queue-admin" under a Mount): every path below starts with it.
  var base = document.documentElement.getAttribute("data-root") || "";
  // The overview starts once the page is parsed. The script is not deferred: the listeners above
  // are on the document, so a click that comes while the page still loads is already handled
  // (a deferred script left a window in which a confirm or "all" did nothing).
  function startOverview() {
    var root = document.getElementById("overview");
    if (!root) { return; }
    var api = root.getAttribute("data-api");
    var refresh = Math.max(100, parseInt(root.getAttribute("data-refresh"), 10) || 2000);
    var capacity = Math.max(2, parseInt(root.getAttribute("data-points"), 10) || 150);
    var SVG = "http://www.w3.org/2000/svg";
    var STORE_KEY = "shardq-history:" + api;
    //: samples older than this are not restored (the gap would draw as a straight line)
    var RESTORE_MAX_AGE_MS = 10 * 60 * 1000;
    var FIXED = { "enqueue/s": "#2463eb", "ack/s": "#10b981" };

    function Ring(size, items) { this.size = size; this.items = (items || []).slice(-size); }
    Ring.prototype.push = function (v) { this.items.push(v); if (this.items.length > this.size) { this.items.shift(); } };

    var series = { ready: {}, leased: {}, rates: { "enqueue/s": new Ring(capacity), "ack/s": new Ring(capacity) } };
    var times = new Ring(capacity);
    var samples = 0;
    var lastGood = null;

    function ring(group, name) {
      if (!series[group][name]) { series[group][name] = new Ring(capacity); }
      return series[group][name];
    }

    // A queue keeps its colour whatever other queues come and go: the colour is picked by a hash
    // (FNV-1a) of its name from a palette legible on white (two queues may share one).
    var PALETTE = ["#2463eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#c026d3", "#65a30d",
                   "#ea580c", "#475569", "#be123c", "#0d9488"];
    function colorOf(name) {
      if (FIXED[name]) { return FIXED[name]; }
      var h = 2166136261;
      for (var i = 0; i < name.length; i++) { h ^= name.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
      return PALETTE[h % PALETTE.length];
    }

    function save() {
      try {
        var data = { capacity: capacity, times: times.items, series: {} };
        Object.keys(series).forEach(function (g) {
          data.series[g] = {};
          Object.keys(series[g]).forEach(function (n) { data.series[g][n] = series[g][n].items; });
        });
        window.sessionStorage.setItem(STORE_KEY, JSON.stringify(data));
      } catch (e) { /* storage full or disabled: the charts just start afresh next time */ }
    }
    function restore() {
      try {
        var data = JSON.parse(window.sessionStorage.getItem(STORE_KEY) || "null");
        if (!data || data.capacity !== capacity || !data.times || !data.times.length) { return 0; }
        if (Date.now() - data.times[data.times.length - 1] > RESTORE_MAX_AGE_MS) { return 0; }
        times = new Ring(capacity, data.times);
        Object.keys(series).forEach(function (g) {
          Object.keys(data.series[g] || {}).forEach(function (n) { series[g][n] = new Ring(capacity, data.series[g][n]); });
        });
        return times.items.length;
      } catch (e) { return 0; }
    }

    function countText(value, accuracy) {
      var mark = accuracy === "at_least" ? "≥" : (accuracy === "estimate" ? "~" : "");
      return mark + Number(value).toLocaleString("en-US");
    }
    function durationText(s) {
      if (s === null || s === undefined) { return "-"; }
      if (s === 0) { return "0s"; }
      if (s < 1) { return Math.round(s * 1000) + "ms"; }
      if (s < 60) { return s.toFixed(1) + "s"; }
      var m = Math.floor(s / 60), sec = Math.floor(s % 60);
      if (m < 60) { return m + "m" + (sec < 10 ? "0" : "") + sec + "s"; }
      var h = Math.floor(m / 60); m = m % 60;
      if (h < 48) { return h + "h" + (m < 10 ? "0" : "") + m + "m"; }
      return Math.floor(h / 24) + "d" + (h % 24 < 10 ? "0" : "") + (h % 24) + "h";
    }
    function rateText(r) {
      if (!r) { return "0"; }
      if (r >= 10000) { return (r / 1000).toFixed(0) + "k/s"; }
      if (r >= 1000) { return (r / 1000).toFixed(1) + "k/s"; }
      if (r >= 10) { return r.toFixed(0) + "/s"; }
      return r.toFixed(2) + "/s";
    }
    function leadText(q) {
      if (q.lead_time_s === null) { return (q.ready + q.leased + q.expired) ? "∞" : "-"; }
      return durationText(q.lead_time_s);
    }
    // As the pages show times: to the second, with the zone.
    function whenText(date) { return isNaN(date.getTime()) ? "-" : date.toISOString().slice(0, 19).replace("T", " ") + " UTC"; }

    function el(tag, text, cls) {
      var node = document.createElement(tag);
      if (text !== undefined && text !== null) { node.textContent = String(text); }
      if (cls) { node.className = cls; }
      return node;
    }
    function link(href, text, cls) { var a = el("a", text, cls); a.setAttribute("href", href); return a; }

    // -- the table: one row per queue, cells changed only where their text changed -------------
    var COLUMNS = 13;
    function cellsOf(q) {
      var paused = [];
      if (q.paused_enqueue) { paused.push("enqueue"); }
      if (q.paused_dequeue) { paused.push("dequeue"); }
      return [
        null,  // the name: never changes
        countText(q.ready, q.accuracy.ready), countText(q.scheduled, q.accuracy.scheduled),
        countText(q.leased, q.accuracy.leased), countText(q.expired, q.accuracy.expired),
        countText(q.backlog, q.accuracy.backlog),
        { dead: q.dead ? countText(q.dead, q.accuracy.dead) : "0" },
        durationText(q.oldest_ready_age_s), rateText(q.enqueue_rate), rateText(q.ack_rate), rateText(q.failure_rate),
        leadText(q),
        { state: paused.length ? "paused: " + paused.join(" and ") : "open" }
      ];
    }
    function fill(td, value, path) {
      var key = typeof value === "string" ? value : JSON.stringify(value);
      if (td.getAttribute("data-key") === key) { return; }
      if (typeof value === "string") {
        if (td.textContent !== value) { td.textContent = value; }
      } else if (value.dead !== undefined) {
        var a = td.querySelector("a");
        if (value.dead === "0") { td.textContent = "0"; } else if (a) { if (a.textContent !== value.dead) { a.textContent = value.dead; } } else { td.replaceChildren(link(path + "/dead", value.dead, "dead-count")); }
      } else {
        var span = td.querySelector("span");
        var cls = value.state === "open" ? "open" : "paused";
        if (!span) { span = el("span"); td.replaceChildren(span); }
        if (span.textContent !== value.state) { span.textContent = value.state; }
        span.className = cls;
      }
      td.setAttribute("data-key", key);
    }
    function newRow(q, path) {
      var tr = el("tr");
      tr.setAttribute("data-queue", q.name);
      var name = el("td", null, "name"); var a = link(path, q.name); a.setAttribute("title", q.name);
      name.appendChild(a); tr.appendChild(name);
      for (var i = 1; i < COLUMNS; i++) { tr.appendChild(el("td", null, i === COLUMNS - 1 ? "text" : null)); }
      return tr;
    }
    function renderTable(data) {
      var body = document.querySelector("#queues tbody");
      var existing = {};
      Array.prototype.forEach.call(body.querySelectorAll("tr"), function (tr) {
        var name = tr.getAttribute("data-queue");
        if (name === null) { body.removeChild(tr); } else { existing[name] = tr; }
      });
      var previous = null;
      data.queues.forEach(function (q) {
        var path = base + "/queues/" + encodeURIComponent(q.name);
        var tr = existing[q.name];
        delete existing[q.name];
        if (!tr) { tr = newRow(q, path); }
        var tds = tr.children;
        cellsOf(q).forEach(function (value, i) { if (value !== null && tds[i]) { fill(tds[i], value, path); } });
        var wanted = previous ? previous.nextSibling : body.firstChild;
        if (tr !== wanted) { body.insertBefore(tr, wanted); }  // only moves a row that is out of place
        previous = tr;
      });
      Object.keys(existing).forEach(function (name) { body.removeChild(existing[name]); });
      if (!data.queues.length) {
        var empty = el("tr"), cell = el("td", "No queues yet: enqueue a task and it appears here.", "muted");
        cell.setAttribute("colspan", String(COLUMNS)); empty.appendChild(cell); body.appendChild(empty);
      }
    }

    // -- the charts -----------------------------------------------------------------------------
    function drawChart(id, group, legendId) {
      var svg = document.getElementById(id);
      var legend = document.getElementById(legendId);
      var names = Object.keys(series[group]).sort();
      var W = 400, H = 140, top = 18, bottom = 14;
      var peak = 0;
      names.forEach(function (n) { series[group][n].items.forEach(function (v) { if (v > peak) { peak = v; } }); });
      var scale = peak > 0 ? (H - top - bottom) / peak : 0;
      var parts = [];
      var axis = document.createElementNS(SVG, "line");
      axis.setAttribute("class", "axis"); axis.setAttribute("x1", "0"); axis.setAttribute("x2", String(W));
      axis.setAttribute("y1", String(H - bottom)); axis.setAttribute("y2", String(H - bottom));
      parts.push(axis);
      var label = document.createElementNS(SVG, "text");
      label.setAttribute("x", "2"); label.setAttribute("y", "10");
      label.textContent = "max " + (group === "rates" ? rateText(peak) : Number(peak).toLocaleString("en-US"));
      parts.push(label);
      var span = document.createElementNS(SVG, "text");
      span.setAttribute("x", "2"); span.setAttribute("y", String(H - 2));
      span.textContent = times.items.length > 1 ? "last " + durationText((times.items[times.items.length - 1] - times.items[0]) / 1000) : "collecting…";
      parts.push(span);
      var keys = document.createDocumentFragment();
      // x spans the samples held so far (not the whole ring), so a new chart is a line, not a speck
      var total = Math.max(1, times.items.length - 1);
      names.forEach(function (n) {
        var values = series[group][n].items;
        var color = colorOf(n);
        var offset = times.items.length - values.length;
        var points = values.map(function (v, j) {
          var x = times.items.length > 1 ? (offset + j) / total * W : W;
          return x.toFixed(1) + "," + (H - bottom - v * scale).toFixed(1);
        });
        var line = document.createElementNS(SVG, "polyline");
        line.setAttribute("points", points.join(" "));
        line.setAttribute("fill", "none"); line.setAttribute("stroke", color); line.setAttribute("stroke-width", "1.8");
        line.setAttribute("data-series", n);
        parts.push(line);
        var key = el("span", n); key.style.color = color; keys.appendChild(key);
      });
      svg.replaceChildren.apply(svg, parts);
      legend.replaceChildren(keys);
    }
    function drawCharts() {
      drawChart("chart-ready", "ready", "legend-ready");
      drawChart("chart-leased", "leased", "legend-leased");
      drawChart("chart-rates", "rates", "legend-rates");
    }

    function record(data) {
      times.push(Date.now());
      var enq = 0, ack = 0, seen = {};
      data.queues.forEach(function (q) {
        seen[q.name] = true;
        ring("ready", q.name).push(q.ready);
        ring("leased", q.name).push(q.leased);
        enq += q.enqueue_rate; ack += q.ack_rate;
      });
      ["ready", "leased"].forEach(function (g) {
        Object.keys(series[g]).forEach(function (n) { if (!seen[n]) { series[g][n].push(0); } });
      });
      series.rates["enqueue/s"].push(enq);
      series.rates["ack/s"].push(ack);
      samples += 1;
      root.setAttribute("data-samples", String(samples));
      save();
    }

    // -- failures: say so, with the time of the last good refresh --------------------------------
    function showStale(message) {
      var banner = document.getElementById("stale");
      root.classList.add("stale");
      root.setAttribute("data-error", message);
      if (!banner) { return; }
      var since = lastGood ? "since " + whenText(lastGood) + " (" + durationText((Date.now() - lastGood.getTime()) / 1000) + " ago)" : "since the page loaded";
      banner.textContent = "Not refreshed " + since + ": " + message + ". The numbers below are from then; retrying every " + durationText(refresh / 1000) + ".";
      banner.hidden = false;
    }
    function clearStale() {
      var banner = document.getElementById("stale");
      root.classList.remove("stale");
      root.removeAttribute("data-error");
      if (banner) { banner.hidden = true; banner.textContent = ""; }
    }

    function poll() {
      fetch(api, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) {
          if (r.status === 401) { window.location.assign(base + "/login"); throw new Error("signed out"); }
          if (!r.ok) {
            return r.json().then(function (body) { throw new Error("HTTP " + r.status + (body && body.error ? " " + body.error : "")); },
                                 function () { throw new Error("HTTP " + r.status); });
          }
          return r.json();
        })
        .then(function (data) {
          record(data);
          renderTable(data);
          drawCharts();
          var asOf = document.getElementById("as-of");
          if (asOf && data.as_of) { asOf.textContent = whenText(new Date(data.as_of)); }
          lastGood = new Date();
          clearStale();
        })
        .catch(function (e) { showStale(String(e.message || e)); })
        .then(function () { window.setTimeout(poll, refresh); });
    }

    var restored = restore();
    root.setAttribute("data-restored", String(restored));
    if (restored) { drawCharts(); }
    poll();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", startOverview);
  } else {
    startOverview();
  }
}());
