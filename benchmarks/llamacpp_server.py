"""llama-cpp-python's OpenAI-compatible server, with the workaround these CPUs need.

llama.cpp's "extra buffer types" (AMX weight repacking) crash on the development
VMs: llama-cpp-python segfaults on its first decode unless the model parameter
``use_extra_bufts`` is false, and its ``Llama()`` constructor does not expose it.
This wrapper makes the library's default model parameters carry
``use_extra_bufts = False`` (where the field exists), then runs the stock server
with the arguments it was given (``--model``, ``--port``, ``--interrupt_requests
False``, ...). It runs in the peers' separate venv, never in FlexServ's.
"""

from __future__ import annotations

import sys
from typing import Any

import llama_cpp.llama_cpp as lib

_default_model_params = lib.llama_model_default_params


def _model_params_without_extra_bufts() -> Any:
    params = _default_model_params()
    if hasattr(params, "use_extra_bufts"):
        params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _model_params_without_extra_bufts


def main() -> None:
    from llama_cpp.server.__main__ import main as server_main

    sys.argv[0] = "llama_cpp.server"
    server_main()


if __name__ == "__main__":
    main()
