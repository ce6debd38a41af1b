// Server: models (load/unload), resources, live charts from the JSON routes and,
// when a metrics plugin serves it, /metrics; the plugin list. Polls only while shown.

import { api, getJson } from "./api.js";
import { currentInfo, hasRoute, models, refreshCatalog, TEXT_KINDS } from "./catalog.js";
import { Sparkline } from "./charts.js";
import { parsePrometheus, mean, total } from "./metrics.js";
import { el, formatDuration, onTabVisibility } from "./ui.js";

const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);

let timer = null;
let metricsAvailable = true; // until /metrics answers 404
let previousCounters = null; // {time, generation, hits, queries} for rates
const charts = new Map(); // name -> {card, value, sparkline}

/**
 * Chart definitions: label, unit, fixed maximum (null: scale to the data).
 * The metric names follow vLLM's with the `flexserv:` prefix.
 */
const CHARTS = {
  active: { label: "Active requests", unit: "", max: null },
  running: { label: "Running (batch size)", unit: "", max: null },
  waiting: { label: "Waiting requests", unit: "", max: null, color: "--chart-2" },
  tokens: { label: "Generation", unit: " tok/s", max: null },
  kv: { label: "KV-cache use", unit: " %", max: 100 },
  prefix: { label: "Prefix-cache hit rate", unit: " %", max: 100, color: "--chart-2" },
  cpu: { label: "CPU (all cores)", unit: " %", max: 100 },
  ram: { label: "RAM", unit: " %", max: 100, color: "--chart-2" },
  gpu: { label: "GPU memory", unit: " %", max: 100 },
};

export function initServer() {
  onTabVisibility("server", (visible) => (visible ? startPolling() : stopPolling()));
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) stopPolling();
    else if (!$("panel-server").hidden) startPolling();
  });
  document.addEventListener("serverinfo", (event) => renderPlugins(event.detail));
  document.addEventListener("themechange", () => charts.forEach((c) => c.sparkline.draw()));
  window.addEventListener("resize", () => charts.forEach((c) => c.sparkline.draw()));
  $("unload-all").addEventListener("click", () => unload("*"));
  $("models-table").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    if (button.dataset.action === "unload") unload(button.dataset.model);
    else load(button.dataset.model, button.dataset.kind, button);
  });
}

function startPolling() {
  if (timer) return;
  poll();
  timer = setInterval(poll, POLL_MS);
}

function stopPolling() {
  clearInterval(timer);
  timer = null;
}

function chart(name, value, display) {
  let entry = charts.get(name);
  if (!entry) {
    const def = CHARTS[name];
    const valueNode = el("div", { className: "value" });
    const canvas = el("canvas", { "aria-hidden": "true" });
    const card = el("div", { className: "card", dataset: { chart: name } }, el("h3", {}, def.label), valueNode, canvas);
    // Cards keep the order of CHARTS, whenever they first appear.
    const order = Object.keys(CHARTS);
    const after = [...$("charts").children].find((c) => order.indexOf(c.dataset.chart) > order.indexOf(name));
    $("charts").insertBefore(card, after ?? null);
    entry = { card, value: valueNode, sparkline: new Sparkline(canvas, { max: def.max, color: def.color }) };
    charts.set(name, entry);
  }
  const def = CHARTS[name];
  entry.value.textContent = value === null ? "–" : (display ?? `${round(value)}${def.unit}`);
  entry.sparkline.push(value);
}

function round(value) {
  return Math.abs(value) >= 10 ? Math.round(value) : Math.round(value * 10) / 10;
}

async function poll() {
  const [loaded, resources, metrics] = await Promise.allSettled([
    getJson("/v1/flexserv/models/loaded"),
    getJson("/v1/flexserv/resources", { allow: [] }),
    metricsAvailable ? api("/metrics", { allow: [404] }) : Promise.resolve(null),
    refreshCatalog(),
  ]);
  if (loaded.status === "fulfilled") {
    renderModels(loaded.value.models || []);
    chart("active", loaded.value.models.reduce((sum, m) => sum + (m.active_requests || 0), 0));
  } else {
    $("models-status").textContent = `Cannot read loaded models: ${loaded.reason.message}`;
  }
  if (resources.status === "fulfilled") renderResources(resources.value);
  else $("resources").replaceChildren(el("p", { className: "muted small" }, "No resources route (the resources plugin is not loaded)."));
  if (metrics.status === "fulfilled" && metrics.value) {
    if (metrics.value.status === 404) {
      metricsAvailable = false;
      $("metrics-note").textContent = "No /metrics on this server: engine charts (running, waiting, KV cache, prefix cache, tok/s) appear when a metrics plugin serves it.";
    } else {
      renderMetrics(parsePrometheus(await metrics.value.text()));
    }
  }
}

