// The Training tab and page: fetch the model, draw it with the DOM and SVG (no framework, no
// network but this API server's). Values are set as text, never as HTML.
"use strict";
var AVW = (function () {
  var REFRESH_MS = 5000;
  function el(tag, text) { var e = document.createElement(tag); if (text !== undefined) e.textContent = String(text); return e; }
  function $(id) { return document.getElementById(id); }
  function duration(s) {
    if (s === null || s === undefined) return "";
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function progressText(p) {
    if (!p) return "no progress reported yet";
    var parts = ["step " + p.step + (p.total_steps ? "/" + p.total_steps : "")];
    if (p.percent !== null) parts[0] += " (" + p.percent + " %)";
    if (p.epoch !== null) parts.push("epoch " + p.epoch + (p.epochs ? "/" + p.epochs : ""));
    if (p.rate) parts.push(p.rate.toPrecision(3) + " steps/s");
    if (p.eta_seconds) parts.push("ETA " + duration(p.eta_seconds));
    return parts.join(", ");
  }
  // the metrics' points over steps, as the server read them from the run's history: {metric: [[step, value]]}.
  // A band per metric, each on its own scale and labelled with it (a loss and an accuracy share no
  // axis), over one range of steps.
  function chart(svg, legend, metrics) {
    var keys = Object.keys(metrics).filter(function (k) { return metrics[k].length; })
      .sort(function (a, b) { return (b.indexOf("loss") >= 0) - (a.indexOf("loss") >= 0); }).slice(0, 4);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    legend.textContent = "";
    var W = 640, L = 50, BAND = 80, GAP = 16, B = 24, colors = ["#3182ce", "#dd6b20", "#38a169", "#805ad5"];
    var ns = "http://www.w3.org/2000/svg", H = keys.length * (BAND + GAP) + B;
    svg.setAttribute("height", keys.length ? H : 0);
    function label(x, y, text, color) {
      var tx = document.createElementNS(ns, "text"); tx.setAttribute("x", x); tx.setAttribute("y", y);
      if (color) tx.style.fill = color;
      tx.textContent = text; svg.appendChild(tx);
    }
    var steps = [].concat.apply([], keys.map(function (k) { return metrics[k].map(function (p) { return p[0]; }); }));
    var x0 = Math.min.apply(null, steps), x1 = Math.max.apply(null, steps);
    keys.forEach(function (k, i) {
      var pts = metrics[k], top = i * (BAND + GAP) + GAP, ys = pts.map(function (p) { return p[1]; });
      var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys), flat = y1 === y0;
      var line = document.createElementNS(ns, "polyline");
      line.setAttribute("fill", "none"); line.setAttribute("stroke", colors[i]); line.setAttribute("stroke-width", "2");
      line.setAttribute("data-metric", k);
      line.setAttribute("points", pts.map(function (p) {
        var x = L + (x1 === x0 ? 0 : (p[0] - x0) / (x1 - x0)) * (W - L - 10);
        var y = top + (flat ? BAND / 2 : (1 - (p[1] - y0) / (y1 - y0)) * BAND);
        return x.toFixed(1) + "," + y.toFixed(1);
      }).join(" "));
      svg.appendChild(line);
      label(L, top - 3, k, colors[i]);
      label(2, top + (flat ? BAND / 2 : 10), Number(y1).toPrecision(3));
      if (!flat) label(2, top + BAND, Number(y0).toPrecision(3));
      var item = el("span", "■ " + k + " " + Number(ys[ys.length - 1]).toPrecision(3) + "  ");
      item.style.color = colors[i]; legend.appendChild(item);
    });
    if (keys.length) label(L, H - 6, "step " + x0 + " – " + x1);
  }
  // A read of the app's API as the signed-in user: the UI's cookie (Airflow 3.1 and later), else,
  // refused, the token Airflow 3.0's UI keeps in this origin's storage.
  function read(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      var token = r.status === 401 && window.localStorage.getItem("token");
      return token ? fetch(url, { credentials: "same-origin", headers: { Authorization: "Bearer " + token } }) : r;
    });
  }
  function task() {
    var api = location.pathname.replace("/ti/", "/api/ti/");
    function draw(m) {
      if (!m.found) { $("empty").hidden = false; $("model").hidden = true; return; }
      $("empty").hidden = true; $("model").hidden = false;
      $("job-name").textContent = m.job.name;
      var phase = m.job.phase || (m.job.gone ? "gone" : "unknown");
      $("job-phase").textContent = phase; $("job-phase").className = "badge " + phase;
      $("job-namespace").textContent = m.job.namespace;
      $("task-state").textContent = m.task_state || "none";
      $("gpu-hours").textContent = m.gpu_hours;
      $("pending").textContent = m.pending_reason ? "Pending: " + m.pending_reason : "";
      var p = m.progress;
      $("progress-bar").style.width = (p && p.percent !== null ? p.percent : m.percent || 0) + "%";
      $("progress-text").textContent = p ? progressText(p) : (m.progress_line || progressText(null));
      var body = $("ranks").tBodies[0]; body.textContent = "";
      m.ranks.forEach(function (r) {
        var tr = el("tr"); [r.rank, r.task, r.node, r.phase, r.restarts, r.gpus].forEach(function (v) { tr.appendChild(el("td", v)); }); body.appendChild(tr);
      });
      if (!m.ranks.length) { var tr = el("tr"); var td = el("td", m.waiting ? "no pod yet" : "the job's pods are gone; figures kept by the task"); td.colSpan = 6; tr.appendChild(td); body.appendChild(tr); }
      chart($("chart"), $("legend"), m.metrics);
      var link = $("wandb-link");
      if (m.links.wandb_run) { link.href = m.links.wandb_run; link.hidden = false; } else { link.hidden = true; }
      $("task-link").href = m.links.task;
      document.body.setAttribute("data-refreshed", String(Date.now()));
      document.body.setAttribute("data-waiting", String(m.waiting));
    }
    function refresh() {
      read(api).then(function (r) {
        if (!r.ok) throw new Error(r.status + " " + r.statusText);
        return r.json();
      }).then(function (m) { draw(m); if (m.waiting) setTimeout(refresh, REFRESH_MS); })
        .catch(function (e) { $("empty").hidden = false; $("empty").textContent = "Cannot read the training: " + e.message; setTimeout(refresh, REFRESH_MS * 3); });
    }
    refresh();
  }
  function jobs() {
    var filter = $("dag-filter");
    filter.value = new URLSearchParams(location.search).get("dag_id") || "";
    function draw(m) {
      var current = filter.value;
      while (filter.options.length > 1) filter.remove(1);
      m.dag_ids.forEach(function (d) { var o = el("option", d); o.value = d; filter.appendChild(o); });
      filter.value = current;
      var body = $("jobs").tBodies[0]; body.textContent = "";
      m.jobs.forEach(function (j) {
        var tr = el("tr"); tr.setAttribute("data-dag", j.dag_id);
        [j.dag_id, j.task_id, j.job, j.phase || j.task_state].forEach(function (v) { tr.appendChild(el("td", v)); });
        var td = el("td"), bar = el("div"), fill = el("div"); td.className = "progress"; bar.className = "bar"; fill.style.width = (j.percent || 0) + "%"; bar.appendChild(fill); td.appendChild(bar);
        td.appendChild(el("div", j.progress ? progressText(j.progress) : j.progress_line)); td.lastChild.className = "muted";
        tr.appendChild(td); tr.appendChild(el("td", j.gpus));
        var links = el("td"), a = el("a", "task");
        a.href = "/dags/" + encodeURIComponent(j.dag_id) + "/runs/" + encodeURIComponent(j.run_id) + "/tasks/" + encodeURIComponent(j.task_id) + (j.map_index >= 0 ? "/mapped/" + j.map_index : "");
        a.target = "_top"; links.appendChild(a);
        if (j.wandb_run) { var w = el("a", " W&B"); w.href = j.wandb_run; w.target = "_blank"; w.rel = "noopener"; links.appendChild(w); }
        tr.appendChild(links); body.appendChild(tr);
      });
      $("none").hidden = m.jobs.length > 0;
      document.body.setAttribute("data-refreshed", String(Date.now()));
    }
    function refresh() {
      var q = filter.value ? "?dag_id=" + encodeURIComponent(filter.value) : "";
      read("api/jobs" + q).then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(draw).catch(function () {}).then(function () { timer = setTimeout(refresh, REFRESH_MS * 2); });
    }
    var timer = null;
    filter.addEventListener("change", function () { clearTimeout(timer); refresh(); });
    refresh();
  }
  return { task: task, jobs: jobs };
})();
