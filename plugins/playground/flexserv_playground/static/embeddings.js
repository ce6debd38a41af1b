// Embeddings: several sentences -> their cosine-similarity matrix as a heat map.

import { getJson } from "./api.js";
import { el } from "./ui.js";

const $ = (id) => document.getElementById(id);

export function initEmbeddings() {
  $("emb-run").addEventListener("click", run);
  $("emb-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      run();
    }
  });
}

export function cosineMatrix(vectors) {
  const norms = vectors.map((v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0)) || 1);
  return vectors.map((a, i) =>
    vectors.map((b, j) => a.reduce((sum, x, k) => sum + x * b[k], 0) / (norms[i] * norms[j])),
  );
}

async function run() {
  const sentences = $("emb-input")
    .value.split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  if (sentences.length < 2) {
    $("emb-status").textContent = "Type at least two sentences, one per line.";
    return;
  }
  $("emb-run").disabled = true;
  $("emb-status").textContent = "Embedding…";
  const started = performance.now();
  try {
    const body = await getJson("/v1/embeddings", { method: "POST", json: { model: $("emb-model").value, input: sentences } });
    const vectors = body.data.sort((a, b) => a.index - b.index).map((d) => d.embedding);
    const ms = Math.round(performance.now() - started);
    $("emb-status").textContent = `${vectors.length} vectors of ${vectors[0].length} dimensions in ${ms} ms · ${body.usage?.prompt_tokens ?? "?"} tokens`;
    render(sentences, cosineMatrix(vectors));
  } catch (error) {
    $("emb-status").textContent = `Error: ${error.message}`;
  } finally {
    $("emb-run").disabled = false;
  }
}

function cellColour(similarity) {
  const t = Math.max(0, Math.min(1, similarity));
  // Dark theme: dim cells for unrelated pairs, bright for similar ones (light theme: the reverse).
  if (getComputedStyle(document.documentElement).colorScheme === "dark") {
    return { background: `hsl(228 60% ${16 + 48 * t}%)`, color: "#e3e7eb" };
  }
  return { background: `hsl(${220 + 10 * t} 70% ${96 - 58 * t}%)`, color: t > 0.55 ? "#fff" : "#1c2024" };
}

function render(sentences, matrix) {
  const short = (s) => (s.length > 28 ? `${s.slice(0, 27)}…` : s);
  const head = el("tr", {}, el("th"), ...sentences.map((s, j) => el("th", { scope: "col", title: s }, `${j + 1}`)));
  const rows = matrix.map((row, i) =>
    el(
      "tr",
      {},
      el("th", { scope: "row", title: sentences[i] }, `${i + 1}. ${short(sentences[i])}`),
      ...row.map((value, j) => {
        const cell = el("td", { title: `${sentences[i]}\n${sentences[j]}\ncosine ${value.toFixed(3)}` }, value.toFixed(2));
        cell.dataset.value = value.toFixed(4);
        Object.assign(cell.style, cellColour(value));
        return cell;
      }),
    ),
  );
  const table = el("table", { className: "heatmap" }, el("caption", { className: "muted small" }, "Cosine similarity"), el("thead", {}, head), el("tbody", {}, ...rows));
  const legend = el("div", { className: "legend small muted" }, "0", el("span", { className: "bar" }), "1");
  $("emb-heatmap").replaceChildren(table, legend);
}
