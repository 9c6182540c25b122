#include "services/coordinator/dashboard_page.h"

namespace tributary::coordinator {

// One page, no external assets: the cluster may have no route to the internet.
// Rendering is plain DOM building; charts are inline SVG polylines so that what is
// drawn is also in the DOM (the headless-browser test reads it).
const char kDashboardHtml[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tributary coordinator</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f5f6f8; color: #1d2330; }
  header { background: #1d2330; color: #fff; padding: 10px 18px; display: flex; gap: 24px;
           align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .meta { font-size: 13px; opacity: 0.8; }
  header #source { opacity: 1; color: #ffd479; font-weight: 600; }
  main { padding: 14px 18px; display: grid; gap: 14px; }
  section { background: #fff; border-radius: 6px; padding: 12px 14px;
            box-shadow: 0 1px 2px rgba(0,0,0,0.08); }
  section[hidden] { display: none; }
  h2 { font-size: 15px; margin: 0 0 8px 0; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e6e8ee; vertical-align: top; }
  th { color: #5a6275; font-weight: 600; }
  tr.selected td { background: #eef3ff; }
  a { color: #1d4fb8; }
  .state { display: inline-block; padding: 2px 8px; border-radius: 10px; font-weight: 600;
           font-size: 12px; background: #e6e8ee; }
  .RUNNING, .WORKER_TRAINING { background: #d3f2dc; color: #13632e; }
  .RENDEZVOUS, .PENDING, .WORKER_RENDEZVOUS { background: #fff1c9; color: #7a5600; }
  .PAUSED, .WORKER_PAUSED, .WORKER_PAUSING { background: #dfe8ff; color: #1d3f99; }
  .COMPLETED, .WORKER_FINISHED { background: #d6f0f5; color: #0c5866; }
  .FAILED, .STOPPED, .WORKER_FAILED { background: #fbd9d9; color: #8a1414; }
  .kv { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; font-size: 13px; }
  .kv dt { color: #5a6275; }
  .kv dd { margin: 0; }
  .bar { height: 8px; background: #e6e8ee; border-radius: 4px; overflow: hidden; width: 320px; }
  .bar > div { height: 100%; background: #2f6fdf; }
  .charts { display: flex; gap: 14px; flex-wrap: wrap; }
  .chart { font-size: 12px; color: #5a6275; }
  .chart svg { background: #fafbfc; border: 1px solid #e6e8ee; display: block; }
  .straggler { color: #b3261e; font-weight: 700; }
  .error { color: #b3261e; }
  .muted { color: #8a91a3; }
  .node { margin-bottom: 10px; }
  .node h3 { font-size: 14px; margin: 6px 0; }
  #waiting { color: #7a5600; font-weight: 600; }
  #fetch-error { color: #ffb4ab; }
</style>
</head>
<body>
<header>
  <h1>Tributary coordinator</h1>
  <span class="meta" id="source"></span>
  <span class="meta" id="version"></span>
  <span class="meta" id="updated">loading&hellip;</span>
  <span class="meta" id="fetch-error"></span>
</header>
<main>
  <section id="jobs-section">
    <h2>Jobs <span class="muted" id="jobs-note"></span></h2>
    <div id="jobs"></div>
  </section>
  <section id="job-section">
    <h2>Job</h2>
    <div id="job">no job submitted</div>
    <div id="waiting"></div>
  </section>
  <section>
    <h2>Training curves <span class="muted" id="history-note"></span></h2>
    <div class="charts">
      <div class="chart"><div>loss by step</div><svg id="loss-chart" width="380" height="180"></svg></div>
      <div class="chart"><div>test accuracy by step (each evaluation)</div><svg id="accuracy-chart" width="380" height="180"></svg></div>
      <div class="chart"><div>samples/s by step</div><svg id="throughput-chart" width="380" height="180"></svg></div>
      <div class="chart"><div>step time by step (slowest worker), seconds</div><svg id="step-time-chart" width="380" height="180"></svg></div>
    </div>
    <div class="charts" id="metric-charts"></div>
  </section>
  <section id="timeline-section">
    <h2>Workers over time</h2>
    <div class="charts">
      <div class="chart"><div>step time by worker, seconds</div><svg id="worker-step-chart" width="380" height="180"></svg></div>
      <div class="chart"><div>PS wait by worker, seconds</div><svg id="worker-wait-chart" width="380" height="180"></svg></div>
    </div>
    <div id="worker-timeline"></div>
  </section>
  <section class="live">
    <h2>Nodes <span class="muted" id="generation"></span></h2>
    <div id="nodes"></div>
    <h2>Waiting workers</h2>
    <div id="idle-workers"></div>
  </section>
  <section class="live">
    <h2>Parameter server shards</h2>
    <div id="shards"></div>
  </section>
  <section>
    <h2>Event log</h2>
    <div id="events"></div>
  </section>
</main>
<script>
"use strict";
const REFRESH_MS = 2000;
const COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e", "#862e9c", "#e8590c", "#0b7285", "#c2255c", "#5c940d"];

function esc(value) {
  return String(value === undefined || value === null ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}
// proto3 JSON writes 64-bit integers as strings, and NaN / Infinity as strings too.
function num(value) { const n = Number(value); return isFinite(n) ? n : 0; }
function finite(value) { const n = Number(value); return isFinite(n) ? n : null; }
function fixed(value, digits) { return num(value).toFixed(digits); }
function bytes(value) {
  let n = num(value);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}
function seconds(value) {
  const s = num(value);
  if (s < 0) return "none";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  return (s / 60).toFixed(1) + " min";
}
function stateBadge(state) {
  return '<span class="state ' + esc(state) + '">' + esc(state) + "</span>";
}
function time(stamp) {
  if (!stamp) return "";
  const d = new Date(stamp);
  return isNaN(d.getTime()) ? esc(stamp) : d.toLocaleString();
}
function terminal(state) { return state === "COMPLETED" || state === "FAILED" || state === "STOPPED"; }

function table(headers, rows, rowClasses) {
  if (rows.length === 0) return '<div class="muted">none</div>';
  let html = "<table><thead><tr>";
  for (const h of headers) html += "<th>" + esc(h) + "</th>";
  html += "</tr></thead><tbody>";
  rows.forEach((row, i) => {
    const cls = rowClasses && rowClasses[i] ? ' class="' + rowClasses[i] + '"' : "";
    html += "<tr" + cls + ">" + row.map(c => "<td>" + c + "</td>").join("") + "</tr>";
  });
  return html + "</tbody></table>";
}

function devices(list) {
  return (list || []).map(d => d.kind === "GPU"
      ? esc("GPU " + num(d.index) + (d.name ? " " + d.name : ""))
      : esc("CPU" + (num(d.cpuCores) > 0 ? " (" + num(d.cpuCores) + " cores)" : ""))).join("<br>");
}

function pausedPhase(phase) { return phase === "WORKER_PAUSED" || phase === "WORKER_PAUSING"; }

function workerRows(workers, inGeneration) {
  return workers.map(w => {
    const a = w.assignment || {};
    const ranks = inGeneration
        ? "global " + num(a.globalRank) + "/" + num(a.worldSize) + ", local " +
          num(a.localRank) + "/" + num(a.localWorldSize) + (a.nodeLeader ? " (leader)" : "")
        : "";
    const used = inGeneration ? devices(a.devices) : devices(w.devices);
    return [
      '<span class="worker-id">' + esc(w.workerId) + "</span>" +
          (w.straggler ? ' <span class="straggler" title="step time well above the median">straggler</span>' : ""),
      esc(w.host + ":" + num(w.grpcPort)) + (num(w.pid) ? '<br><span class="muted">pid ' + num(w.pid) + "</span>" : ""),
      stateBadge(w.phase),
      esc(ranks),
      used,
      num(w.step),
      fixed(w.loss, 4),
      pausedPhase(w.phase) ? "paused" : fixed(w.samplesPerSecond, 1),
      seconds(w.stepSeconds),
      seconds(w.pushWaitSeconds),
      seconds(w.heartbeatAgeSeconds),
      w.error ? '<span class="error">' + esc(w.error) + "</span>" : "",
    ];
  });
}
const WORKER_HEADERS = ["worker", "address", "phase", "ranks", "devices", "step", "loss",
                        "samples/s", "step time", "push wait", "heartbeat age", "note"];

// --- Charts: inline SVG, so that what is drawn is also in the DOM. ---

// A round tick spacing (1, 2 or 5 times a power of ten) giving about `count` ticks.
function tickStep(range, count) {
  const raw = range / count;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / magnitude;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
}
// A y label short enough for the axis: 12.5k, 1.2M, 0.25, 2.6e-4.
function tickLabel(v, step) {
  if (Math.abs(v) < step / 2) return "0";
  const a = Math.abs(v);
  const digits = s => Math.max(0, -Math.floor(Math.log10(s) + 1e-9));
  if (a >= 1e6) return String(Number((v / 1e6).toFixed(digits(step / 1e6)))) + "M";
  if (a >= 1e4) return String(Number((v / 1e3).toFixed(digits(step / 1e3)))) + "k";
  if (step < 1e-3) return v.toExponential(Math.max(1, Math.floor(Math.log10(a)) - Math.floor(Math.log10(step))));
  return String(Number(v.toFixed(digits(step))));
}
// The y axis: `fixed` [lo, hi], or the data's range (from 0 with `zero`) widened to ticks.
// With `robust`, a few outliers (a first step that compiles, a stall) do not flatten the
// rest: the top is the 99th percentile when the maximum is far above it.
function yAxis(values, options) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (options.robust && values.length >= 20) {
    const sorted = values.slice().sort((a, b) => a - b);
    const p99 = sorted[Math.floor(0.99 * (sorted.length - 1))];
    if (p99 > 0 && hi > 2 * p99) hi = 1.2 * p99;
  }
  if (options.fixed) { lo = options.fixed[0]; hi = options.fixed[1]; }
  if (options.zero) lo = Math.min(lo, 0);
  if (hi === lo) { const pad = hi === 0 ? 1 : Math.abs(hi) * 0.1; hi += pad; lo = options.zero && lo >= 0 ? 0 : lo - pad; }
  const step = tickStep(hi - lo, 4);
  if (!options.fixed) { lo = Math.floor(lo / step + 1e-9) * step; hi = Math.ceil(hi / step - 1e-9) * step; }
  return {lo: lo, hi: hi, step: step};
}

// Draws `series` ([{label, points: [[x, y], ...], color}]) with y ticks and step labels.
// The svg carries data-y-min/-max and each curve data-label/-points for tests.
function drawChart(id, series, options) {
  const svg = document.getElementById(id);
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height"));
  const left = 58, right = 12, top = 10, bottom = 26;
  const drawn = series.map(s => ({label: s.label, color: s.color,
      points: s.points.filter(p => p[1] !== null && isFinite(p[1]) && isFinite(p[0]))}));
  const values = [], steps = [];
  for (const s of drawn) for (const p of s.points) { steps.push(p[0]); values.push(p[1]); }
  if (values.length === 0) {
    svg.removeAttribute("data-y-min");
    svg.removeAttribute("data-y-max");
    svg.innerHTML = '<text x="' + (width / 2) + '" y="' + (height / 2) +
        '" text-anchor="middle" fill="#8a91a3" font-size="12">no data yet</text>';
    return;
  }
  let xMin = Infinity, xMax = -Infinity;
  for (const x of steps) { if (x < xMin) xMin = x; if (x > xMax) xMax = x; }
  if (xMax === xMin) xMax = xMin + 1;
  const y = yAxis(values, options || {});
  svg.dataset.yMin = String(y.lo);
  svg.dataset.yMax = String(y.hi);
  const sx = x => left + (x - xMin) / (xMax - xMin) * (width - left - right);
  // Values beyond the axis (outliers of a robust one) are drawn at its edge.
  const sy = v => top + (1 - (Math.min(Math.max(v, y.lo), y.hi) - y.lo) / (y.hi - y.lo)) *
      (height - top - bottom);
  let clipped = 0;
  for (const v of values) if (v > y.hi) clipped++;
  let html = "";
  for (let i = 0, v = y.lo; i <= 12 && v <= y.hi + y.step / 2; i++, v = y.lo + i * y.step) {
    const py = sy(v).toFixed(1);
    html += '<line x1="' + left + '" y1="' + py + '" x2="' + (width - right) + '" y2="' + py +
        '" stroke="#eceef3"/>' +
        '<text class="y-label" x="' + (left - 5) + '" y="' + (Number(py) + 3.5) +
        '" text-anchor="end" font-size="10" fill="#5a6275">' + esc(tickLabel(v, y.step)) + "</text>";
  }
  html += '<line x1="' + left + '" y1="' + (height - bottom) + '" x2="' + (width - right) + '" y2="' +
      (height - bottom) + '" stroke="#c5cad6"/>' +
      '<line x1="' + left + '" y1="' + top + '" x2="' + left + '" y2="' + (height - bottom) +
      '" stroke="#c5cad6"/>' +
      '<text x="' + left + '" y="' + (height - 8) + '" font-size="10" fill="#5a6275">step ' + xMin + "</text>" +
      '<text x="' + (width - right) + '" y="' + (height - 8) + '" text-anchor="end" font-size="10" fill="#5a6275">step ' +
      xMax + "</text>";
  if (clipped) {
    html += '<text class="clipped" x="' + (width - right) + '" y="' + (top + 9) +
        '" text-anchor="end" font-size="10" fill="#b3261e">' + clipped + " above the top</text>";
  }
  for (const s of drawn) {
    if (s.points.length === 0) continue;
    const line = s.points.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    html += '<polyline class="curve" data-label="' + esc(s.label) + '" data-points="' + s.points.length +
        '" fill="none" stroke="' + (s.color || COLORS[0]) + '" stroke-width="1.5" points="' + line + '"/>';
    if (s.points.length === 1) {
      html += '<circle cx="' + sx(s.points[0][0]).toFixed(1) + '" cy="' + sy(s.points[0][1]).toFixed(1) +
          '" r="2.5" fill="' + (s.color || COLORS[0]) + '"/>';
    }
  }
  svg.innerHTML = html;
}

function swatch(color) {
  return '<svg width="10" height="10"><rect width="10" height="10" fill="' + color + '"/></svg> ';
}

// The test loss and each named metric the model reports (TorchScript metrics(x, y)),
// one chart each, from the evaluations (or progress points carrying one).
function renderEvaluationCharts(evaluations) {
  const testLoss = evaluations.map(e => [num(e.step), finite(e.testLoss)]);
  const named = {};
  for (const e of evaluations) {
    for (const [name, value] of Object.entries(e.metrics || {})) {
      (named[name] = named[name] || []).push([num(e.step), finite(value)]);
    }
  }
  const names = Object.keys(named).sort();
  const box = document.getElementById("metric-charts");
  const wanted = names.join(",");
  if (box.dataset.names !== wanted || !box.firstChild) {
    // Names are letters, digits and '_' (the coordinator refuses others); escaped anyway.
    box.innerHTML = '<div class="chart"><div>test loss by step (each evaluation)</div>' +
        '<svg id="test-loss-chart" width="380" height="180"></svg></div>' +
        names.map(n => '<div class="chart"><div>test ' + esc(n) + ' by step</div><svg id="metric-chart-' +
            esc(n) + '" width="380" height="180"></svg></div>').join("");
    box.dataset.names = wanted;
  }
  drawChart("test-loss-chart", [{label: "test loss", points: testLoss}], {});
  for (const n of names) drawChart("metric-chart-" + n, [{label: n, points: named[n]}], {});
}

// The curves of a job: from its per-step history, or, for a job without one (a run
// kept by an older coordinator), from the progress points of its heartbeats.
function renderCurves(job, history) {
  const steps = (history && history.steps) || [];
  const evaluations = (history && history.evaluations) || [];
  const progress = (job && job.progress) || [];
  const note = document.getElementById("history-note");
  let loss, accuracy, throughput, stepTime;
  if (steps.length > 0 || evaluations.length > 0) {
    loss = steps.map(p => [num(p.step), finite(p.loss)]);
    throughput = steps.map(p => [num(p.step), finite(p.samplesPerSecond)]);
    stepTime = steps.map(p => [num(p.step), finite(p.stepSeconds)]);
    accuracy = evaluations.map(e => [num(e.step), finite(e.testAccuracy)]);
    const stride = num(history.stride);
    note.textContent = "(" + steps.length + " of " + num(history.stepsRecorded) + " steps" +
        (stride > 1 ? ", every " + stride + "th kept" : "") + "; " + evaluations.length + " evaluation(s))";
  } else {
    loss = progress.map(p => [num(p.step), finite(p.loss)]);
    throughput = progress.map(p => [num(p.step), finite(p.samplesPerSecond)]);
    stepTime = [];
    accuracy = progress.filter(p => num(p.testAccuracy) >= 0).map(p => [num(p.step), num(p.testAccuracy)]);
    note.textContent = progress.length ? "(from heartbeats: no per-step history)" : "";
  }
  renderEvaluationCharts(evaluations.length ? evaluations
      : progress.filter(p => num(p.testAccuracy) >= 0 || Object.keys(p.metrics || {}).length > 0));
  drawChart("loss-chart", [{label: "loss", points: loss}], {});
  drawChart("accuracy-chart", [{label: "accuracy", points: accuracy}], {fixed: [0, 1]});
  drawChart("throughput-chart", [{label: "samples/s", points: throughput}], {zero: true, robust: true});
  drawChart("step-time-chart", [{label: "step time", points: stepTime}], {zero: true, robust: true});
}

// Per-worker timings: a curve each, and a table naming the stragglers (slow, above
// straggler_factor x the step's median, in at least half of their steps).
function renderTimeline(history) {
  const workers = (history && history.workers) || [];
  const factor = num(history && history.stragglerFactor) || 1.5;
  drawChart("worker-step-chart", workers.map((w, i) => ({label: w.workerId,
      color: COLORS[i % COLORS.length],
      points: (w.points || []).map(p => [num(p.step), finite(p.stepSeconds)])})), {zero: true, robust: true});
  drawChart("worker-wait-chart", workers.map((w, i) => ({label: w.workerId,
      color: COLORS[i % COLORS.length],
      points: (w.points || []).map(p => [num(p.step), finite(p.pushWaitSeconds)])})), {zero: true, robust: true});
  const rows = workers.map((w, i) => {
    const stepsRun = num(w.steps), slow = num(w.slowSteps);
    const straggler = workers.length > 1 && stepsRun > 0 && 2 * slow >= stepsRun;
    return [swatch(COLORS[i % COLORS.length]) + '<span class="worker-id">' + esc(w.workerId) + "</span>" +
                (straggler ? ' <span class="straggler" title="slower than ' + factor +
                     ' x the median in at least half of its steps">straggler</span>' : ""),
            esc(w.nodeName), num(w.globalRank), stepsRun,
            seconds(stepsRun ? num(w.totalStepSeconds) / stepsRun : 0),
            seconds(stepsRun ? num(w.totalPushWaitSeconds) / stepsRun : 0),
            slow + " of " + stepsRun];
  });
  const more = num(history && history.workersWithoutTimeline);
  document.getElementById("worker-timeline").innerHTML =
      table(["worker", "node", "rank", "steps", "mean step time", "mean PS wait",
             "slow steps (> " + factor + " x median)"], rows) +
      (more ? '<div class="muted">' + more + " more worker(s) without a timeline</div>" : "");
}

function renderJobs(jobs, shownId) {
  const rows = jobs.map(j => {
    const r = j.result || {};
    return ['<a href="#job=' + encodeURIComponent(j.jobId) + '">' + esc(j.jobId) + "</a>",
            esc((j.spec || {}).name), stateBadge(j.state),
            num(j.step) + (num(j.totalSteps) ? " of " + num(j.totalSteps) : ""),
            j.state === "COMPLETED" ? (100 * num(r.testAccuracy)).toFixed(2) + " %" : "",
            time(j.created), time(j.finished)];
  });
  document.getElementById("jobs").innerHTML =
      table(["job", "name", "state", "steps", "test accuracy", "created", "finished"], rows,
            jobs.map(j => j.jobId === shownId ? "selected" : ""));
  document.getElementById("jobs-note").innerHTML = jobs.length + " job(s)" +
      (location.hash ? ' &middot; <a href="#">follow the latest</a>' : "");
}

function renderJob(job, history) {
  const box = document.getElementById("job");
  if (!job || !job.jobId) {
    box.innerHTML = '<span class="muted">no job submitted</span>';
    return;
  }
  const spec = job.spec || {};
  const step = num(job.step), total = num(job.totalSteps), perEpoch = num(job.stepsPerEpoch);
  const progress = job.progress || [];
  const last = progress.length ? progress[progress.length - 1] : null;
  const percent = total > 0 ? Math.min(100, 100 * step / total) : 0;
  const evaluations = (history && history.evaluations) || [];
  let accuracy = null, metrics = {};
  for (const p of progress) {
    if (num(p.testAccuracy) >= 0) accuracy = num(p.testAccuracy);
    if (Object.keys(p.metrics || {}).length) metrics = p.metrics;
  }
  if (evaluations.length) {
    const e = evaluations[evaluations.length - 1];
    accuracy = num(e.testAccuracy) >= 0 ? num(e.testAccuracy) : null;
    metrics = e.metrics || {};
  }
  const metricsText = Object.keys(metrics).sort().map(n => esc(n) + " " + fixed(metrics[n], 4)).join(", ");
  const steps = (history && history.steps) || [];
  let loss = last ? fixed(last.loss, 4) : "&ndash;";
  if (steps.length) loss = fixed(steps[steps.length - 1].loss, 4);
  let throughput = last ? fixed(last.samplesPerSecond, 1) : "&ndash;";
  if (job.state === "PAUSED") throughput = "paused";
  else if (terminal(job.state)) throughput = job.result ? fixed(job.result.samplesPerSecond, 1) + " (mean)" : "&ndash;";
  const epochs = num(spec.epochs);
  let html = '<dl class="kv">' +
      "<dt>job</dt><dd id=\"job-id\">" + esc(job.jobId) + " &mdash; " + esc(spec.name) + "</dd>" +
      "<dt>state</dt><dd id=\"job-state\">" + stateBadge(job.state) + " " + esc(job.stateReason) + "</dd>" +
      "<dt>progress</dt><dd id=\"job-progress\">step " + step + (total ? " of " + total : "") +
      (perEpoch ? " &middot; epoch " + (num(job.epoch) + 1 > epochs && epochs ? epochs : num(job.epoch) + 1) +
          (epochs ? " of " + epochs : "") + " (" + perEpoch + " steps each)" : "") +
      '<div class="bar"><div id="job-bar" data-width="' + percent.toFixed(1) + '"></div></div></dd>' +
      "<dt>loss</dt><dd id=\"job-loss\">" + loss + "</dd>" +
      "<dt>test accuracy</dt><dd id=\"job-accuracy\">" + (accuracy !== null ? (100 * accuracy).toFixed(2) + " %" : "&ndash;") + "</dd>" +
      (metricsText ? "<dt>test metrics</dt><dd id=\"job-metrics\">" + metricsText + "</dd>" : "") +
      "<dt>samples/s</dt><dd id=\"job-throughput\">" + throughput + "</dd>" +
      "<dt>model</dt><dd>" + esc((spec.model || {}).name) + " " + esc(((spec.model || {}).layerSizes || []).join("-")) + esc(((spec.model || {}).torchscript || {}).fileName || "") + "</dd>" +
      "<dt>training</dt><dd>" + esc(spec.mode) + ", batch " + num(spec.globalBatchSize) + ", " +
      esc((spec.optimizer || {}).type) + " lr " + esc((spec.optimizer || {}).learningRate) +
      ", nodes " + num(spec.nodesMin) + ".." + num(spec.nodesMax) + ", " +
      num(spec.replicasPerWorker) + " replica(s)/worker on " + esc(spec.devices) + "</dd>" +
      "<dt>generation</dt><dd>" + num(job.generation) + "</dd>" +
      "<dt>PS traffic</dt><dd id=\"job-traffic\">pushed " + bytes((history || {}).bytesPushed) +
      ", pulled " + bytes((history || {}).bytesPulled) + "</dd>" +
      "<dt>created</dt><dd>" + time(job.created) + (job.started ? " &middot; started " + time(job.started) : "") +
      (job.finished ? " &middot; finished " + time(job.finished) : "") + "</dd>";
  if (job.state === "COMPLETED" && job.result) {
    const r = job.result;
    const evaluated = num(r.testAccuracy) >= 0 ? "accuracy " + (100 * num(r.testAccuracy)).toFixed(2) + " %"
        : "test loss " + fixed(r.testLoss, 4);
    const named = Object.keys(r.metrics || {}).sort().map(n => ", " + esc(n) + " " + fixed(r.metrics[n], 4)).join("");
    html += "<dt>result</dt><dd id=\"job-result\">" + evaluated + named +
        ", final loss " + fixed(r.finalLoss, 4) + ", " + num(r.steps) + " steps, " +
        fixed(r.samplesPerSecond, 1) + " samples/s, " + seconds(r.wallSeconds) +
        ", pushed " + bytes(r.bytesPushed) + ", pulled " + bytes(r.bytesPulled) + "</dd>";
  }
  box.innerHTML = html + "</dl>";
  // Set through the DOM, not a style attribute: the Content-Security-Policy allows no
  // inline style attributes.
  const bar = document.getElementById("job-bar");
  if (bar) bar.style.width = bar.dataset.width + "%";
}

function renderEvents(job) {
  const events = ((job || {}).events || []).slice().reverse();
  document.getElementById("events").innerHTML = table(
      ["time", "transition", "generation", "reason"],
      events.map(e => [time(e.time), stateBadge(e.fromState) + " &rarr; " + stateBadge(e.toState),
                       num(e.generation), '<span class="event-reason">' + esc(e.reason) + "</span>"]));
}

function renderCluster(status) {
  const generation = num(status.generation);
  document.getElementById("generation").textContent =
      generation ? "(generation " + generation + ")" : "(no generation formed)";
  let nodes = "";
  for (const node of status.nodes || []) {
    nodes += '<div class="node"><h3>node ' + num(node.nodeRank) + ": " +
        '<span class="node-name">' + esc(node.nodeName) + "</span> " +
        '<span class="muted">rendezvous ' + esc(node.rendezvousId) + "</span></h3>" +
        table(WORKER_HEADERS, workerRows(node.workers || [], true)) + "</div>";
  }
  document.getElementById("nodes").innerHTML = nodes || '<div class="muted">none</div>';
  const idle = status.idleWorkers || [];
  document.getElementById("idle-workers").innerHTML = table(
      ["node"].concat(WORKER_HEADERS),
      idle.map(w => ['<span class="node-name">' + esc(w.nodeName) + "</span>"].concat(workerRows([w], false)[0])));
  const shards = status.shards || [];
  document.getElementById("shards").innerHTML =
      '<div class="muted">' + shards.length + " of " + num(status.expectedShards) + " registered</div>" +
      table(["shard", "address", "reachable", "step", "partitions", "bytes in", "bytes out",
             "aggregation wait", "checkpoint age", "error"],
            shards.map(s => [num((s.shard || {}).shardIndex), esc((s.shard || {}).address),
                             s.reachable ? "yes" : '<span class="error">no</span>', num(s.step),
                             num(s.partitions), bytes(s.bytesIn), bytes(s.bytesOut),
                             seconds(s.aggregationWaitSeconds), seconds(s.checkpointAgeSeconds),
                             s.error ? '<span class="error">' + esc(s.error) + "</span>" : ""]));
}

function render(view) {
  const status = view.status;
  const readOnly = !!status.readOnlyRunDir;
  document.getElementById("source").textContent =
      readOnly ? "finished run " + status.readOnlyRunDir + " (read-only)" : "";
  document.getElementById("version").textContent = "version " + (status.coordinatorVersion || "?");
  document.getElementById("updated").textContent = "updated " + time(status.now);
  const shownLive = view.job && status.job && view.job.jobId === status.job.jobId;
  document.getElementById("waiting").textContent = shownLive ? (status.waitingReason || "") : "";
  for (const section of document.querySelectorAll("section.live")) section.hidden = readOnly;
  renderJobs(view.jobs, view.job ? view.job.jobId : "");
  renderJob(view.job, view.history);
  renderCurves(view.job, view.history);
  renderTimeline(view.history);
  renderCluster(status);
  renderEvents(view.job);
}

async function getJson(url) {
  const response = await fetch(url, {cache: "no-store"});
  if (!response.ok) {
    throw new Error(url + ": HTTP " + response.status + " " + (await response.text()).trim());
  }
  return response.json();
}

// The job shown: the one named by #job=ID, else the active (or latest) one.
function wantedJob() {
  const match = /^#job=(.+)$/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : "";
}

const cache = {jobs: [], jobsKey: "", jobsAt: 0, historyKey: "", history: null};
let timer = null;

async function refresh() {
  clearTimeout(timer);
  try {
    const status = await getJson("/api/v1/status");
    const wanted = wantedJob();
    let job = status.job && status.job.jobId ? status.job : null;
    if (wanted && (!job || job.jobId !== wanted)) {
      job = await getJson("/api/v1/jobs/" + encodeURIComponent(wanted));
    }
    const jobsKey = job ? job.jobId + "/" + job.state : "";
    if (jobsKey !== cache.jobsKey || Date.now() - cache.jobsAt > 10000) {
      cache.jobs = (await getJson("/api/v1/jobs")).jobs || [];
      cache.jobsKey = jobsKey;
      cache.jobsAt = Date.now();
    }
    // The history is fetched again only when the job moved.
    let history = null;
    if (job) {
      const key = [job.jobId, job.step, job.state, (job.events || []).length].join("/");
      if (key !== cache.historyKey) {
        cache.history = await getJson("/api/v1/jobs/" + encodeURIComponent(job.jobId) + "/history");
        cache.historyKey = key;
      }
      history = cache.history;
    }
    render({status: status, job: job, jobs: cache.jobs, history: history});
    document.getElementById("fetch-error").textContent = "";
  } catch (error) {
    document.getElementById("fetch-error").textContent = "cannot load: " + error.message;
  } finally {
    timer = setTimeout(refresh, REFRESH_MS);
  }
}
window.addEventListener("hashchange", refresh);
refresh();
</script>
</body>
</html>
)HTML";

}  // namespace tributary::coordinator
