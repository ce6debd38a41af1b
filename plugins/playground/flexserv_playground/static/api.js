// HTTP helpers: the API key (asked for on 401, kept in sessionStorage only),
// OpenAI-shaped error messages, and an SSE reader for streamed completions.

const KEY_STORAGE = "flexserv.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

/** Ask for the key in the page's dialog; resolves to the key, or "" if cancelled. */
export function askForKey() {
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  if (dialog.open) return new Promise((resolve) => dialog.addEventListener("close", () => resolve(apiKey()), { once: true }));
  input.value = apiKey();
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        if (dialog.returnValue === "ok" && input.value.trim()) setApiKey(input.value.trim());
        resolve(dialog.returnValue === "ok" ? apiKey() : "");
      },
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });
}

export class ApiError extends Error {
  constructor(status, body) {
    const err = body && body.error ? body.error : null;
    super(err && err.message ? err.message : `HTTP ${status}`);
    this.status = status;
    this.param = err ? err.param : null;
    this.code = err ? err.code : null;
  }
}

/**
 * fetch() with the key; on 401 asks for a key once and retries.
 * Returns the Response when it is ok; throws ApiError otherwise.
 * `allow` lists statuses handed back instead of thrown (e.g. [404] for optional routes).
 */
export async function api(path, { method = "GET", json, body, signal, allow = [], headers = {} } = {}) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const h = { ...headers };
    const key = apiKey();
    if (key) h.Authorization = `Bearer ${key}`;
    let payload = body;
    if (json !== undefined) {
      h["Content-Type"] = "application/json";
      payload = JSON.stringify(json);
    }
    const response = await fetch(path, { method, headers: h, body: payload, signal });
    if (response.ok || allow.includes(response.status)) return response;
    if (response.status === 401 && attempt === 0) {
      const entered = await askForKey();
      if (entered) continue;
    }
    let parsed = null;
    try {
      parsed = await response.json();
    } catch {
      /* not JSON: the status says enough */
    }
    throw new ApiError(response.status, parsed);
  }
  throw new ApiError(401, null);
}

export async function getJson(path, options) {
  const response = await api(path, options);
  return response.json();
}

/** Yields the parsed JSON of each `data:` event of a text/event-stream response until [DONE]. */
export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let boundary;
      while ((boundary = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, boundary);
        buffer = buffer.slice(boundary).replace(/^\r?\n\r?\n/, "");
        const data = block
          .split(/\r?\n/)
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, ""))
          .join("\n");
        if (!data) continue;
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  } finally {
    reader.releaseLock();
  }
}
