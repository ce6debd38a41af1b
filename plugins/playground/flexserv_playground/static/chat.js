// Chat: streamed completions token by token, TTFT and tok/s, Stop (aborting the
// fetch closes the connection, which cancels the request on the server), history.

import { api, sseEvents } from "./api.js";
import { features, models, pluginNames, refreshCatalog } from "./catalog.js";
import { el } from "./ui.js";

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city"],
    },
  },
};

const EXAMPLE_SCHEMA = {
  name: "city",
  schema: {
    type: "object",
    properties: { name: { type: "string" }, country: { type: "string" }, population: { type: "integer" } },
    required: ["name", "country"],
  },
};

const $ = (id) => document.getElementById(id);

/** The conversation sent with each request (the system prompt is added at send time). */
let history = [];
let controller = null;

export function initChat() {
  $("chat-schema").value = JSON.stringify(EXAMPLE_SCHEMA, null, 2);
  $("chat-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && controller && !$("key-dialog").open) stop();
  });
  $("chat-stop-button").addEventListener("click", stop);
  $("chat-clear").addEventListener("click", clear);
  $("chat-format").addEventListener("change", () => {
    $("chat-schema").hidden = $("chat-format").value !== "json_schema";
  });
  document.addEventListener("serverinfo", showFeatureControls);
}

function showFeatureControls() {
  const advertised = features();
  $("chat-format-box").hidden = !(advertised.has("response_format") || advertised.has("json_schema"));
  $("chat-format").querySelector('[value="json_schema"]').hidden = !advertised.has("json_schema");
  $("chat-tools-box").hidden = !advertised.has("tools");
  // Without /info (no key yet) the toggle stays: an unknown field is ignored by default.
  const plugins = pluginNames();
  $("thinking-row").hidden = plugins.size > 0 && !plugins.has("template-kwargs");
}

function clear() {
  if (controller) stop();
  history = [];
  $("chat-log").replaceChildren(el("p", { className: "empty muted" }, "New conversation."));
  $("chat-stats").textContent = "";
  $("chat-input").focus();
}

function stop() {
  controller?.abort();
}

function numberOrNull(id) {
  const value = $(id).value.trim();
  return value === "" ? null : Number(value);
}

/** The request body from the settings panel; fields left empty use the server's defaults. */
function buildRequest() {
  const body = { model: $("chat-model").value, stream: true, stream_options: { include_usage: true } };
  const system = $("chat-system").value.trim();
  body.messages = [...(system ? [{ role: "system", content: system }] : []), ...history];
  const params = { temperature: "chat-temperature", top_p: "chat-top-p", max_tokens: "chat-max-tokens", seed: "chat-seed" };
  for (const [field, id] of Object.entries(params)) {
    const value = numberOrNull(id);
    if (value !== null && Number.isFinite(value)) body[field] = value;
  }
  const stops = $("chat-stop")
    .value.split(",")
    .map((s) => s.trim().replace(/\\n/g, "\n").replace(/\\t/g, "\t"))
    .filter(Boolean);
  if (stops.length) body.stop = stops;
  if (!$("thinking-row").hidden) body.chat_template_kwargs = { enable_thinking: $("chat-thinking").checked };
  if (!$("chat-format-box").hidden && $("chat-format").value) {
    const type = $("chat-format").value;
    body.response_format = type === "json_schema" ? { type, json_schema: JSON.parse($("chat-schema").value) } : { type };
  }
  if (!$("chat-tools-box").hidden && $("chat-tools").checked) body.tools = [WEATHER_TOOL];
  return body;
}

function bubble(role, text = "") {
  const log = $("chat-log");
  log.querySelector(".empty")?.remove();
  const content = el("span", { className: "content" }, text);
  const node = el("div", { className: `msg ${role}` }, el("span", { className: "role" }, role), content);
  log.append(node);
  log.scrollTop = log.scrollHeight;
  return { node, content };
}

function setBusy(busy) {
  $("chat-send").hidden = busy;
  $("chat-stop-button").hidden = !busy;
  $("chat-model").disabled = busy;
}

