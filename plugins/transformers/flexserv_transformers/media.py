"""The images of one prompt, from the processor's output to the model's embeddings.

The processor expands each image placeholder of the rendered prompt into the
image's run of image tokens and returns the pixel tensors. :class:`PromptMedia`
keeps both sides of that: the prompt positions of the image tokens, the pixel
inputs (``pixel_values`` and whatever else the processor returned for them), and
the images' content digests. An engine turns the pixels into features with
:func:`image_features` (on its own thread, only when a prefill chunk needs them:
a prefix-cache hit on the whole image skips the vision encoder) and puts feature
``k`` at the ``k``-th image-token position, as the models' own forward passes do.

Prefix caching keys a block on its tokens; an image token's id is the same for
every image, so :meth:`PromptMedia.key_marks` gives each image-token position a
mark made of its image's digest. Equal images with the same text share blocks; a
different image never does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

from flexserv_core import InvalidRequest

__all__ = ["ImagePrompt", "PromptMedia", "image_features", "media_inputs"]


class PromptMedia:
    """Processed images of one prompt (see the module docstring).

    Attributes:
        inputs: the processor's image tensors (``pixel_values``...), dropped once the
            features are computed.
        digests: sha256 of each image's encoded bytes, in prompt order.
        positions: prompt positions of the image tokens, in order.
        features: ``[len(positions), hidden]`` once computed (engine thread only).
    """

    def __init__(
        self, inputs: dict[str, torch.Tensor], digests: Sequence[str], token_ids: Sequence[int], image_token_id: int
    ) -> None:
        self.inputs = inputs
        self.digests = tuple(digests)
        self.positions = [p for p, t in enumerate(token_ids) if t == image_token_id]
        self.features: torch.Tensor | None = None
        self._index: torch.Tensor | None = None
        self.marks = self._marks()

    def _marks(self) -> dict[int, str]:
        """Position -> the digest of its image. Contiguous runs of image tokens are
        the images, in order, when there are as many runs as images (LLaVA); else
        (processors that tile an image into several runs) every image-token
        position gets the digest of all the prompt's images together."""
        runs: list[list[int]] = []
        for p in self.positions:
            if runs and runs[-1][-1] == p - 1:
                runs[-1].append(p)
            else:
                runs.append([p])
        if len(runs) == len(self.digests):
            return {p: digest for run, digest in zip(runs, self.digests, strict=True) for p in run}
        combined = hashlib.sha256("".join(self.digests).encode()).hexdigest()
        return dict.fromkeys(self.positions, combined)

    @property
    def end(self) -> int:
        """One past the last image-token position."""
        return self.positions[-1] + 1 if self.positions else 0

    def index(self, start: int, stop: int) -> torch.Tensor:
        """For positions ``start..stop-1``: the feature row of each, ``-1`` for text."""
        if self._index is None:
            index = torch.full((self.end,), -1, dtype=torch.long)
            index[torch.tensor(self.positions, dtype=torch.long)] = torch.arange(len(self.positions))
            self._index = index
        out = torch.full((stop - start,), -1, dtype=torch.long)
        if start < self.end:
            upto = min(stop, self.end)
            out[: upto - start] = self._index[start:upto]
        return out

    def overlaps(self, start: int, stop: int) -> bool:
        """Whether positions ``start..stop-1`` hold an image token."""
        return bool(self.positions) and start < self.end and stop > self.positions[0]


class ImagePrompt(list[int]):
    """Prompt token ids that also carry their images (``render_chat``'s return value
    for requests with images; the API hands it back to ``generate`` unchanged)."""

    media: PromptMedia

    def __init__(self, token_ids: Sequence[int], media: PromptMedia) -> None:
        super().__init__(token_ids)
        self.media = media


def media_inputs(media: PromptMedia, model: Any) -> dict[str, torch.Tensor]:
    """``media.inputs`` on the model's device, floating tensors in its dtype (what
    its forward pass and ``get_image_features`` take)."""
    param = next(model.parameters())
    return {
        k: v.to(device=param.device, dtype=param.dtype) if v.is_floating_point() else v.to(param.device)
        for k, v in media.inputs.items()
    }


def image_features(model: Any, media: PromptMedia) -> torch.Tensor:
    """``[n_image_tokens, hidden]``: the vision tower and projector of ``model`` over
    ``media.inputs``, in the model's dtype, one row per image-token position.

    Raises :class:`InvalidRequest` (code ``image_features_mismatch``) when the
    features are not one per image token."""
    out = model.get_image_features(**media_inputs(media, model))
    pooled = getattr(out, "pooler_output", None)
    feats: Any = pooled if pooled is not None else out
    if isinstance(feats, list | tuple):
        rows = torch.cat([f.reshape(-1, f.shape[-1]) for f in feats])
    else:
        rows = feats.reshape(-1, feats.shape[-1])
    if rows.shape[0] != len(media.positions):
        # the processor and the model disagree about the images' size (a mis-matched
        # or edited processor config): this request cannot be served, others can
        raise InvalidRequest(
            f"The model's vision encoder makes {rows.shape[0]} image features of this request's images, but the"
            f" model's processor gave the prompt {len(media.positions)} image tokens; the images cannot be placed"
            " in the prompt (the processor's configuration does not match the model's).",
            code="image_features_mismatch",
        )
    return rows
