"""Regenerate the playground screenshots in docs/playground/ from a running server.

    flexserv run --port 8000 &
    python plugins/playground/tools/screenshots.py http://127.0.0.1:8000 docs/playground

Uses the system Chromium through Playwright (like the browser tests). Each tab is
captured after real work (a streamed chat, a heat map, a transcript), in light
and dark, plus the chat on a phone-sized screen.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[3]
SPEECH = ROOT / "tests" / "data" / "speech.wav"
LONG = 240_000
BACKGROUND_CHATS = """async () => {
  const body = {model: document.getElementById('chat-model').value, max_tokens: 24, stream: true,
                messages: [{role: 'user', content: 'Tell me about lighthouses.'}]};
  for (let i = 0; i < 2; i++) {
    fetch('/v1/chat/completions', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                   body: JSON.stringify(body)}).then(r => r.text());
    await new Promise(r => setTimeout(r, 8000));
  }
}"""


def prepare(page: Any, base: str) -> None:
    page.goto(f"{base}/playground#chat")
    page.wait_for_selector("#chat-model option", state="attached")
    page.fill("#chat-system", "You are a concise assistant.")
    page.fill("#chat-temperature", "0.3")
    page.fill("#chat-max-tokens", "60")
    page.fill("#chat-seed", "7")
    page.fill("#chat-input", "What is the capital of France? Answer in one sentence.")
    page.click("#chat-send")
    page.wait_for_selector('.msg.assistant[data-state="done"]', timeout=LONG)
    page.fill("#chat-input", "Give me two facts about it.")
    page.click("#chat-send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.msg.assistant')].filter(m => m.dataset.state === 'done').length === 2",
        timeout=LONG,
    )
    page.click("#tab-embeddings")
    page.click("#emb-run")
    page.wait_for_selector("table.heatmap td", timeout=LONG)
    page.click("#tab-transcription")
    page.set_input_files("#tr-file", str(SPEECH))
    page.click("#tr-run")
    page.wait_for_function("() => document.getElementById('tr-status').textContent.startsWith('Done')", timeout=LONG)


def capture(page: Any, out: Path, theme: str) -> None:
    page.evaluate(f"localStorage.setItem('flexserv.theme', '{theme}')")
    page.evaluate(
        f"document.documentElement.dataset.theme = '{theme}'; document.dispatchEvent(new Event('themechange'))"
    )
    for tab in ("chat", "embeddings", "transcription", "server"):
        page.click(f"#tab-{tab}")
        if tab == "server":
            # Some load while the charts fill: two streamed chats, one after the other.
            page.evaluate(BACKGROUND_CHATS)
            page.wait_for_timeout(40_000)
        else:
            page.wait_for_timeout(300)
        page.screenshot(path=str(out / f"{tab}-{theme}.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("out", type=Path, help="where the PNGs go")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 760})
        prepare(page, args.url)
        for theme in ("light", "dark"):
            capture(page, args.out, theme)
        phone = browser.new_page(viewport={"width": 390, "height": 800}, device_scale_factor=1)
        phone.goto(f"{args.url}/playground#chat")
        phone.evaluate("localStorage.setItem('flexserv.theme', 'dark')")
        phone.reload()
        phone.wait_for_selector("#chat-model option", state="attached")
        phone.screenshot(path=str(args.out / "phone-dark.png"))
        browser.close()


if __name__ == "__main__":
    main()
