"""A fast tokenizer shared between threads does not fail ("Already borrowed") under load.

The Rust tokenizer behind a ``PreTrainedTokenizerFast`` is mutated when a call
changes its truncation or padding; concurrent calls with different settings are
what raised "RuntimeError: Already borrowed" in older stacks. The text model's
own calls (chat template, encode, decode, incremental detokenization) and calls
with alternating settings (as the classification plugin makes) run together from
eight threads while the model generates on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from flexserv_transformers.detokenize import IncrementalDetokenizer

from flexserv_core import SamplingParams

pytestmark = pytest.mark.slow  # loads the tiny model through the backend

THREADS = 8
ROUNDS = 150


def hammer(model: Any, worker: int, errors: list[str], start: threading.Barrier) -> None:
    tok = model.tokenizer
    start.wait()
    try:
        for k in range(ROUNDS):
            text = "hello world, naïve café 世界 " * (1 + (worker + k) % 12)
            ids = model.encode(text)
            model.render_chat([{"role": "user", "content": text}], {})
            assert model.decode(ids[1:]).strip()
            detok = IncrementalDetokenizer(tok, ids[:3])
            "".join(detok.add(i) for i in ids[3:]) + detok.flush()
            truncate = (worker + k) % 2 == 0
            tok([text, text[:7]], truncation=truncate, max_length=8 if truncate else None, padding="longest")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")


async def test_tokenizer_shared_by_threads_and_the_event_loop(tiny: Any) -> None:
    errors: list[str] = []
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=hammer, args=(tiny, w, errors, start)) for w in range(THREADS)]
    for t in threads:
        t.start()
    prompt = tiny.encode("hello there")
    outputs = []
    while any(t.is_alive() for t in threads):  # generation (detokenizing on the loop) meanwhile
        outputs.append([d async for d in tiny.generate(prompt, SamplingParams(max_tokens=4, temperature=0))])
        await asyncio.sleep(0)
    for t in threads:
        t.join()
    assert errors == [], errors[:3]
    assert outputs and all(out[-1].finish_reason is not None for out in outputs)
