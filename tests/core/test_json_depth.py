"""The request body's depth check counts brackets in the JSON text, outside strings."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from flexserv_core import InvalidRequest, decode_json_object
from flexserv_core.api import body as body_module
from flexserv_core.api.body import json_nesting_exceeds

# Strings that look like structure: brackets, quotes and backslashes in every escaped form.
TRICKY = ["[[[[", "{{{{", '"]]]"', "\\", '\\"[', "\\\\", '\\\\"{', "ü[€]", "\u2028{", "]]]]", "}"]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _random_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 9 or roll < 0.3:
        return rng.choice([rng.choice(TRICKY) * rng.randint(1, 3), 1.5, None, True, -7])
    if roll < 0.65:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(TRICKY) + str(i): _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


@pytest.mark.parametrize("chunk", [3, 7, 1 << 20])
def test_the_text_count_agrees_with_the_decoded_depth(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(body_module, "_DEPTH_CHUNK", chunk)
    rng = random.Random(26)
    for _ in range(300):
        value = {"data": _random_value(rng, 1)}
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        depth = _depth(value)
        for limit in (depth - 1, depth, depth + 1):
            assert json_nesting_exceeds(text, limit) == (depth > limit), (text, limit)


def test_brackets_in_strings_do_not_count() -> None:
    text = json.dumps({"a": "[" * 100 + '\\"' + "{" * 100, "b": ["\\", ["\\\\"]]}).encode()
    assert not json_nesting_exceeds(text, 3)
    assert json_nesting_exceeds(text, 2)


def test_rows_of_numbers_are_two_levels_below_the_object() -> None:
    text = json.dumps({"data": [[float(i)] * 16 for i in range(1000)]}).encode()
    assert not json_nesting_exceeds(text, 3) and json_nesting_exceeds(text, 2)


def test_json_from_elsewhere_is_refused_as_a_body_is_naming_where_it_came_from() -> None:
    """``decode_json_object`` (public: a plugin's header of JSON) gives a body's 400s, with
    its own name in the message and ``param``; too deep for the interpreter is a 400 too."""
    header = {"what": "The X-Args header", "param": "X-Args"}
    assert decode_json_object('{"a": [[1]]}', 3, **header) == {"a": [[1]]}
    cases = {
        "": "invalid_json",
        "{a: 1}": "invalid_json",
        "[1]": "invalid_json",
        '{"a": [[[1]]]}': "json_too_deep",
        "[" * 100_000 + "]" * 100_000: "json_too_deep",
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}": "json_too_deep",
    }
    for text, code in cases.items():
        for raw in (text, text.encode()):
            with pytest.raises(InvalidRequest) as caught:
                decode_json_object(raw, 3, **header)
            assert (caught.value.code, caught.value.param) == (code, "X-Args"), text[:20]
            assert caught.value.message.startswith("The X-Args header ")
    with pytest.raises(InvalidRequest) as caught:
        decode_json_object(b'{"a": [[[1]]]}', 3)
    assert caught.value.param is None and caught.value.message.startswith("The request body nests")
