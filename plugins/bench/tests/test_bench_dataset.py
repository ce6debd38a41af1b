"""Prompts for ``flexserv bench``: the built-in set, custom JSONL, the shared prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from flexserv_bench.client import RequestSpec, request_body
from flexserv_bench.dataset import DatasetError, load_prompts, shared_prefix


def test_builtin_dataset_has_fifty_distinct_short_prompts() -> None:
    prompts = load_prompts()
    assert len(prompts) == 50
    assert len(set(prompts)) == 50
    assert all(0 < len(p) < 200 for p in prompts)


def test_custom_jsonl_objects_strings_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one"}\n\n"two"\n{"prompt": "three", "extra": 1}\n', encoding="utf-8")
    assert load_prompts(path) == ["one", "two", "three"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": \n', "line 2: not valid JSON"),
        ('{"text": "no prompt key"}\n', "line 1: expected an object"),
        ('{"prompt": ""}\n', "line 1: expected an object"),
        ("[1, 2]\n", "line 1: expected an object"),
        ("\n\n", "no prompts"),
    ],
)
def test_bad_jsonl_says_where(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=message) as info:
        load_prompts(path)
    assert str(path) in str(info.value)


def test_missing_dataset_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read dataset"):
        load_prompts(tmp_path / "absent.jsonl")


def test_shared_prefix_is_deterministic_and_sized() -> None:
    assert shared_prefix(0) == ""
    text = shared_prefix(300)
    assert text == shared_prefix(300)
    assert text != shared_prefix(300, seed=1)
    assert text.startswith("You are a helpful assistant.")
    # One token per word plus one per full stop, by construction (about 300 with SmolLM2's tokenizer).
    estimate = len(text.split()) + text.count(".")
    assert 290 <= estimate <= 305
    assert len(shared_prefix(1000).split()) > 3 * len(text.split())


def test_request_bodies_carry_the_prefix() -> None:
    chat = request_body(RequestSpec(model="m", system_prompt="SYS", max_tokens=7), "hello")
    assert chat["messages"] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hello"}]
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["max_tokens"] == 7 and chat["temperature"] == 0.0
    completion = request_body(RequestSpec(model="m", endpoint="completions", system_prompt="SYS"), "hello")
    assert completion["prompt"] == "SYS\n\nhello" and "messages" not in completion
    bare = request_body(RequestSpec(model="m"), "hello")
    assert bare["messages"] == [{"role": "user", "content": "hello"}]