async function send() {
  const text = $("chat-input").value.trim();
  if (!text || controller) return;
  let body;
  history.push({ role: "user", content: text });
  try {
    body = buildRequest();
  } catch (error) {
    history.pop();
    bubble("error", `Invalid JSON schema: ${error.message}`);
    return;
  }
  $("chat-input").value = "";
  bubble("user", text);
  const answer = bubble("assistant");
  answer.node.classList.add("streaming");
  answer.node.dataset.state = "streaming";
  controller = new AbortController();
  setBusy(true);
  const state = models.find((m) => m.id === body.model)?.state;
  $("chat-stats").textContent = state === "ready" ? "Waiting for the first token…" : "Loading the model (first use), then generating…";

  const stats = new StreamStats();
  let reply = "";
  let reasoning = null;
  const toolCalls = [];
  try {
    const response = await api("/v1/chat/completions", { method: "POST", json: body, signal: controller.signal });
    for await (const chunk of sseEvents(response)) {
      if (chunk.error) throw new Error(chunk.error.message || "stream error");
      if (chunk.usage) stats.usage = chunk.usage;
      const choice = chunk.choices?.[0];
      const delta = choice?.delta;
      if (!delta) continue;
      if (delta.reasoning_content) {
        reasoning ??= answer.node.insertBefore(el("span", { className: "meta reasoning" }), answer.content);
        reasoning.textContent += delta.reasoning_content;
      }
      if (delta.content) {
        reply += delta.content;
        answer.content.textContent = reply;
        stats.token();
      }
      for (const call of delta.tool_calls || []) mergeToolCall(toolCalls, call, answer.node);
      if (choice.finish_reason) stats.finish = choice.finish_reason;
      $("chat-stats").textContent = stats.describe();
      $("chat-log").scrollTop = $("chat-log").scrollHeight;
    }
    answer.node.dataset.state = "done";
  } catch (error) {
    if (error.name === "AbortError") {
      answer.node.dataset.state = "stopped";
      stats.finish = "stopped";
    } else {
      answer.node.dataset.state = "error";
      answer.node.append(el("span", { className: "meta error-text" }, error.message));
      answer.node.classList.add("error");
    }
  } finally {
    controller = null;
    setBusy(false);
    answer.node.classList.remove("streaming");
    const summary = stats.describe();
    $("chat-stats").textContent = summary;
    if (summary) answer.node.append(el("span", { className: "meta" }, summary));
    if (reply || toolCalls.length) {
      const message = { role: "assistant", content: reply };
      if (toolCalls.length) message.tool_calls = toolCalls;
      history.push(message);
    } else if (answer.node.dataset.state === "error") {
      history.pop(); // the user's message was not answered: let them retry it
    }
    $("chat-input").focus();
    refreshCatalog().catch(() => {}); // model states changed (a first use loads the model)
  }
}

function mergeToolCall(calls, delta, node) {
  const index = delta.index ?? calls.length;
  calls[index] ??= { id: delta.id, type: "function", function: { name: "", arguments: "" } };
  const call = calls[index];
  if (delta.id) call.id = delta.id;
  if (delta.function?.name) call.function.name += delta.function.name;
  if (delta.function?.arguments) call.function.arguments += delta.function.arguments;
  let box = node.querySelector(`.tool-call[data-index="${index}"]`);
  if (!box) {
    box = el("div", { className: "tool-call", dataset: { index: String(index) } });
    node.append(box);
  }
  box.textContent = `→ ${call.function.name}(${call.function.arguments})`;
}

/** Time to first token and decode speed, measured in the browser (network included). */
class StreamStats {
  constructor() {
    this.start = performance.now();
    this.first = null;
    this.last = null;
    this.chunks = 0;
    this.usage = null;
    this.finish = null;
  }

  token() {
    const now = performance.now();
    this.first ??= now;
    this.last = now;
    this.chunks += 1;
  }

  describe() {
    if (this.first === null) return this.finish ? `finish: ${this.finish}` : "";
    const tokens = this.usage?.completion_tokens ?? this.chunks;
    const decodeSeconds = (this.last - this.first) / 1000;
    const parts = [`TTFT ${Math.round(this.first - this.start)} ms`];
    if (tokens > 1 && decodeSeconds > 0) parts.push(`${((tokens - 1) / decodeSeconds).toFixed(1)} tok/s`);
    parts.push(`${tokens} tokens`);
    if (this.finish) parts.push(`finish: ${this.finish}`);
    return parts.join(" · ");
  }
}
