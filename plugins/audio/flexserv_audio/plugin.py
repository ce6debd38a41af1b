"""Hook implementations of the ``audio`` plugin."""

from __future__ import annotations

import numpy as np

from flexserv_audio.decode import load_audio
from flexserv_core import hookimpl


@hookimpl(trylast=True)
def flexserv_load_audio(data: bytes, filename: str | None, content_type: str | None, sampling_rate: int) -> np.ndarray:
    """The general decoder: runs after more specific plugins, and never returns ``None``
    (it answers 400 for anything it cannot read)."""
    return load_audio(data, sampling_rate, filename=filename)
