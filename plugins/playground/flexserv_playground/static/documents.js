// Documents: upload an image or PDF to /v1/files, read it with /v1/ocr (the lines
// drawn over the page), then /v1/documents/extract with a JSON schema.

import { api } from "./api.js";
import { el } from "./ui.js";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let fileId = null;

export function initDocuments() {
  $("doc-run").addEventListener("click", run);
  $("doc-extract").addEventListener("click", extract);
}

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

/** One page: the image itself (an image upload), or a blank sheet with each line's text
 * written in its box (a PDF, which the browser does not render here); the boxes on top. */
function pageView(page, imageUrl) {
  const figure = el("figure", { className: "doc-page" });
  const drawing = svg("svg", { viewBox: `0 0 ${page.width} ${page.height}`, role: "img" });
  drawing.setAttribute("aria-label", `Page ${page.page}: ${page.lines.length} lines (${page.source})`);
  if (imageUrl) drawing.append(svg("image", { href: imageUrl, width: page.width, height: page.height }));
  else drawing.append(svg("rect", { width: page.width, height: page.height, class: "sheet" }));
  page.lines.forEach((line, i) => {
    const { x1, y1, x2, y2 } = line.box;
    const box = svg("rect", { x: x1, y: y1, width: x2 - x1, height: y2 - y1, class: "line-box", "data-line": i });
    box.append(svg("title", {}, `${line.text} (${(line.confidence * 100).toFixed(1)} %)`));
    drawing.append(box);
    if (!imageUrl) {
      const size = Math.max(6, (y2 - y1) * 0.8);
      drawing.append(svg("text", { x: x1, y: y2 - (y2 - y1) * 0.2, "font-size": size, class: "line-text" }, line.text));
    }
  });
  figure.append(drawing, el("figcaption", { className: "muted small" }, `Page ${page.page} · ${page.source === "ocr" ? "OCR" : "text layer"} · ${page.width}×${page.height}`));
  return figure;
}

async function run() {
  const file = $("doc-file").files[0];
  if (!file) {
    $("doc-status").textContent = "Choose an image or a PDF first.";
    return;
  }
  $("doc-run").disabled = true;
  $("doc-extract").disabled = true;
  $("doc-pages-view").replaceChildren();
  $("doc-lines").replaceChildren();
  $("doc-status").textContent = "Uploading…";
  try {
    const form = new FormData();
    form.append("purpose", "user_data");
    form.append("file", file, file.name);
    const uploaded = await (await api("/v1/files", { method: "POST", body: form })).json();
    fileId = uploaded.id;
    $("doc-status").textContent = `Uploaded ${uploaded.id} (${uploaded.bytes} bytes). Reading…`;
    const body = { file_id: fileId, model: $("doc-ocr-model").value || undefined, force_ocr: $("doc-force-ocr").checked };
    const isPdf = file.type === "application/pdf" || file.name.toLowerCase().endsWith(".pdf");
    const pages = $("doc-pages").value.trim();
    if (isPdf && pages) body.pages = pages;
    const started = performance.now();
    const result = await (await api("/v1/ocr", { method: "POST", json: body })).json();
    const doc = result.data[0];
    const imageUrl = isPdf ? null : URL.createObjectURL(file);
    for (const page of doc.pages) {
      $("doc-pages-view").append(pageView(page, imageUrl));
      for (const line of page.lines) {
        $("doc-lines").append(el("li", {}, line.text, el("span", { className: "muted" }, ` ${(line.confidence * 100).toFixed(1)} %`)));
      }
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    const lines = doc.pages.reduce((n, page) => n + page.lines.length, 0);
    $("doc-status").textContent = `Read ${doc.pages.length} page(s), ${lines} lines in ${seconds} s with ${result.model}.`;
    $("doc-extract").disabled = false;
  } catch (error) {
    $("doc-status").textContent = `Error: ${error.message}`;
  } finally {
    $("doc-run").disabled = false;
  }
}

async function extract() {
  let schema;
  try {
    schema = JSON.parse($("doc-schema").value);
  } catch (error) {
    $("doc-extract-status").textContent = `The schema is not JSON: ${error.message}`;
    return;
  }
  $("doc-extract").disabled = true;
  $("doc-json").hidden = true;
  $("doc-sources").hidden = true;
  $("doc-extract-status").textContent = "Extracting…";
  const started = performance.now();
  try {
    const body = { file_id: fileId, schema, model: $("doc-chat-model").value || undefined };
    const pages = $("doc-pages").value.trim();
    if (pages && $("doc-pages-view").querySelector("svg rect.sheet")) body.pages = pages;
    const result = await (await api("/v1/documents/extract", { method: "POST", json: body })).json();
    $("doc-json").textContent = JSON.stringify(result.data, null, 2);
    $("doc-json").hidden = false;
    const rows = result.sources.map((s) => el("tr", {}, el("td", {}, s.path), el("td", {}, String(s.value)), el("td", {}, s.page ?? "not found")));
    $("doc-sources").tBodies[0].replaceChildren(...rows);
    $("doc-sources").hidden = false;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    $("doc-extract-status").textContent = `Done in ${seconds} s with ${result.model}.`;
  } catch (error) {
    $("doc-extract-status").textContent = `Error: ${error.message}`;
  } finally {
    $("doc-extract").disabled = false;
  }
}
