"""Readying a request's sampling params for a model, before anything is generated."""

from __future__ import annotations

import asyncio

import msgspec

from flexserv_core.backends.base import SamplingParams, TextGenerationModel
from flexserv_core.errors import UnsupportedParameter


async def prepare_params(model: TextGenerationModel, params: SamplingParams) -> SamplingParams:
    """``params`` with its constraint compiled into ``params.grammar`` for ``model``'s
    vocabulary, after the backend's own :meth:`~TextGenerationModel.prepare` checks.

    The text session calls this once per request (the choices share it); a plugin
    that calls ``model.generate`` itself (a document extractor, a tool) calls it
    too. A model without a :attr:`~TextGenerationModel.constraint_vocabulary` gets
    a 400 naming the constraint's parameter, and a sampling extension (``min_p``...)
    the model's backend does not list in its
    :attr:`~TextGenerationModel.sampling_extensions` a 400 naming it.
    """
    unsupported = [name for name in params.extensions_used() if name not in model.sampling_extensions]
    if unsupported:
        raise UnsupportedParameter(
            f"The model '{model.spec.name}' does not support '{unsupported[0]}': its backend does not implement it.",
            param=unsupported[0],
        )
    constraint = params.constraint
    if constraint is not None and params.grammar is None:
        vocabulary = model.constraint_vocabulary
        if vocabulary is None:
            raise UnsupportedParameter(
                f"The model '{model.spec.name}' does not support constrained decoding"
                f" ('{constraint.param.split('.')[0]}'): its backend does not take part in the platform's"
                " constraint service.",
                param=constraint.param,
            )
        # milliseconds (the first one for a vocabulary builds its view of it, ~0.5 s): off the loop
        compiled = await asyncio.to_thread(vocabulary.compiler.compile, constraint)
        params = msgspec.structs.replace(params, grammar=compiled)
    if constraint is not None or params.logit_bias:
        await model.prepare(params)
    return params
