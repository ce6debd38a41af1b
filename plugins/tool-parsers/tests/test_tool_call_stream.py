"""Incremental tool-call parsing: recorded outputs of each model family fed in
pieces (one character at a time, token-like pieces, fixed sizes, whole) give the
name of each call as soon as it is written, argument fragments before the call
ends, and, joined, exactly the non-streaming calls and content."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from flexserv_tool_parsers import ToolCallFragment
from recorded_tool_outputs import HERMES, LLAMA, LLAMA_TAGGED, MISTRAL, QWEN
from registered import get_tool_parser

# Outputs only the streaming tests use ------------------------------------------
# What llguidance lets SmolLM2 write under tool_choice="required" (the Hermes
# constraint: prefix, JSON without spaces, suffix).
CONSTRAINED = (
    '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius","days":[1,2]}}\n</tool_call>'
)
MISTRAL_TWO = '[TOOL_CALLS][{"name": "a", "arguments": {"x": "}{\\"]"}}, {"name": "b", "arguments": {}}]'

RECORDED = [
    ("hermes", QWEN),
    ("hermes", HERMES),
    ("hermes", CONSTRAINED),
    ("hermes", "Checking.\n" + CONSTRAINED + "\nDone."),
    ("llama3_json", LLAMA),
    ("llama3_json", LLAMA_TAGGED),
    ("mistral", MISTRAL),
    ("mistral", MISTRAL_TWO),
]


def _tokens(text: str) -> list[str]:
    """Token-like pieces: a word with its leading space, or one other character."""
    return re.findall(r"\s?\w+|\s|.", text, re.DOTALL)


def _sized(n: int) -> Callable[[str], list[str]]:
    return lambda text: [text[i : i + n] for i in range(0, len(text), n)]


CHUNKINGS: dict[str, Callable[[str], list[str]]] = {
    "chars": _sized(1),
    "tokens": _tokens,
    "3": _sized(3),
    "7": _sized(7),
    "whole": lambda text: [text],
}


@dataclass
class _Streamed:
    content: str = ""
    calls: list[list[str]] = field(default_factory=list)
    #: per call: how many pieces had been fed when its name / first / last argument fragment came out
    name_at: list[int] = field(default_factory=list)
    args_at: list[list[int]] = field(default_factory=list)


def _stream(parser_name: str, pieces: list[str]) -> _Streamed:
    stream = get_tool_parser(parser_name).stream()
    got = _Streamed()
    for fed, events in enumerate([*(stream.feed(p) for p in pieces), stream.finish()], start=1):
        for event in events:
            if isinstance(event, str):
                got.content += event
            elif event.name is not None:
                assert event.index == len(got.calls) and event.arguments == ""
                got.calls.append([event.name, ""])
                got.name_at.append(fed)
                got.args_at.append([])
            else:
                assert isinstance(event, ToolCallFragment) and event.arguments
                got.calls[event.index][1] += event.arguments
                got.args_at[event.index].append(fed)
    return got


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize(("parser_name", "text"), RECORDED)
def test_streamed_calls_join_to_the_whole_parse(parser_name: str, text: str, chunking: str) -> None:
    whole = get_tool_parser(parser_name).parse(text)
    assert whole.calls, "every recorded output holds a call"
    got = _stream(parser_name, CHUNKINGS[chunking](text))
    assert [tuple(c) for c in got.calls] == [(c.name, c.arguments) for c in whole.calls]
    assert (got.content or None) == whole.content
    for args in (c.arguments for c in whole.calls):
        json.loads(args)  # the canonical arguments are JSON text: what the model wrote


@pytest.mark.parametrize("chunking", ["chars", "tokens"])
@pytest.mark.parametrize(("parser_name", "text"), RECORDED)
def test_fragments_come_before_the_end(parser_name: str, text: str, chunking: str) -> None:
    pieces = CHUNKINGS[chunking](text)
    got = _stream(parser_name, pieces)
    for name_at, args_at, (name, args) in zip(got.name_at, got.args_at, got.calls, strict=True):
        assert name_at <= len(pieces), "the name comes out while the output is still being written"
        if args != "{}" or chunking == "chars":
            assert args_at and args_at[0] < len(pieces) + 1  # first fragment before finish()
            assert name_at <= args_at[0]
        if len(args) > 8 and text.index(json.dumps(name)) < text.index(args):  # arguments after the name
            assert len(args_at) > 1, "long arguments come out in several fragments"


def test_name_comes_out_as_soon_as_it_is_written() -> None:
    stream = get_tool_parser("hermes").stream()
    assert stream.feed("Sure") == ["Sure"]
    assert stream.feed(".\n<tool_") == ["."]  # "\n" and a possible marker held back
    assert stream.feed('call>\n{"name": "get_weather"') == []
    events = stream.feed(', "arguments": {"ci')
    assert events == [ToolCallFragment(0, name="get_weather"), ToolCallFragment(0, arguments='{"ci')]
    assert stream.feed('ty": "Paris"}}\n</tool_call>') == [ToolCallFragment(0, arguments='ty": "Paris"}')]
    assert stream.finish() == []


def test_no_content_is_a_piece_of_a_marker() -> None:
    text = "Let me check.<tool_call>" + CONSTRAINED.removeprefix("<tool_call>")
    got = _stream("hermes", CHUNKINGS["chars"](text))
    assert got.content == "Let me check." and len(got.calls) == 1
    mistral = _stream("mistral", CHUNKINGS["chars"]("Calling [TOOL_CALLS]" + MISTRAL.removeprefix("[TOOL_CALLS]")))
    assert mistral.content == "Calling" and [c[0] for c in mistral.calls] == ["get_current_weather"]


@pytest.mark.parametrize(
    ("parser_name", "text"),
    [
        ("hermes", "a <toolbox> b"),
        ("hermes", "<tool_call>not json</tool_call> after"),
        ("hermes", '<tool_call>{"arguments": {"a": 1}}</tool_call>'),  # no name
        ("hermes", '<tool_call>{"name": "f", "arguments": 5}</tool_call>'),  # arguments not an object
        ("hermes", '<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>'),
        ("llama3_json", "The weather is fine. {not a call}"),
        ("llama3_json", '{"answer": 42}'),
        ("mistral", "[TOOL_CALLS] not json"),
    ],
)
def test_text_that_is_not_a_call_stays_content_unchanged(parser_name: str, text: str) -> None:
    for chunking in CHUNKINGS.values():
        got = _stream(parser_name, chunking(text))
        assert got.calls == [] and got.content == text
    assert get_tool_parser(parser_name).parse(text).content == text


def test_a_marker_inside_rejected_text_is_still_found() -> None:
    text = '<tool_call><tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    out = get_tool_parser("hermes").parse(text)
    assert out.content == "<tool_call>" and [(c.name, c.arguments) for c in out.calls] == [("f", '{"a": 1}')]
    got = _stream("hermes", CHUNKINGS["chars"](text))
    assert got.content == "<tool_call>" and got.calls == [["f", '{"a": 1}']]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', [("f", '{"a": 1}')]),  # JSON string
        ('<tool_call>{"name": "f"}</tool_call>', [("f", "{}")]),  # no arguments
        (
            '<tool_call>{"arguments": {"b": [1, {"c": null}]}, "name": "g"}</tool_call>',
            [("g", '{"b": [1, {"c": null}]}')],
        ),
        (
            '<tool_call>{"name": "f", "arguments": {"a": "x\\u00e9\\n"}}',
            [("f", '{"a": "x\\u00e9\\n"}')],
        ),  # no close tag
        ('<tool_call>{"name": "f", "arguments": {"city": "Par', [("f", '{"city": "Par')]),  # cut by max_tokens
    ],
)
def test_call_shapes(text: str, calls: list[tuple[str, str]]) -> None:
    whole = get_tool_parser("hermes").parse(text)
    assert [(c.name, c.arguments) for c in whole.calls] == calls
    for chunking in CHUNKINGS.values():
        assert [tuple(c) for c in _stream("hermes", chunking(text)).calls] == calls
