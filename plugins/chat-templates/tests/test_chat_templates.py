"""The renderer on its own (no tokenizer, no transformers): what templates may do and
see. Parity with transformers' ``apply_chat_template`` is tested where a tokenizer is
at hand (the transformers plugin's ``test_fast_tokenizer.py``)."""

from __future__ import annotations

import threading

import jinja2
import pytest
from flexserv_chat_templates import ChatTemplates, render_chat_template, select_chat_template
from jinja2.exceptions import SecurityError

USER = [{"role": "user", "content": "héllo", "name": None}]


def _render(source: str, messages: list[dict[str, object]] = USER, **kwargs: object) -> str:
    compiled = ChatTemplates().get(source)
    return render_chat_template(compiled, messages, add_generation_prompt=True, special_tokens={}, **kwargs)  # type: ignore[arg-type]


def test_the_template_sees_plain_messages_and_keeps_non_ascii_in_tojson() -> None:
    assert _render("{{ messages | tojson }}") == '[{"role": "user", "content": "héllo"}]'  # None values dropped
    assert _render("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}") == "héllo"
    assert _render("{{ add_generation_prompt }} {{ bos }}", variables={"bos": "<s>"}) == "True <s>"


@pytest.mark.parametrize(
    "escape",
    [
        "{{ messages.__class__.__mro__ }}",
        "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
        "{{ messages.append(1) }}",
    ],
)
def test_the_sandbox_refuses_escapes(escape: str) -> None:
    with pytest.raises(SecurityError):
        _render(escape)


def test_raise_exception_and_bad_input_are_errors_the_backend_turns_into_400s() -> None:
    with pytest.raises(jinja2.TemplateError, match="no system"):
        _render("{{ raise_exception('no system') }}")
    with pytest.raises(ValueError, match="empty conversation"):
        _render("x", messages=[])
    with pytest.raises(ValueError, match="JSON schemas"):
        _render("x", tools=["not an object"])


def test_select_picks_by_name_then_tool_use_then_default() -> None:
    named = {"default": "d", "tool_use": "t"}
    assert select_chat_template(named, None, None) == "d"
    assert select_chat_template(named, None, [{}]) == "t"
    assert select_chat_template(named, "tool_use", None) == "t"
    assert select_chat_template("model's", "inline {{ 1 }}", None) == "inline {{ 1 }}"
    with pytest.raises(ValueError, match="no chat template"):
        select_chat_template(None, None, None)
    with pytest.raises(ValueError, match="name one of"):
        select_chat_template({"a": "x"}, None, None)


def test_each_template_is_compiled_once_under_racing_threads() -> None:
    templates = ChatTemplates()
    seen: list[jinja2.Template] = []
    barrier = threading.Barrier(8)

    def use() -> None:
        barrier.wait()
        seen.append(templates.get("{{ messages[0].content }}"))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(t) for t in seen}) == 1
