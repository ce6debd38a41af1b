"""Reading a request's template variables and the defaults setting, without a server."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_template_kwargs import request_template_kwargs
from flexserv_template_kwargs.settings import parse_defaults

from flexserv_core import InvalidRequest, UsageError


def test_fields_are_popped_and_top_level_shorthand_wins() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "chat_template_kwargs": {"enable_thinking": False, "custom_key": "val"},
        "enable_thinking": True,
    }
    assert request_template_kwargs(body) == {"enable_thinking": True, "custom_key": "val"}
    assert body == {"model": "m"}, "both fields leave the body before schema validation"


def test_absent_or_null_fields_mean_nothing_set() -> None:
    assert request_template_kwargs({"model": "m"}) is None
    assert request_template_kwargs({"chat_template_kwargs": None, "enable_thinking": None}) is None
    assert request_template_kwargs({"enable_thinking": False}) == {"enable_thinking": False}
    assert request_template_kwargs({"chat_template_kwargs": {}}) == {}
    # a null shorthand does not erase the value inside chat_template_kwargs
    assert request_template_kwargs({"chat_template_kwargs": {"enable_thinking": True}, "enable_thinking": None}) == {
        "enable_thinking": True
    }


@pytest.mark.parametrize("value", [[1, 2], "enable_thinking", 3, True])
def test_non_object_is_rejected_naming_the_param(value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        request_template_kwargs({"chat_template_kwargs": value})
    assert info.value.param == "chat_template_kwargs" and info.value.status_code == 400
    assert "JSON object" in info.value.message


@pytest.mark.parametrize("value", ["true", 1, 0, [True], {"a": 1}])
def test_non_boolean_enable_thinking_is_rejected(value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        request_template_kwargs({"enable_thinking": value})
    assert info.value.param == "enable_thinking"
    with pytest.raises(InvalidRequest) as info:
        request_template_kwargs({"chat_template_kwargs": {"enable_thinking": value}})
    assert info.value.param == "chat_template_kwargs.enable_thinking"


def test_defaults_setting_parsing() -> None:
    assert parse_defaults('{"enable_thinking": false}') == {"enable_thinking": False}
    assert parse_defaults({"x": 1}) == {"x": 1}
    assert parse_defaults(None) == {} and parse_defaults("  ") == {}
    for bad in ("{not json", "[1]", '{"tokenize": true}', '{"enable_thinking": "no"}'):
        with pytest.raises(UsageError, match="--template-kwargs-defaults"):
            parse_defaults(bad)
