// Small DOM helpers shared by the tabs.

export const tabListeners = new Map();

/** Register a callback run with (visible: boolean) when a tab is shown or hidden. */
export function onTabVisibility(tab, callback) {
  tabListeners.set(tab, callback);
}

export function showBanner(message, kind = "error") {
  const banner = document.getElementById("banner");
  banner.textContent = message;
  banner.className = `banner ${kind}`;
  banner.hidden = !message;
}

/** Create an element: el("td", {className: "num", title: "x"}, "text", child...). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function formatDuration(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}
