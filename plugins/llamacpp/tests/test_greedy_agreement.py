"""Greedy tokens at c=1 equal llama-cpp-python's own ``Llama`` on the same GGUF.

Both run the same llama.cpp, so the prompt tokens (chat template rendering, BOS)
must be identical, and with the same attention kernels and KV cache type so must
every greedy token. llama-cpp-python's ``Llama`` defaults to ``flash_attn=False``
and an f16 KV cache, while llama.cpp's own default (and this backend's
``--llamacpp-flash-attention auto``) enables flash attention on CPUs, and this
backend's ``--llamacpp-kv-cache-type auto`` takes a q8_0 cache when it speculates: different
kernels sum in different orders, the logits differ in the second decimal, and a
near tie flips the greedy token ("a haiku about autumn leaves" does at its fifth
token). That, not batching or prefix reuse, was why the c=1 texts of
``docs/benchmarks.md`` section 15 differed. With the same choices on both sides the
tokens are equal, prefix reuse and a 32-sequence unified KV cache included. With a
q8_0 cache a row's logits are also the same whatever else its ``llama_decode``
holds, past 512 cells too (the last test; with f16 and several threads they are
not: see the plugin README, "Greedy agreement").
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flexserv_core import SamplingParams

pytestmark = pytest.mark.slow

MAX_TOKENS = 48
QUESTIONS = [
    "Explain photosynthesis in two sentences.",
    "Write a haiku about autumn leaves.",
    "What causes the seasons on Earth?",
]
_VOCABULARY = (
    "the answer should be clear and short when a user asks for help with any task you must keep each reply "
    "polite honest useful simple correct complete kind calm always check facts before you give them never make "
    "up names dates or numbers if the question is not clear ask one question back"
)


def system_prompt() -> str:
    """About 300 tokens shared by every request, as in the benchmark."""
    rng, words = random.Random(0), _VOCABULARY.split()
    sentences = ["You are a helpful assistant."]
    while sum(len(s.split()) + 1 for s in sentences) < 280:
        sentences.append(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))).capitalize() + ".")
    return " ".join(sentences)


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt()}, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def reference_llama(smollm_gguf: Path) -> Iterator[Any]:
    """A factory of llama-cpp-python ``Llama`` objects on the GGUF (one thread, as the backend's tests)."""
    import llama_cpp
    import llama_cpp.llama_cpp as lib

    defaults = lib.llama_model_default_params

    def without_extra_bufts() -> Any:  # as the backend loads (binding.py): repacking crashes some CPUs
        params = defaults()
        params.use_extra_bufts = False
        return params

    made: list[Any] = []

    def make(flash_attn: bool, kv_cache_type: int | None = None) -> Any:
        lib.llama_model_default_params = without_extra_bufts
        try:
            llm = llama_cpp.Llama(
                str(smollm_gguf),
                n_ctx=2048,
                n_threads=1,
                n_threads_batch=1,
                flash_attn=flash_attn,
                type_k=kv_cache_type,  # None: its default, f16
                type_v=kv_cache_type,
                verbose=False,
            )
        finally:
            lib.llama_model_default_params = defaults
        made.append(llm)
        return llm

    yield make
    for llm in made:
        llm.close()


def reference_tokens(llm: Any, prompt: list[int], eog: frozenset[int]) -> list[int]:
    """llama-cpp-python's greedy continuation (its sampler chain at temperature 0),
    with its own prefix reuse across calls; the end-of-generation token included."""
    out: list[int] = []
    for token in llm.generate(prompt, temp=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0, min_p=0.0):
        out.append(int(token))
        if token in eog or len(out) == MAX_TOKENS:
            break
    return out


async def backend_tokens(model: Any, prompt: list[int]) -> list[int]:
    return [d.token_id async for d in model.generate(prompt, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0))]


