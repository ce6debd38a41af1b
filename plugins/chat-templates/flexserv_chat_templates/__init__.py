"""Rendering a model's Jinja chat template without transformers (any text backend).

The semantics are those of transformers' ``apply_chat_template`` (templates are
written against it): a sandboxed environment with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension, a ``{% generation %}`` block
(rendered as its body), ``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII text, a limited ``dict`` and a ``namespace`` that refuses
underscore names. The template sees ``messages`` (``None`` values dropped, plain
data only, reasoning under its usual names), ``tools``, ``documents``,
``add_generation_prompt``, the tokenizer's special tokens and the request's
variables. Templates from a checkpoint are untrusted code: hence the sandbox and
the plain copies of everything the template sees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.runtime
from jinja2.sandbox import ImmutableSandboxedEnvironment

from flexserv_chat_templates.literal import LiteralSpecials

__all__ = ["ChatTemplates", "LiteralSpecials", "render_chat_template", "select_chat_template"]

#: Names a message's reasoning arrives under; templates read the first (gpt-oss: ``thinking``).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks assistant text for training
    masks; serving renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: jinja2.runtime.Macro) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters and non-ASCII text, which a prompt must not.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` in templates, and nothing else of the class."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` without underscore attributes (no way to CPython internals)."""

    # Namespace's signature, so that namespace(self=...) still works.
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not set {name!r} on a namespace")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


class ChatTemplates:
    """Compiled templates of one model, each compiled once; thread-safe (a
    compiled template renders concurrently, compiling is under a lock)."""

    def __init__(self) -> None:
        self._env = _environment()
        self._compiled: dict[str, jinja2.Template] = {}
        self._lock = threading.Lock()

    def get(self, source: str) -> jinja2.Template:
        """``source`` compiled (a :class:`jinja2.TemplateSyntaxError` if it does not)."""
        compiled = self._compiled.get(source)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(source)
                if compiled is None:
                    compiled = self._compiled[source] = self._env.from_string(source)
        return compiled


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON-like types: a template must not reach the
    methods of rich objects (the sandbox does not know which are dangerous)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # an int subclass; bool cannot be subclassed, so it never gets here
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
    # APIs send content=None or tool_calls=None; templates handle a missing key, not None.
    plain = {k: _plain(v) for k, v in message.items() if v is not None}
    reasoning = next((plain[k] for k in _REASONING_FIELDS if plain.get(k) is not None), None)
    if reasoning is not None:
        plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
    return plain


def select_chat_template(template: str | Mapping[str, str] | None, name: str | None, tools: Any) -> str:
    """The template to render: ``name`` (a template or the name of one of several),
    else the model's; of several, ``tool_use`` when there are tools, else ``default``."""
    if isinstance(template, Mapping):
        if name is not None and name in template:
            return template[name]
        if name is None:
            if tools is not None and "tool_use" in template:
                return template["tool_use"]
            if "default" in template:
                return template["default"]
            raise ValueError(
                f"This model has several chat templates and none is the default; name one of {sorted(template)}."
            )
    if name is not None:
        return name
    if not isinstance(template, str):
        raise ValueError("This model has no chat template.")
    return template


def render_chat_template(
    compiled: jinja2.Template,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str],
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    variables: Mapping[str, Any] | None = None,
) -> str:
    """The conversation rendered by ``compiled``. Raises what the template raises
    (:class:`jinja2.TemplateError` from ``raise_exception``) and :class:`ValueError`
    / :class:`TypeError` for an empty conversation or a message, tool or document
    that is not an object."""
    if not messages:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    chat = [_message(m) for m in messages]
    if tools is not None:
        for tool in tools:
            if not isinstance(tool, Mapping):
                raise ValueError("Tools should be JSON schemas (objects).")
    if documents is not None:
        for document in documents:
            if not isinstance(document, Mapping):
                raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    # The request's variables override the special tokens of the same name.
    context = {**special_tokens, **_plain(dict(variables or {}))}
    return compiled.render(
        messages=chat,
        tools=_plain(tools),
        documents=_plain(documents),
        add_generation_prompt=add_generation_prompt,
        **context,
    )
