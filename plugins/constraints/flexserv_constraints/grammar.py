"""A backend-neutral :class:`~flexserv_core.Constraint` -> llguidance grammar text.

Why llguidance: millisecond compiles, a parallel batch mask fill (~0.2 ms for 20
rows of SmolLM2's vocabulary), native Lark, and it refuses schema keywords it
cannot enforce instead of ignoring them (see docs/benchmarks.md, "Structured
outputs"). A JSON schema keeps its own key order: properties are generated in the
order the client wrote them (a ``reasoning`` before an ``answer`` stays first).
"""

from __future__ import annotations

import json
from typing import Any

from flexserv_core import Constraint, InvalidRequest

#: JSON output layout: compact separators and no free whitespace between tokens
#: (a model that may pad with whitespace can loop on it until max_tokens).
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _lark_string(text: str) -> str:
    return json.dumps(text)  # Lark string literals take JSON's escapes


def _schema_text(constraint: Constraint) -> str:
    """The schema of a JSON constraint, with the layout options added (key order kept)."""
    if constraint.kind == "json_object":
        schema: Any = {"type": "object"}
    else:
        try:
            schema = json.loads(constraint.spec)
        except ValueError as exc:
            raise InvalidRequest(
                f"The JSON schema is not valid JSON: {exc}", param=constraint.param, code="invalid_schema"
            ) from None
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise InvalidRequest("The JSON schema must be an object.", param=constraint.param, code="invalid_schema")
    return json.dumps({**schema, "x-guidance": _JSON_OPTIONS})


def _choice_rule(spec: str) -> str:
    return " | ".join(_lark_string(c) for c in json.loads(spec))


def _body_rule(constraint: Constraint) -> str:
    kind, spec = constraint.kind, constraint.spec
    if kind in ("json_object", "json_schema"):
        return f"%json{_schema_text(constraint)}"
    if kind == "regex":
        return "/" + spec.replace("/", "\\/") + "/"
    if kind == "choice":
        return f"({_choice_rule(spec)})"
    raise InvalidRequest(
        f"A '{kind}' constraint cannot be wrapped in a prefix or suffix.",
        param=constraint.param,
        code="invalid_grammar",
    )


def _wrapped_lark(constraint: Constraint) -> str:
    parts = (
        _lark_string(constraint.prefix) if constraint.prefix else "",
        _body_rule(constraint),
        _lark_string(constraint.suffix) if constraint.suffix else "",
    )
    item = " ".join(part for part in parts if part)
    if not constraint.repeat:
        return f"start: {item}\n"
    sep = f" {_lark_string(constraint.separator)}" if constraint.separator else ""
    return f"start: item ({sep} item)*\nitem: {item}\n"


def constraint_grammar(constraint: Constraint) -> str:
    """The llguidance grammar (its JSON/Lark text) of ``constraint``; not yet validated."""
    from llguidance import LLMatcher

    kind, spec = constraint.kind, constraint.spec
    if constraint.prefix or constraint.suffix or constraint.repeat:
        return str(LLMatcher.grammar_from_lark(_wrapped_lark(constraint)))
    if kind in ("json_object", "json_schema"):
        return str(LLMatcher.grammar_from_json_schema(_schema_text(constraint)))
    if kind == "regex":
        return str(LLMatcher.grammar_from_regex(spec))
    if kind == "choice":
        return str(LLMatcher.grammar_from_lark(f"start: {_choice_rule(spec)}"))
    if kind == "grammar":
        return str(LLMatcher.grammar_from_lark(spec))
    raise InvalidRequest(f"Unknown constraint kind '{kind}'.", param=constraint.param, code="invalid_grammar")


def describe(constraint: Constraint) -> str:
    return {
        "json_object": "JSON object format",
        "json_schema": "JSON schema",
        "regex": "regular expression",
        "choice": "choice list",
        "grammar": "grammar",
    }.get(constraint.kind, "constraint")
