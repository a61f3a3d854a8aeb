// shardq dashboard: polls the JSON API, keeps the last samples in a ring buffer per series and
// redraws the overview's SVG charts and table. Text goes into the page only through textContent
// (never innerHTML), so queue names and values cannot become markup.
(function () {
  "use strict";
  var root = document.getElementById("overview");
  if (!root) { return; }
  var api = root.getAttribute("data-api");
  var refresh = Math.max(100, parseInt(root.getAttribute("data-refresh"), 10) || 2000);
  var capacity = Math.max(2, parseInt(root.getAttribute("data-points"), 10) || 150);
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#2463eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#0ea5e9", "#d946ef", "#84cc16",
                "#f97316", "#64748b"];

  function Ring(size) { this.size = size; this.items = []; }
  Ring.prototype.push = function (v) { this.items.push(v); if (this.items.length > this.size) { this.items.shift(); } };

  var series = { ready: {}, leased: {}, rates: { "enqueue/s": new Ring(capacity), "ack/s": new Ring(capacity) } };
  var times = new Ring(capacity);
  var samples = 0;

  function ring(group, name) {
    if (!series[group][name]) { series[group][name] = new Ring(capacity); }
    return series[group][name];
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

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (cls) { node.className = cls; }
    return node;
  }
  function link(href, text, cls) { var a = el("a", text, cls); a.setAttribute("href", href); return a; }

  function renderTable(data) {
    var body = document.querySelector("#queues tbody");
    var rows = document.createDocumentFragment();
    data.queues.forEach(function (q) {
      var path = "/queues/" + encodeURIComponent(q.name);
      var tr = el("tr");
      tr.setAttribute("data-queue", q.name);
      var name = el("td"); name.appendChild(link(path, q.name)); tr.appendChild(name);
      ["ready", "scheduled", "leased", "expired", "backlog"].forEach(function (c) { tr.appendChild(el("td", countText(q[c], q.accuracy[c]))); });
      var dead = el("td");
      if (q.dead) { dead.appendChild(link(path + "/dead", countText(q.dead, q.accuracy.dead), "dead-count")); } else { dead.textContent = "0"; }
      tr.appendChild(dead);
      tr.appendChild(el("td", durationText(q.oldest_ready_age_s)));
      tr.appendChild(el("td", rateText(q.enqueue_rate)));
      tr.appendChild(el("td", rateText(q.ack_rate)));
      tr.appendChild(el("td", rateText(q.failure_rate)));
      tr.appendChild(el("td", leadText(q)));
      var paused = [];
      if (q.paused_enqueue) { paused.push("enqueue"); }
      if (q.paused_dequeue) { paused.push("dequeue"); }
      var state = el("td", null, "text");
      state.appendChild(el("span", paused.length ? "paused: " + paused.join(" and ") : "open", paused.length ? "paused" : "open"));
      tr.appendChild(state);
      rows.appendChild(tr);
    });
    if (!data.queues.length) {
      var empty = el("tr"), cell = el("td", "No queues yet: enqueue a task and it appears here.", "muted");
      cell.setAttribute("colspan", "12"); empty.appendChild(cell); rows.appendChild(empty);
    }
    body.replaceChildren(rows);
  }

  function drawChart(id, group, legendId) {
    var svg = document.getElementById(id);
    var legend = document.getElementById(legendId);
    var names = Object.keys(series[group]).sort();
    var W = 400, H = 140, top = 12, bottom = 14;
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
    names.forEach(function (n, i) {
      var values = series[group][n].items;
      var color = COLORS[i % COLORS.length];
      var offset = capacity - values.length;
      var points = values.map(function (v, j) {
        var x = (offset + j) / (capacity - 1) * W;
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
  }

  function poll() {
    fetch(api, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (r.status === 401) { window.location.assign("/login"); throw new Error("signed out"); }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (data) {
        record(data);
        renderTable(data);
        drawChart("chart-ready", "ready", "legend-ready");
        drawChart("chart-leased", "leased", "legend-leased");
        drawChart("chart-rates", "rates", "legend-rates");
        var asOf = document.getElementById("as-of");
        if (asOf && data.as_of) { asOf.textContent = data.as_of; }
        root.removeAttribute("data-error");
      })
      .catch(function (e) { root.setAttribute("data-error", String(e.message || e)); })
      .then(function () { window.setTimeout(poll, refresh); });
  }
  poll();
}());