def test_the_chat_prompt_tokens_equal_llama_cpp_pythons(smol: Any, reference_llama: Any) -> None:
    """The GGUF's template rendered by the shared renderer (flexserv-chat-templates) and tokenized as the
    backend does equals llama-cpp-python's Jinja2 chat formatter and tokenizer
    (what its server sends to the model), BOS handling included."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm = reference_llama(False)
    formatter = Jinja2ChatFormatter(
        llm.metadata["tokenizer.chat_template"],
        eos_token=llm._model.token_get_text(llm.token_eos()),
        bos_token=llm._model.token_get_text(llm.token_bos()),
    )
    for question in QUESTIONS:
        rendered = formatter(messages=messages(question))  # type: ignore[arg-type]
        theirs = llm.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True)
        assert smol.render_chat(messages(question), {}) == theirs


@pytest.mark.parametrize(
    ("flash", "cache", "theirs"),
    [
        ("off", "f16", (False, None)),
        ("on", "f16", (True, None)),
        # this backend's defaults: flash attention (auto) and an f16 cache (auto, not speculating)
        ("auto", "auto", (True, None)),
        # the cache speculation takes
        ("auto", "q8_0", (True, "q8_0")),
    ],
)
def test_greedy_tokens_equal_llama_cpp_python_with_the_same_attention_kernels_and_cache(
    smollm_gguf: Path, load_model: Any, reference_llama: Any, flash: str, cache: str, theirs: tuple[bool, str | None]
) -> None:
    import llama_cpp

    # the serving configuration: 32 sequence slots in a unified cache, prefix reuse on
    model = load_model(
        smollm_gguf, llamacpp_flash_attention=flash, llamacpp_kv_cache_type=cache, llamacpp_kv_cache_tokens=8192
    )
    assert model.runtime.kv_cache_type == (theirs[1] or "f16")
    llm = reference_llama(theirs[0], llama_cpp.GGML_TYPE_Q8_0 if theirs[1] == "q8_0" else None)
    try:
        for question in QUESTIONS:
            prompt = model.render_chat(messages(question), {})
            expected = reference_tokens(llm, prompt, model.runtime.eog_tokens)
            got = asyncio.run(backend_tokens(model, prompt))
            assert got == expected, (question, model.decode(got), model.decode(expected))
        assert model.engine.stats()["prompt_tokens_reused"] >= 2 * 250  # the system prompt was reused
    finally:
        model.unload()


def test_with_flash_attention_a_decode_row_is_bit_identical_next_to_other_sequences_decode_rows(
    smollm_gguf: Path, load_model: Any
) -> None:
    """What batching keeps exact with an f16 cache (the README's table, one thread):
    with flash attention, a sequence's next-token logits do not change when other
    sequences' single tokens share its ``llama_decode``, however many cells they
    hold; so a sequence that joins no prompt-chunk step decodes exactly as it would
    alone."""
    import numpy as np

    model = load_model(
        smollm_gguf, llamacpp_flash_attention="on", llamacpp_kv_cache_type="f16", llamacpp_kv_cache_tokens=4096
    )
    runtime = model.runtime
    a = model.render_chat(messages(QUESTIONS[1]), {})
    b = model.render_chat(messages(QUESTIONS[0]), {})

    def fresh() -> None:
        for seq in range(8):
            runtime.seq_rm(seq, -1, -1)

    def prefill(seq: int, tokens: list[int]) -> np.ndarray:
        n = len(tokens)
        assert runtime.decode(tokens, list(range(n)), [seq] * n, [False] * (n - 1) + [True]) == 0
        return np.array(runtime.logits(1)[0])

    try:
        fresh()
        token = int(np.argmax(prefill(0, a)))
        assert runtime.decode([token], [len(a)], [0], [True]) == 0
        alone = np.array(runtime.logits(1)[0])
        for others in (1, 7):
            fresh()
            prefill(0, a)
            for seq in range(1, others + 1):
                prefill(seq, b)
            rows = [token] + [260] * others
            positions = [len(a)] + [len(b)] * others
            assert runtime.decode(rows, positions, list(range(others + 1)), [True] * (others + 1)) == 0
            assert np.array_equal(np.array(runtime.logits(others + 1)[0]), alone), others
    finally:
        model.unload()


@pytest.mark.parametrize(
    ("cache", "cells"),
    [("q8_0", 200), ("q8_0", 700), ("f16", 700)],
)
def test_with_a_q8_0_cache_a_row_is_bit_identical_in_any_batch(
    smollm_gguf: Path, load_model: Any, cache: str, cells: int
) -> None:
    """What speculation needs (the plugin README, "Speculative decoding"), on two
    threads: with a q8_0 cache, rows of one sequence after ``cells`` cached tokens
    have the same logits decoded one at a time, together (a draft's verification),
    after another sequence's prompt chunk in the same batch, and next to seven
    other sequences' rows, below and past 512 cells. With an f16 cache a lone row
    over 512 or more cells takes llama.cpp's split-KV attention path, which several
    rows do not: there the rows decoded together differ from the same rows alone."""
    import numpy as np

    model = load_model(smollm_gguf, llamacpp_threads=2, llamacpp_kv_cache_type=cache, llamacpp_kv_cache_tokens=4096)
    runtime = model.runtime
    ids = runtime.tokenize(" ".join([system_prompt()] * 4), add_special=False)
    assert len(ids) > cells + 8
    prefix, rows = ids[:cells], ids[cells : cells + 8]
    other = ids[::-1][:300]  # another sequence's prompt

    def back_to_the_prefix() -> None:  # the prefix's cells stay, and the rows come after them
        runtime.seq_rm(0, cells, -1)
        for seq in range(1, 8):
            runtime.seq_rm(seq, -1, -1)

    def decode(tokens: list[int], positions: list[int], seqs: list[int], outputs: list[bool]) -> np.ndarray:
        assert runtime.decode(tokens, positions, seqs, outputs) == 0
        return np.array(runtime.logits(sum(outputs)))

    k, end, m = len(rows), cells + len(rows), len(other)
    try:
        for start in range(0, cells, runtime.n_batch):
            chunk = prefix[start : start + runtime.n_batch]
            decode(chunk, list(range(start, start + len(chunk))), [0] * len(chunk), [False] * len(chunk))
        alone = np.concatenate([decode([t], [cells + i], [0], [True]) for i, t in enumerate(rows)])

        back_to_the_prefix()
        together = decode(rows, list(range(cells, end)), [0] * k, [True] * k)
        if cache == "f16":
            assert not np.array_equal(together, alone)
            return
        assert np.array_equal(together, alone)

        back_to_the_prefix()
        beside_a_prompt = decode(
            other + rows, [*range(m), *range(cells, end)], [1] * m + [0] * k, [False] * m + [True] * k
        )
        assert np.array_equal(beside_a_prompt, alone)

        back_to_the_prefix()
        decode(other, list(range(m)), [1] * m, [False] * m)
        for seq in range(2, 8):
            runtime.seq_cp(1, seq, 0, m)
        next_to_others = decode([rows[0]] + [260] * 7, [cells] + [m] * 7, list(range(8)), [True] * 8)
        assert np.array_equal(next_to_others[0], alone[0])
    finally:
        model.unload()