function renderMetrics(samples) {
  const now = performance.now() / 1000;
  const counters = {
    time: now,
    generation: total(samples, "flexserv:generation_tokens_total"),
    hits: total(samples, "flexserv:prefix_cache_hits_total"),
    queries: total(samples, "flexserv:prefix_cache_queries_total"),
  };
  const running = total(samples, "flexserv:num_requests_running");
  if (running !== null) chart("running", running);
  const waiting = total(samples, "flexserv:num_requests_waiting");
  if (waiting !== null) chart("waiting", waiting);
  const kv = mean(samples, "flexserv:kv_cache_usage_perc");
  if (kv !== null) chart("kv", kv * 100);
  const previous = previousCounters;
  previousCounters = counters;
  if (!previous) return;
  const dt = counters.time - previous.time;
  if (counters.generation !== null && previous.generation !== null && dt > 0) {
    chart("tokens", Math.max(0, counters.generation - previous.generation) / dt);
  }
  if (counters.hits !== null && counters.queries !== null && previous.queries !== null) {
    const queries = counters.queries - previous.queries;
    const rate = queries > 0 ? (100 * (counters.hits - previous.hits)) / queries : null;
    // With no new queries, show the lifetime rate rather than a gap.
    const lifetime = counters.queries > 0 ? (100 * counters.hits) / counters.queries : null;
    chart("prefix", rate ?? lifetime);
  }
}

function renderResources(snapshot) {
  const cards = [];
  const cores = snapshot.cpu || [];
  if (cores.length) {
    const avg = cores.reduce((s, c) => s + c.used_percentage, 0) / cores.length;
    chart("cpu", avg);
    cards.push(
      el(
        "div",
        { className: "card" },
        el("h3", {}, "CPU", el("span", {}, `${cores.length} cores · ${Math.round(avg)} %`)),
        el(
          "div",
          { className: "cores" },
          ...cores.map((c) => {
            const bar = el("span");
            bar.style.height = `${c.used_percentage}%`;
            return el("div", { className: "core", title: `core ${c.cpu_id}: ${c.used_percentage} %` }, bar, el("i", {}, `${Math.round(c.used_percentage)}`));
          }),
        ),
      ),
    );
  }
  const ram = snapshot.memory;
  if (ram) {
    chart("ram", ram.used_percentage);
    cards.push(meterCard("RAM", ram.used_percentage, `${ram.used_gb.toFixed(1)} / ${ram.total_gb.toFixed(1)} GB`));
  }
  for (const gpu of snapshot.gpu || []) {
    if (gpu.error) {
      cards.push(el("div", { className: "card" }, el("h3", {}, `GPU ${gpu.gpu_id}`), el("p", { className: "small muted" }, gpu.error)));
      continue;
    }
    if (gpu.gpu_id === 0 && gpu.used_percentage !== undefined) chart("gpu", gpu.used_percentage);
    const details = [
      gpu.used_gb !== undefined ? `${gpu.used_gb.toFixed(1)} / ${gpu.total_gb.toFixed(1)} GB` : null,
      gpu.gpu_utilization_percentage !== undefined ? `util ${gpu.gpu_utilization_percentage} %` : null,
      gpu.temperature_celsius !== undefined ? `${gpu.temperature_celsius} °C` : null,
      gpu.power_watts !== undefined ? `${Math.round(gpu.power_watts)} W` : null,
    ].filter(Boolean);
    cards.push(meterCard(`GPU ${gpu.gpu_id}`, gpu.used_percentage ?? 0, details.join(" · ")));
  }
  if (!(snapshot.gpu || []).length) cards.push(el("div", { className: "card" }, el("h3", {}, "GPU"), el("p", { className: "small muted" }, "none detected")));
  $("resources").replaceChildren(...cards);
}

function meterCard(title, percent, detail) {
  const fill = el("span");
  fill.style.width = `${Math.min(100, percent)}%`;
  return el(
    "div",
    { className: "card" },
    el("h3", {}, title, el("span", {}, `${Math.round(percent)} %`)),
    el("div", { className: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(percent) }, fill),
    el("div", { className: "small muted" }, detail),
  );
}

