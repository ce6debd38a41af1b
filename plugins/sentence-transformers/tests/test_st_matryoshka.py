"""Which sentence-transformers models may have their vectors cut to a request's ``dimensions``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from flexserv_sentence_transformers.backend import matryoshka_of

from flexserv_core import ModelKind, ModelLoadError, ModelSpec


def spec(**options: Any) -> ModelSpec:
    return ModelSpec(name="m", kind=ModelKind.EMBEDDING, source="m", options=options)


PLAIN = SimpleNamespace()  # a Hugging Face config that says nothing about it


def test_a_model_nothing_declares_matryoshka_is_not() -> None:
    assert matryoshka_of(spec(), PLAIN, 384) == (False, None)
    assert matryoshka_of(spec(), None, 384) == (False, None)


def test_the_config_says_it_as_vllm_reads_it() -> None:
    assert matryoshka_of(spec(), SimpleNamespace(is_matryoshka=True), 768) == (True, None)
    sizes = SimpleNamespace(matryoshka_dimensions=[768, 64, 256])
    assert matryoshka_of(spec(), sizes, 768) == (True, (64, 256, 768))


def test_the_option_wins_over_the_config() -> None:
    assert matryoshka_of(spec(matryoshka_dimensions=[64, 384]), PLAIN, 384) == (True, (64, 384))
    assert matryoshka_of(spec(matryoshka_dimensions=True), PLAIN, 384) == (True, None)
    assert matryoshka_of(spec(matryoshka_dimensions=False), SimpleNamespace(is_matryoshka=True), 384) == (False, None)


@pytest.mark.parametrize("bad", [[], [0], [385], ["64"], [True], "64", 64])
def test_a_bad_option_stops_the_load_naming_it(bad: Any) -> None:
    with pytest.raises(ModelLoadError, match="matryoshka_dimensions"):
        matryoshka_of(spec(matryoshka_dimensions=bad), PLAIN, 384)
