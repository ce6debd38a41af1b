"""Tool parsers come from ``flexserv_register_tool_parsers`` (this plugin's own hook):
per app, listed per plugin, blockable. Without the one a model needs, a request with
``tools`` is a 400 naming it and everything else works. Also streaming calls (OpenAI
deltas from any parser's events), with the parsers an app registers."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from flexserv_tool_parsers import ParsedToolCall, ParsedToolOutput, ToolParser
from flexserv_tool_parsers.base import guess_tool_parser
from flexserv_tool_parsers.calling import FunctionCalling, FunctionPlan, ToolStreamer, split_output
from recorded_tool_outputs import HERMES
from recorded_tool_outputs import QWEN as RECORDED_QWEN
from registered import parsers_of

from flexserv_core import ChatCompletionRequest, InvalidRequest, ModelSpec, PluginHookError, ToolCallDelta, hookimpl
from flexserv_core.testing import FakeBackendPlugin, FakeTextModel, app_client, make_app, run_flexserv

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
#: Qwen 2.5's two parallel calls (Hermes syntax)
QWEN = (
    '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco", "unit": "celsius"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_temperature_date", "arguments": {"location": "Paris", "date": "2024-10-01"}}\n'
    "</tool_call>"
)


class Bracket(ToolParser):
    name = "test-bracket"
    markers = ("<<",)

    def parse(self, text: str) -> ParsedToolOutput:
        head, _, inner = text.partition("<<")
        name, _, args = inner.rstrip(">").partition(" ")
        return ParsedToolOutput(content=head.strip() or None, calls=[ParsedToolCall(name, args)])


class BracketPlugin:
    @hookimpl
    def flexserv_register_tool_parsers(self, settings: Any) -> list[type[ToolParser]]:
        return [Bracket]


def _hermes() -> ToolParser:
    return parsers_of(["tool-parsers"]).get("hermes")


def test_parsers_are_per_app_and_attributed_to_their_plugin() -> None:
    with_bracket = parsers_of([BracketPlugin(), "tool-parsers"])
    plain = parsers_of(["tool-parsers"])
    assert with_bracket.names() == ["hermes", "llama3_json", "mistral", "test-bracket"]
    assert with_bracket.of_plugin("tool-parsers") == ["hermes", "llama3_json", "mistral"]
    assert with_bracket.get("test-bracket").parse('<<f {"a": 1}>>').calls == [ParsedToolCall("f", '{"a": 1}')]
    assert "test-bracket" not in plain.names()  # no global registry: another app never sees it
    assert make_app([]).state.flexserv.tool_calling is None  # the plugin is not loaded


def test_a_name_registered_twice_or_a_non_parser_fails_naming_the_plugin() -> None:
    class Twice:
        @hookimpl
        def flexserv_register_tool_parsers(self, settings: Any) -> list[Any]:
            return [Bracket]

    with pytest.raises(PluginHookError, match="tool parser 'test-bracket' is also registered by plugin"):
        make_app([BracketPlugin(), Twice(), "tool-parsers"])

    class NotAParser:
        @hookimpl
        def flexserv_register_tool_parsers(self, settings: Any) -> list[Any]:
            return [Bracket()]

    with pytest.raises(PluginHookError, match="expected ToolParser subclasses"):
        make_app([NotAParser(), "tool-parsers"])


async def test_info_says_tools_are_served_and_the_command_lists_parsers_per_plugin() -> None:
    async with app_client(make_app([FakeBackendPlugin(), BracketPlugin(), "tool-parsers"])) as client:
        info = (await client.get("/v1/flexserv/info")).json()
    by_name = {p["name"]: p for p in info["plugins"]}
    assert by_name["tool-parsers"]["distribution"] == "flexserv-tool-parsers"
    assert "flexserv_tool_calling" in by_name["tool-parsers"]["hooks"]
    assert "tools" in info["features"]
    listed = run_flexserv("tool-parsers")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^tool-parsers +hermes, llama3_json, mistral$", listed.stdout, re.MULTILINE), listed.stdout


async def test_blocked_a_request_with_tools_is_a_400_naming_the_parameter_and_the_rest_works() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "constraints"], block=["tool-parsers"])) as client:
        refused = await client.post("/v1/chat/completions", json={**CHAT, "tools": TOOLS})
        plain = await client.post("/v1/chat/completions", json=CHAT)
        info = (await client.get("/v1/flexserv/info")).json()
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "tools" and error["code"] == "unsupported_parameter"
    assert "'tool-parsers' plugin" in error["message"]
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"]
    assert "tools" not in info["features"] and "response_format" in info["features"]
    assert {p["name"]: p["status"] for p in info["plugins"]}["tool-parsers"] == "blocked"


def test_a_model_whose_parser_no_plugin_registered_is_a_400_naming_it() -> None:
    spec = ModelSpec(name="m", source="fake://", backend="fake", options={"tool_parser": "nope"})
    body = msgspec.convert({**CHAT, "tools": TOOLS}, ChatCompletionRequest)
    with pytest.raises(InvalidRequest) as info:
        FunctionCalling({}).plan(body, FakeTextModel(spec), spec, None)
    assert (info.value.param, info.value.code) == ("tools", "tool_parser_not_found")
    assert "tool parser 'nope'" in info.value.message and "known: none" in info.value.message


async def test_with_the_plugin_a_request_with_tools_is_served() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers"])) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "tools": TOOLS})
    assert response.status_code == 200, response.text


def test_guess_from_template() -> None:
    assert guess_tool_parser("{{ '<tool_call>' }}") == "hermes"
    assert guess_tool_parser("[TOOL_CALLS] {{ tools }}") == "mistral"
    assert guess_tool_parser("<|python_tag|>{{ x }}") == "llama3_json"
    assert guess_tool_parser(None) == "hermes"


def _plan(parser: ToolParser, parallel: bool = True) -> FunctionPlan:
    return FunctionPlan(parser=parser, tools=[], choice="auto", parallel=parallel, native=True)


def test_parallel_false_keeps_the_first_call() -> None:
    _, calls, cut = split_output(_plan(_hermes(), parallel=False), QWEN)
    assert [c.function.name for c in calls] == ["get_current_temperature"] and not cut


@pytest.mark.parametrize("parallel", [True, False])
def test_tool_streamer_sends_openai_deltas(parallel: bool) -> None:
    plan = _plan(_hermes(), parallel)
    content, calls, cut = split_output(plan, QWEN)
    streamer = ToolStreamer(plan)
    pieces = [d for p in re.findall(r"\s?\w+|\s|.", QWEN, re.DOTALL) for d in streamer.feed(p)]
    before_finish = len(pieces)
    pieces += streamer.finish()
    deltas = [p for p in pieces if isinstance(p, ToolCallDelta)]
    assert content is None and not [p for p in pieces if isinstance(p, str)]
    joined: dict[int, list[str]] = {}
    for delta in deltas:
        assert delta.function is not None
        if delta.id is not None:  # the first delta of a call: id, type and name, no arguments yet
            assert delta.index not in joined and delta.type == "function" and delta.function.name
            assert delta.function.arguments == ""
            joined[delta.index] = [delta.function.name, ""]
        else:
            assert delta.type is None and delta.function.name is None and delta.function.arguments
            joined[delta.index][1] += delta.function.arguments
    assert [tuple(v) for _, v in sorted(joined.items())] == [(c.function.name, c.function.arguments) for c in calls]
    assert streamer.calls == len(calls) == (2 if parallel else 1)
    assert before_finish == len(pieces), "every delta came out before the output ended"
    assert cut is False and streamer.cut is False, "complete calls are not a cut output"


def test_a_plugin_parser_without_a_stream_still_streams() -> None:
    streamer = ToolStreamer(_plan(Bracket()))
    assert streamer.feed("hi <") == ["hi "]
    assert streamer.feed('<f {"a": 1}>>') == []
    out = streamer.finish()
    assert isinstance(out[0], ToolCallDelta) and out[0].function is not None and out[0].function.name == "f"
    assert isinstance(out[1], ToolCallDelta) and out[1].function is not None
    assert out[1].function.arguments == '{"a": 1}' and streamer.calls == 1


def _cut_at(text: str, marker: str, keep: int, nth: int = -1) -> str:
    """``text`` cut ``keep`` characters into the ``nth`` occurrence of ``marker`` (what
    ``max_tokens`` leaves of a recorded output)."""
    starts = [m.start() for m in re.finditer(re.escape(marker), text)]
    return text[: starts[nth] + keep]


#: Recorded outputs cut the way ``max_tokens`` cuts them -> (content, call names). The
#: first is what SmolLM2 left with a required tool_choice: ``...}}\n</``.
CUT_OUTPUTS = {
    "in the last closing tag": (_cut_at(RECORDED_QWEN, "</tool_call>", 2), None, 2),
    "in the first closing tag": (_cut_at(RECORDED_QWEN, "</tool_call>", 8, 0), None, 1),
    "in the second opening tag": (_cut_at(RECORDED_QWEN, "<tool_call>", 6, 1), None, 1),
    "in the second call's arguments": (_cut_at(RECORDED_QWEN, '"date"', 3), None, 2),
    # SmolLM2 at max_tokens 23-25: the arguments whole, the markup not (chat said tool_calls)
    "before the last closing tag": (_cut_at(RECORDED_QWEN, "</tool_call>", 0), None, 2),
    "before the last call's object closes": (_cut_at(RECORDED_QWEN, "</tool_call>", 0).rstrip()[:-1], None, 2),
    "in the first opening tag, after content": (
        _cut_at(HERMES, "<tool_call>", 1, 0),
        "Let me look that up for you.",
        0,
    ),
    "in a closing tag, after content": (
        "Let me look that up for you.\n" + _cut_at(RECORDED_QWEN, "</tool_call>", 3),
        "Let me look that up for you.",
        2,
    ),
}


@pytest.mark.parametrize("case", list(CUT_OUTPUTS))
def test_a_call_cut_by_max_tokens_leaves_no_markup_in_content_and_says_cut(case: str) -> None:
    text, content, n_calls = CUT_OUTPUTS[case]
    plan = _plan(_hermes())
    whole_content, calls, cut = split_output(plan, text)
    assert (whole_content, len(calls), cut) == (content, n_calls, True)
    streamer = ToolStreamer(plan)
    pieces = [d for p in re.findall(r"\s?\w+|\s|.", text, re.DOTALL) for d in streamer.feed(p)]
    pieces += streamer.finish()
    streamed = "".join(p for p in pieces if isinstance(p, str)) or None
    assert (streamed, streamer.calls, streamer.cut) == (content, n_calls, True)


def test_whole_recorded_outputs_are_not_cut() -> None:
    for text in (RECORDED_QWEN, "Let me look that up for you.\n" + RECORDED_QWEN):
        _, calls, cut = split_output(_plan(_hermes()), text)
        streamer = ToolStreamer(_plan(_hermes()))
        streamer.feed(text)
        streamer.finish()
        assert calls and not cut and not streamer.cut