function renderModels(loaded) {
  const byId = new Map(loaded.map((m) => [m.model_id, m]));
  const timeout = Number(currentInfo()?.settings?.model_timeout) || 0;
  const now = Date.now() / 1000;
  const known = new Set(models.map((m) => m.id));
  const rows = [...models.map((m) => ({ model_id: m.id, kind: m.kind, state: m.state })), ...loaded.filter((m) => !known.has(m.model_id))];
  const body = $("models-table").querySelector("tbody");
  body.replaceChildren(
    ...rows.map((row) => {
      const live = byId.get(row.model_id);
      const state = live?.state ?? row.state ?? "unloaded";
      const idle = live ? Math.max(0, now - live.last_used) : null;
      // The TTL: an idle model unloads after --model-timeout seconds.
      const ttl = idle !== null && timeout > 0 ? ` · unloads in ${formatDuration(Math.max(0, timeout - idle))}` : "";
      const idleText = idle === null ? "" : `${formatDuration(idle)}${ttl}`;
      const action =
        state === "ready"
          ? el("button", { type: "button", className: "small secondary", dataset: { action: "unload", model: row.model_id } }, "Unload")
          : state === "unloaded"
            ? el("button", { type: "button", className: "small", dataset: { action: "load", model: row.model_id, kind: row.kind } }, "Load")
            : null;
      return el(
        "tr",
        { dataset: { model: row.model_id, state } },
        el("td", {}, row.model_id),
        el("td", {}, TEXT_KINDS.includes(row.kind) ? "text" : row.kind),
        el("td", {}, el("span", { className: `state ${state}` }, state)),
        el("td", {}, live?.device ?? ""),
        el("td", {}, live?.dtype ?? ""),
        el("td", { className: "num active" }, live ? String(live.active_requests) : ""),
        el("td", { className: "small muted" }, idleText),
        el("td", {}, action),
      );
    }),
  );
}

async function unload(modelId) {
  $("models-status").textContent = modelId === "*" ? "Unloading all models…" : `Unloading ${modelId}…`;
  try {
    const result = await getJson("/v1/flexserv/models/unload", { method: "POST", json: { model_id: modelId } });
    const names = result.unloaded.filter((u) => u.was_loaded || u.pending).map((u) => u.model_id);
    $("models-status").textContent = [names.length ? `Unloaded ${names.join(", ")}.` : "Nothing was loaded.", ...result.warnings].join(" ");
  } catch (error) {
    $("models-status").textContent = `Unload failed: ${error.message}`;
  }
  await poll();
}

/** A silent 16 kHz mono WAV, enough to make a transcription model load. */
function silentWav(seconds = 0.5, rate = 16000) {
  const samples = Math.round(seconds * rate);
  const view = new DataView(new ArrayBuffer(44 + samples * 2));
  const text = (offset, s) => [...s].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, 36 + samples * 2, true);
  text(8, "WAVEfmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true);
  view.setUint16(22, 1, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * 2, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  text(36, "data");
  view.setUint32(40, samples * 2, true);
  return new Blob([view], { type: "audio/wav" });
}

/** Load a model: through a preload route when the server has one, else with the smallest real request. */
async function load(modelId, kind, button) {
  button.disabled = true;
  $("models-status").textContent = `Loading ${modelId}…`;
  const started = performance.now();
  try {
    if (hasRoute("POST", "/v1/flexserv/models/load")) {
      await api("/v1/flexserv/models/load", { method: "POST", json: { model_id: modelId } });
    } else if (kind === "embedding") {
      await api("/v1/embeddings", { method: "POST", json: { model: modelId, input: "warm-up" } });
    } else if (kind === "transcription") {
      const form = new FormData();
      form.append("file", silentWav(), "silence.wav");
      form.append("model", modelId);
      await api("/v1/audio/transcriptions", { method: "POST", body: form });
    } else {
      await api("/v1/chat/completions", { method: "POST", json: { model: modelId, messages: [{ role: "user", content: "hi" }], max_tokens: 1 } });
    }
    $("models-status").textContent = `Loaded ${modelId} in ${((performance.now() - started) / 1000).toFixed(1)} s.`;
  } catch (error) {
    $("models-status").textContent = `Load failed: ${error.message}`;
  }
  await poll();
}

function renderPlugins(info) {
  const body = $("plugins-table").querySelector("tbody");
  if (!info) {
    body.replaceChildren(el("tr", {}, el("td", { colSpan: 4, className: "muted small" }, "Plugin list unavailable (/v1/flexserv/info needs the API key).")));
    return;
  }
  const chips = (items) => el("div", { className: "chips" }, ...items.map((i) => el("span", { className: "chip" }, i.replace(/^flexserv_/, ""))));
  body.replaceChildren(
    ...info.plugins.map((p) =>
      el(
        "tr",
        { dataset: { plugin: p.name, status: p.status } },
        el("td", {}, p.name, p.status !== "loaded" && p.status ? el("span", { className: "muted small" }, ` (${p.status})`) : null),
        el("td", { className: "small" }, p.builtin ? "built-in" : `${p.distribution ?? ""} ${p.version ?? ""}`),
        el("td", {}, chips(p.hooks || [])),
        el("td", {}, chips(p.routes || [])),
      ),
    ),
  );
}
