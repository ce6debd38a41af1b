"""Prompts for the load generator: the built-in set, a user's JSONL, a shared prefix."""

from __future__ import annotations

import json
import random
from importlib import resources
from pathlib import Path

#: The built-in dataset's resource name inside :mod:`flexserv_bench.data`.
BUILTIN_DATASET = "prompts.jsonl"

#: Common English words that byte-level BPE vocabularies (GPT-2, Llama, SmolLM2)
#: hold as one token each with their leading space, so a sentence of ``k`` of them
#: plus its full stop is about ``k + 1`` tokens whatever the model.
_VOCABULARY = (
    "the answer should be clear and short when a user asks for help with any task you "
    "must keep each reply polite honest useful simple correct complete kind calm "
    "always check facts before you give them never make up names dates or numbers if "
    "the question is not clear ask one question back write in plain words use lists "
    "only when they help the reader keep code in blocks explain each step give an "
    "example where it helps and stop when the answer is done do not repeat the "
    "question think about what the person needs most and say that first"
)
_WORDS = tuple(_VOCABULARY.split())


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and line."""


def load_prompts(path: str | Path | None = None) -> list[str]:
    """The prompts of a JSONL file, or of the built-in set when ``path`` is None.

    Each non-blank line is a JSON object with a non-empty string ``prompt``, or a
    bare JSON string. Anything else raises :class:`DatasetError`.
    """
    if path is None:
        text = resources.files("flexserv_bench.data").joinpath(BUILTIN_DATASET).read_text(encoding="utf-8")
        return parse_prompts(text, source=f"built-in {BUILTIN_DATASET}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc}") from exc
    return parse_prompts(text, source=str(path))


def parse_prompts(text: str, *, source: str) -> list[str]:
    prompts: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{source}, line {number}: not valid JSON ({exc.msg})") from exc
        prompt = item.get("prompt") if isinstance(item, dict) else item
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(
                f"{source}, line {number}: expected an object with a non-empty string 'prompt' (or a JSON string)"
            )
        prompts.append(prompt)
    if not prompts:
        raise DatasetError(f"{source}: no prompts")
    return prompts


def shared_prefix(tokens: int, seed: int = 0) -> str:
    """A system prompt of about ``tokens`` tokens, the same for every call with the
    same arguments (a seeded generator over :data:`_WORDS`).

    Measured with the SmolLM2 tokenizer: within a few percent of ``tokens``.
    """
    if tokens <= 0:
        return ""
    rng = random.Random(seed)
    sentences: list[str] = ["You are a helpful assistant."]
    budget = tokens - 6  # the opening sentence
    while budget > 1:
        length = min(budget - 1, rng.randint(6, 14))
        if length < 1:
            break
        words = [rng.choice(_WORDS) for _ in range(length)]
        sentences.append(" ".join(words).capitalize() + ".")
        budget -= length + 1
    return " ".join(sentences)
