#include "services/coordinator/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace tributary::coordinator {
namespace {

// One page, no external assets: the cluster may have no route to the internet.
// Rendering is plain DOM building; charts are inline SVG polylines so that what is
// drawn is also in the DOM (the headless-browser test reads it).
constexpr char kDashboardHtml[] = R"HTML(<!DOCTYPE html>
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
  main { padding: 14px 18px; display: grid; gap: 14px; }
  section { background: #fff; border-radius: 6px; padding: 12px 14px;
            box-shadow: 0 1px 2px rgba(0,0,0,0.08); }
  h2 { font-size: 15px; margin: 0 0 8px 0; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e6e8ee; vertical-align: top; }
  th { color: #5a6275; font-weight: 600; }
  .state { display: inline-block; padding: 2px 8px; border-radius: 10px; font-weight: 600;
           font-size: 12px; background: #e6e8ee; }
  .RUNNING, .WORKER_TRAINING { background: #d3f2dc; color: #13632e; }
  .RENDEZVOUS, .PENDING, .WORKER_RENDEZVOUS { background: #fff1c9; color: #7a5600; }
  .PAUSED, .WORKER_PAUSED { background: #dfe8ff; color: #1d3f99; }
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
  #fetch-error { color: #b3261e; }
</style>
</head>
<body>
<header>
  <h1>Tributary coordinator</h1>
  <span class="meta" id="version"></span>
  <span class="meta" id="updated">loading&hellip;</span>
  <span class="meta" id="fetch-error"></span>
</header>
<main>
  <section id="job-section">
    <h2>Job</h2>
    <div id="job">no job submitted</div>
    <div id="waiting"></div>
  </section>
  <section>
    <h2>Training curves</h2>
    <div class="charts">
      <div class="chart"><div>loss by step</div><svg id="loss-chart" width="360" height="160"></svg></div>
      <div class="chart"><div>test accuracy by step</div><svg id="accuracy-chart" width="360" height="160"></svg></div>
      <div class="chart"><div>samples/s by step</div><svg id="throughput-chart" width="360" height="160"></svg></div>
    </div>
  </section>
  <section>
    <h2>Nodes <span class="muted" id="generation"></span></h2>
    <div id="nodes"></div>
    <h2>Waiting workers</h2>
    <div id="idle-workers"></div>
  </section>
  <section>
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

function esc(value) {
  return String(value === undefined || value === null ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}
// proto3 JSON writes 64-bit integers as strings.
function num(value) { const n = Number(value); return isFinite(n) ? n : 0; }
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

function table(headers, rows) {
  if (rows.length === 0) return '<div class="muted">none</div>';
  let html = "<table><thead><tr>";
  for (const h of headers) html += "<th>" + esc(h) + "</th>";
  html += "</tr></thead><tbody>";
  for (const row of rows) html += "<tr>" + row.map(c => "<td>" + c + "</td>").join("") + "</tr>";
  return html + "</tbody></table>";
}

function devices(list) {
  return (list || []).map(d => d.kind === "GPU"
      ? esc("GPU " + num(d.index) + (d.name ? " " + d.name : ""))
      : esc("CPU" + (num(d.cpuCores) > 0 ? " (" + num(d.cpuCores) + " cores)" : ""))).join("<br>");
}

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
      fixed(w.samplesPerSecond, 1),
      seconds(w.stepSeconds),
      seconds(w.pushWaitSeconds),
      seconds(w.heartbeatAgeSeconds),
      w.error ? '<span class="error">' + esc(w.error) + "</span>" : "",
    ];
  });
}
const WORKER_HEADERS = ["worker", "address", "phase", "ranks", "devices", "step", "loss",
                        "samples/s", "step time", "push wait", "heartbeat age", "note"];

// An SVG line chart of (x, y) points with min/max labels.
function drawChart(id, points, label) {
  const svg = document.getElementById(id);
  const width = 360, height = 160, left = 46, right = 8, top = 8, bottom = 22;
  if (points.length === 0) {
    svg.innerHTML = '<text x="' + (width / 2) + '" y="' + (height / 2) +
        '" text-anchor="middle" fill="#8a91a3" font-size="12">no data yet</text>';
    return;
  }
  let xMin = Math.min(...points.map(p => p[0])), xMax = Math.max(...points.map(p => p[0]));
  let yMin = Math.min(...points.map(p => p[1])), yMax = Math.max(...points.map(p => p[1]));
  if (xMax === xMin) xMax = xMin + 1;
  if (yMax === yMin) { yMax = yMax + 0.5; yMin = yMin - 0.5; }
  const sx = x => left + (x - xMin) / (xMax - xMin) * (width - left - right);
  const sy = y => top + (1 - (y - yMin) / (yMax - yMin)) * (height - top - bottom);
  const line = points.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
  svg.innerHTML =
      '<line x1="' + left + '" y1="' + (height - bottom) + '" x2="' + (width - right) + '" y2="' +
      (height - bottom) + '" stroke="#c5cad6"/>' +
      '<line x1="' + left + '" y1="' + top + '" x2="' + left + '" y2="' + (height - bottom) +
      '" stroke="#c5cad6"/>' +
      '<text x="' + (left - 4) + '" y="' + (top + 10) + '" text-anchor="end" font-size="10" fill="#5a6275">' +
      esc(yMax.toPrecision(3)) + "</text>" +
      '<text x="' + (left - 4) + '" y="' + (height - bottom) + '" text-anchor="end" font-size="10" fill="#5a6275">' +
      esc(yMin.toPrecision(3)) + "</text>" +
      '<text x="' + left + '" y="' + (height - 6) + '" font-size="10" fill="#5a6275">step ' + xMin + "</text>" +
      '<text x="' + (width - right) + '" y="' + (height - 6) + '" text-anchor="end" font-size="10" fill="#5a6275">step ' +
      xMax + "</text>" +
      '<polyline class="curve" data-label="' + esc(label) + '" data-points="' + points.length +
      '" fill="none" stroke="#2f6fdf" stroke-width="1.6" points="' + line + '"/>';
}

function renderJob(status) {
  const job = status.job;
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
  let accuracy = null;
  for (const p of progress) if (num(p.testAccuracy) >= 0) accuracy = num(p.testAccuracy);
  const epochs = num(spec.epochs);
  let html = '<dl class="kv">' +
      "<dt>job</dt><dd id=\"job-id\">" + esc(job.jobId) + " &mdash; " + esc(spec.name) + "</dd>" +
      "<dt>state</dt><dd id=\"job-state\">" + stateBadge(job.state) + " " + esc(job.stateReason) + "</dd>" +
      "<dt>progress</dt><dd id=\"job-progress\">step " + step + (total ? " of " + total : "") +
      (perEpoch ? " &middot; epoch " + (num(job.epoch) + 1 > epochs && epochs ? epochs : num(job.epoch) + 1) +
          (epochs ? " of " + epochs : "") + " (" + perEpoch + " steps each)" : "") +
      '<div class="bar"><div id="job-bar" data-width="' + percent.toFixed(1) + '"></div></div></dd>' +
      "<dt>loss</dt><dd id=\"job-loss\">" + (last ? fixed(last.loss, 4) : "&ndash;") + "</dd>" +
      "<dt>test accuracy</dt><dd id=\"job-accuracy\">" + (accuracy !== null ? (100 * accuracy).toFixed(2) + " %" : "&ndash;") + "</dd>" +
      "<dt>samples/s</dt><dd id=\"job-throughput\">" + (last ? fixed(last.samplesPerSecond, 1) : "&ndash;") + "</dd>" +
      "<dt>model</dt><dd>" + esc((spec.model || {}).name) + " " + esc(((spec.model || {}).layerSizes || []).join("-")) + esc(((spec.model || {}).torchscript || {}).fileName || "") + "</dd>" +
      "<dt>training</dt><dd>" + esc(spec.mode) + ", batch " + num(spec.globalBatchSize) + ", " +
      esc((spec.optimizer || {}).type) + " lr " + esc((spec.optimizer || {}).learningRate) +
      ", nodes " + num(spec.nodesMin) + ".." + num(spec.nodesMax) + ", " +
      num(spec.replicasPerWorker) + " replica(s)/worker on " + esc(spec.devices) + "</dd>" +
      "<dt>generation</dt><dd>" + num(job.generation) + "</dd>" +
      "<dt>created</dt><dd>" + time(job.created) + (job.started ? " &middot; started " + time(job.started) : "") +
      (job.finished ? " &middot; finished " + time(job.finished) : "") + "</dd>";
  if (job.state === "COMPLETED" && job.result) {
    const r = job.result;
    html += "<dt>result</dt><dd id=\"job-result\">accuracy " + (100 * num(r.testAccuracy)).toFixed(2) +
        " %, final loss " + fixed(r.finalLoss, 4) + ", " + num(r.steps) + " steps, " +
        fixed(r.samplesPerSecond, 1) + " samples/s, " + seconds(r.wallSeconds) +
        ", pushed " + bytes(r.bytesPushed) + ", pulled " + bytes(r.bytesPulled) + "</dd>";
  }
  box.innerHTML = html + "</dl>";
  // Set through the DOM, not a style attribute: the Content-Security-Policy allows no
  // inline style attributes.
  const bar = document.getElementById("job-bar");
  if (bar) bar.style.width = bar.dataset.width + "%";
  drawChart("loss-chart", progress.map(p => [num(p.step), num(p.loss)]), "loss");
  drawChart("accuracy-chart", progress.filter(p => num(p.testAccuracy) >= 0)
      .map(p => [num(p.step), num(p.testAccuracy)]), "accuracy");
  drawChart("throughput-chart", progress.map(p => [num(p.step), num(p.samplesPerSecond)]),
            "samples/s");
}

function renderEvents(status) {
  const events = ((status.job || {}).events || []).slice().reverse();
  document.getElementById("events").innerHTML = table(
      ["time", "transition", "generation", "reason"],
      events.map(e => [time(e.time), stateBadge(e.fromState) + " &rarr; " + stateBadge(e.toState),
                       num(e.generation), '<span class="event-reason">' + esc(e.reason) + "</span>"]));
}

function render(status) {
  document.getElementById("version").textContent = "version " + (status.coordinatorVersion || "?");
  document.getElementById("updated").textContent = "updated " + time(status.now);
  document.getElementById("waiting").textContent = status.waitingReason || "";
  const generation = num(status.generation);
  document.getElementById("generation").textContent =
      generation ? "(generation " + generation + ")" : "(no generation formed)";
  renderJob(status);
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
  renderEvents(status);
}

async function refresh() {
  try {
    const response = await fetch("/api/v1/status", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    document.getElementById("fetch-error").textContent = "";
  } catch (error) {
    document.getElementById("fetch-error").textContent = "cannot reach the coordinator: " + error.message;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}
refresh();
</script>
</body>
</html>
)HTML";

}  // namespace

const std::string& DashboardHtml() {
  static const std::string* html = new std::string(kDashboardHtml);
  return *html;
}

namespace {

// 'sha256-<base64>' of the text between `open` and `close` in the page.
std::string InlineHash(const std::string& html, const std::string& open,
                       const std::string& close) {
  const size_t start = html.find(open);
  const size_t end = html.find(close, start);
  if (start == std::string::npos || end == std::string::npos) return "'none'";
  const std::string body = html.substr(start + open.size(), end - start - open.size());
  const std::string digest = absl::HexStringToBytes(Sha256Hex(body));
  return absl::StrCat("'sha256-", absl::Base64Escape(digest), "'");
}

}  // namespace

const std::string& DashboardContentSecurityPolicy() {
  static const std::string* policy = new std::string(absl::StrCat(
      "default-src 'none'; script-src ", InlineHash(DashboardHtml(), "<script>", "</script>"),
      "; style-src ", InlineHash(DashboardHtml(), "<style>", "</style>"),
      "; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
      "frame-ancestors 'none'"));
  return *policy;
}

absl::StatusOr<std::string> ClusterStatusJson(const v1::ClusterStatus& status) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(status, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the cluster status as JSON: ", printed.ToString()));
  }
  return json;
}

void AddDashboardRoutes(HttpServer& http, std::function<v1::ClusterStatus()> status) {
  const auto page = [](const httplib::Request&, httplib::Response& response) {
    response.set_header("Cache-Control", "no-store");
    response.set_header("Content-Security-Policy", DashboardContentSecurityPolicy());
    response.set_content(DashboardHtml(), "text/html; charset=utf-8");
  };
  http.Get("/", page);
  http.Get("/index.html", page);
  http.Get("/api/v1/status",
           [status = std::move(status)](const httplib::Request&, httplib::Response& response) {
             response.set_header("Cache-Control", "no-store");
             absl::StatusOr<std::string> json = ClusterStatusJson(status());
             if (!json.ok()) {
               response.status = 500;
               response.set_content(std::string(json.status().message()) + "\n", "text/plain");
               return;
             }
             response.set_content(*json, "application/json");
           });
}

}  // namespace tributary::coordinator
