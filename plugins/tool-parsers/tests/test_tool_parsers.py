"""Tool-call parsers on outputs recorded from each model family, registered by the
plugin (streaming: test_tool_call_stream.py)."""

from __future__ import annotations

import json

import pytest
from flexserv_tool_parsers import ParsedToolCall
from recorded_tool_outputs import HERMES, LLAMA, LLAMA_TAGGED, MISTRAL, QWEN
from registered import PARSERS, get_tool_parser


def test_hermes_qwen_parallel_calls() -> None:
    out = get_tool_parser("hermes").parse(QWEN)
    assert out.content is None
    assert [c.name for c in out.calls] == ["get_current_temperature", "get_temperature_date"]
    assert json.loads(out.calls[1].arguments)["date"] == "2024-10-01"


def test_hermes_keeps_content_and_leaves_malformed_calls_as_text() -> None:
    out = get_tool_parser("hermes").parse(HERMES)
    # the single-quoted (Python-repr) block is not JSON: it stays in the content, the valid call parses
    assert [c.name for c in out.calls] == ["get_stock_price"]
    assert out.content is not None and out.content.startswith("Let me look that up") and "'TSLA'" in out.content


def test_llama3_json() -> None:
    parser = get_tool_parser("llama3_json")
    out = parser.parse(LLAMA)
    assert out.content is None and out.calls == [ParsedToolCall("get_weather", '{"city": "Paris", "unit": "celsius"}')]
    tagged = parser.parse(LLAMA_TAGGED)
    assert [c.name for c in tagged.calls] == ["get_weather", "get_time"]
    assert parser.parse("The weather is fine.").calls == []


def test_mistral() -> None:
    out = get_tool_parser("mistral").parse(MISTRAL)
    assert out.content is None and [c.name for c in out.calls] == ["get_current_weather"]
    assert json.loads(out.calls[0].arguments) == {"location": "Paris, France", "format": "celsius"}
    assert get_tool_parser("mistral").parse("[TOOL_CALLS] not json").calls == []


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral"])
def test_format_then_parse_round_trips(name: str) -> None:
    parser = get_tool_parser(name)
    calls = [ParsedToolCall("a", '{"x": 1}'), ParsedToolCall("b", '{"y": [1, 2]}')]
    assert parser.parse(parser.format_calls(calls)).calls == calls


def test_the_plugin_registers_the_three_formats() -> None:
    assert PARSERS.names() == ["hermes", "llama3_json", "mistral"]
    assert PARSERS.of_plugin("tool-parsers") == ["hermes", "llama3_json", "mistral"]
