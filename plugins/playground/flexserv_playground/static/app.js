// The page shell: tabs (with the URL hash), theme, the key button, and the
// model pickers every tab shares. Each tab lives in its own module.

import { askForKey } from "./api.js";
import { initAnomaly } from "./anomaly.js";
import { initChat } from "./chat.js";
import { initDocuments } from "./documents.js";
import { initEmbeddings } from "./embeddings.js";
import { refreshCatalog, serverInfo } from "./catalog.js";
import { initServer } from "./server.js";
import { initTranscription } from "./transcription.js";
import { showBanner, tabListeners } from "./ui.js";

const TABS = ["chat", "embeddings", "transcription", "documents", "server", "anomaly"];
const THEMES = ["auto", "light", "dark"];
const THEME_STORAGE = "flexserv.theme";

function selectTab(name, { focus = false } = {}) {
  if (!TABS.includes(name)) name = "chat";
  for (const tab of TABS) {
    const button = document.getElementById(`tab-${tab}`);
    const panel = document.getElementById(`panel-${tab}`);
    const selected = tab === name;
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    panel.hidden = !selected;
    if (focus && selected) button.focus();
    tabListeners.get(tab)?.(selected);
  }
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
}

function initTabs() {
  const tablist = document.querySelector(".tabs");
  tablist.addEventListener("click", (event) => {
    const button = event.target.closest("[data-tab]");
    if (button) selectTab(button.dataset.tab);
  });
  // Arrow keys move between tabs (the WAI-ARIA tabs pattern).
  tablist.addEventListener("keydown", (event) => {
    const current = TABS.indexOf(document.activeElement?.dataset?.tab);
    if (current < 0) return;
    const moves = { ArrowRight: 1, ArrowLeft: -1, Home: -current, End: TABS.length - 1 - current };
    if (!(event.key in moves)) return;
    event.preventDefault();
    selectTab(TABS[(current + moves[event.key] + TABS.length) % TABS.length], { focus: true });
  });
  // Alt+1.., one digit per tab, from anywhere.
  document.addEventListener("keydown", (event) => {
    const tab = TABS[Number(event.key) - 1];
    if (event.altKey && !event.ctrlKey && !event.metaKey && /^[1-9]$/.test(event.key) && tab) {
      event.preventDefault();
      selectTab(tab, { focus: true });
    }
  });
  window.addEventListener("hashchange", () => selectTab(location.hash.slice(1)));
}

function applyTheme(theme) {
  if (theme === "auto") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.dataset.theme = theme;
  const button = document.getElementById("theme-button");
  button.title = `Theme: ${theme}`;
  button.textContent = { auto: "◐", light: "☀", dark: "☾" }[theme];
  document.dispatchEvent(new CustomEvent("themechange"));
}

function initTheme() {
  let theme = localStorage.getItem(THEME_STORAGE) || "auto";
  if (!THEMES.includes(theme)) theme = "auto";
  applyTheme(theme);
  document.getElementById("theme-button").addEventListener("click", () => {
    theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    localStorage.setItem(THEME_STORAGE, theme);
    applyTheme(theme);
  });
}

async function init() {
  initTheme();
  initTabs();
  document.getElementById("key-button").addEventListener("click", async () => {
    await askForKey();
    await start();
  });
  initChat();
  initEmbeddings();
  initTranscription();
  initDocuments();
  initServer();
  initAnomaly();
  selectTab(location.hash.slice(1) || "chat");
  await start();
}

async function start() {
  try {
    await refreshCatalog();
    showBanner("");
  } catch (error) {
    showBanner(`Cannot list models: ${error.message}`);
  }
  const info = await serverInfo();
  document.getElementById("server-version").textContent = info ? `v${info.version}` : "";
  document.dispatchEvent(new CustomEvent("serverinfo", { detail: info }));
}

init();
