// Anomaly: paste CSV rows or texts, fit a detector on them, see every row's score
// as a plot with the threshold, and the most anomalous rows in a table.

import { getJson } from "./api.js";
import { hasRoute } from "./catalog.js";
import { el } from "./ui.js";

const $ = (id) => document.getElementById(id);
const MODEL = "playground";

const SAMPLE_CSV = `temperature,vibration
20.1,0.51
20.4,0.49
19.8,0.50
20.0,0.52
20.3,0.48
19.9,0.50
20.2,0.47
35.0,2.90
20.1,0.53
19.7,0.49
20.0,0.51
20.2,0.50
5.0,0.10
20.1,0.48`;

export function initAnomaly() {
  $("an-input").value = SAMPLE_CSV;
  $("an-run").addEventListener("click", run);
  $("an-mode").addEventListener("change", () => {
    $("an-input-label").firstChild.textContent =
      $("an-mode").value === "text" ? "Texts, one per line " : "CSV rows (a header line is optional) ";
  });
  document.addEventListener("serverinfo", async () => {
    const served = hasRoute("POST", "/v1/anomaly/fit");
    $("an-missing").hidden = served;
    $("an-run").disabled = !served;
    if (served) await loadBackends().catch(() => {});
  });
}

async function loadBackends() {
  const body = await getJson("/v1/anomaly/backends");
  const select = $("an-backend");
  const previous = select.value;
  select.replaceChildren(
    ...body.data.filter((b) => b.available).map((b) => new Option(b.name, b.backend)),
  );
  if (previous) select.value = previous;
}

/** CSV text -> {features, rows}; a first line that is not all numbers is the header. */
export function parseCsv(text) {
  const lines = text.split("\n").map((l) => l.trim()).filter(Boolean);
  const cells = lines.map((l) => l.split(",").map((c) => c.trim()));
  let features = null;
  if (cells.length && cells[0].some((c) => c === "" || Number.isNaN(Number(c)))) {
    features = cells.shift();
  }
  const rows = cells.map((row, i) => {
    const values = row.map(Number);
    if (values.some((v) => !Number.isFinite(v))) throw new Error(`line ${i + 1 + (features ? 1 : 0)} is not all numbers`);
    return values;
  });
  return { features, rows };
}

async function run() {
  const mode = $("an-mode").value;
  let data;
  let labels;
  try {
    if (mode === "text") {
      data = $("an-input").value.split("\n").map((s) => s.trim()).filter(Boolean);
      labels = data;
    } else {
      const { features, rows } = parseCsv($("an-input").value);
      data = features ? rows.map((r) => Object.fromEntries(features.map((f, j) => [f, r[j]]))) : rows;
      labels = rows.map((r) => r.join(", "));
    }
  } catch (error) {
    $("an-status").textContent = `Error: ${error.message}`;
    return;
  }
  if (data.length < 3) {
    $("an-status").textContent = "Give at least three rows.";
    return;
  }
  $("an-run").disabled = true;
  $("an-status").textContent = "Fitting…";
  const started = performance.now();
  try {
    const contamination = Number($("an-contamination").value);
    const fitted = await getJson("/v1/anomaly/fit", {
      method: "POST",
      json: { model: MODEL, backend: $("an-backend").value || "isolation_forest", data, contamination },
    });
    $("an-status").textContent = "Scoring…";
    const scored = await getJson("/v1/anomaly/score", { method: "POST", json: { model: MODEL, data } });
    const ms = Math.round(performance.now() - started);
    const s = scored.summary;
    $("an-status").textContent =
      `${fitted.backend} on ${fitted.samples_fitted} rows · ${s.anomaly_count} anomalous ` +
      `(threshold ${s.threshold.toFixed(3)}) · ${ms} ms`;
    render(scored.data, s.threshold, labels);
  } catch (error) {
    $("an-status").textContent = `Error: ${error.message}`;
  } finally {
    $("an-run").disabled = false;
  }
}

function render(points, threshold, labels) {
  drawPlot($("an-plot"), points, threshold);
  const top = [...points].sort((a, b) => b.score - a.score).slice(0, 10);
  const rows = top.map((p) =>
    el(
      "tr",
      { className: p.is_anomaly ? "anomalous" : "", dataset: { index: p.index, score: p.score.toFixed(6), anomaly: String(p.is_anomaly) } },
      el("td", { className: "num" }, p.index + 1),
      el("td", { className: "num" }, p.score.toFixed(3)),
      el("td", {}, p.is_anomaly ? "anomaly" : ""),
      el("td", { title: labels[p.index] }, labels[p.index].length > 60 ? `${labels[p.index].slice(0, 59)}…` : labels[p.index]),
    ),
  );
  const head = el("tr", {}, el("th", {}, "row"), el("th", {}, "score"), el("th", {}, ""), el("th", {}, "data"));
  $("an-results").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

function drawPlot(canvas, points, threshold) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.dataset.points = String(points.length);
  canvas.dataset.anomalies = String(points.filter((p) => p.is_anomaly).length);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(document.documentElement);
  const normal = style.getPropertyValue("--chart-1").trim() || "#3b5bdb";
  const alarm = style.getPropertyValue("--danger").trim() || "#d6336c";
  const grid = style.getPropertyValue("--border").trim() || "#ccc";
  const pad = 8;
  const x = (i) => pad + (points.length > 1 ? (i / (points.length - 1)) * (width - 2 * pad) : (width - 2 * pad) / 2);
  const y = (v) => height - pad - Math.max(0, Math.min(1, v)) * (height - 2 * pad);
  ctx.strokeStyle = grid;
  ctx.setLineDash([4, 4]);
  ctx.beginPath();
  ctx.moveTo(pad, y(threshold));
  ctx.lineTo(width - pad, y(threshold));
  ctx.stroke();
  ctx.setLineDash([]);
  for (const p of points) {
    ctx.fillStyle = p.is_anomaly ? alarm : normal;
    ctx.beginPath();
    ctx.arc(x(p.index), y(p.score), p.is_anomaly ? 4 : 2.5, 0, 2 * Math.PI);
    ctx.fill();
  }
}
