// What the server offers: its models (for every tab's model picker) and, when
// the key allows, /v1/flexserv/info (plugins, settings, routes, features).

import { api, getJson } from "./api.js";

/** Kinds the chat tab serves: "text" (and the aliases older servers report). */
export const TEXT_KINDS = ["text", "serve", "chat"];

export let models = [];
let info = null;

export async function refreshCatalog() {
  const body = await getJson("/v1/models");
  models = body.data || [];
  for (const select of document.querySelectorAll("select[data-kinds]")) {
    const kinds = select.dataset.kinds.split(" ");
    const previous = select.value;
    const options = models.filter((m) => kinds.includes(m.kind));
    select.replaceChildren(...options.map((m) => new Option(m.id, m.id)));
    if (!options.length) select.append(new Option("(no model of this kind)", ""));
    if (options.some((m) => m.id === previous)) select.value = previous;
    else if (info?.defaults) {
      const preferred = kinds.map((k) => info.defaults[k]).find((id) => options.some((m) => m.id === id));
      if (preferred) select.value = preferred;
    }
  }
  return models;
}

/** /v1/flexserv/info, or null when the server does not serve it to us. */
export async function serverInfo() {
  try {
    const response = await api("/v1/flexserv/info", { allow: [404] });
    info = response.ok ? await response.json() : null;
  } catch {
    info = null;
  }
  if (info) await refreshCatalog().catch(() => {});
  return info;
}

export function currentInfo() {
  return info;
}

export function pluginNames() {
  return new Set((info?.plugins || []).filter((p) => p.status !== "blocked").map((p) => p.name));
}

/** Every "METHOD /path" route the server's plugins declare. */
export function routes() {
  return new Set((info?.plugins || []).flatMap((p) => p.routes || []));
}

export function hasRoute(method, path) {
  for (const route of routes()) {
    const [methods, routePath] = route.split(" ");
    if (routePath === path && methods.split("|").includes(method)) return true;
  }
  return false;
}

/**
 * Optional API features the server advertises. A server (or plugin) lists them in
 * /v1/flexserv/info as `features`: e.g. "response_format", "json_schema", "tools",
 * "transcription_stream". The page shows a feature's controls only when listed.
 */
export function features() {
  const listed = info?.features;
  if (Array.isArray(listed)) return new Set(listed);
  if (listed && typeof listed === "object") return new Set(Object.keys(listed).filter((k) => listed[k]));
  return new Set();
}
