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
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
