"""Choosing a sequence's next token from llama.cpp's logits, in numpy.

The semantics are the transformers backend's (``flexserv_transformers.sampling``),
so a request means the same on either backend:

0. ``logit_bias`` is added; a constrained row's disallowed tokens become ``-inf``;
   under ``ignore_eos``, or before ``min_tokens`` tokens, so do the end-of-generation
   tokens, unless nothing else is left (a complete constrained output);
1. penalties: ``repetition_penalty`` over the prompt and the generated tokens (a
   seen token's positive logit divided by it, a negative one multiplied), then
   OpenAI's over *generated* tokens:
   ``logit -= presence_penalty * (count > 0) + frequency_penalty * count``;
2. temperature (a greedy row, ``temperature == 0`` or ``top_k == 1``, uses 1);
3. greedy rows take the argmax; others drop the tokens less likely than ``min_p``
   times the most likely one, keep the top-k, then the smallest set of most likely
   tokens whose probability reaches ``top_p``, and draw once from the row's own
   generator (seeded by ``seed``, else from OS entropy). A row that verifies a
   speculative draft token ``x`` keeps ``x`` with its probability ``p(x)`` under that
   distribution, else draws from it without ``x``: the standard speculative-sampling
   rule for a deterministic draft, which leaves the distribution of the output as it is.

Logprobs are the log-softmax after steps 0-2, before min-p/top-k/top-p truncation.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Sequence

import numpy as np

from flexserv_core import SamplingParams

__all__ = ["Pick", "Sampler"]

#: (token id, its logprob or None, top alternatives [(id, logprob)] or None)
Pick = tuple[int, float | None, list[tuple[int, float]] | None]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    finite = x[np.isfinite(x)]
    top = float(finite.max()) if finite.size else 0.0
    shifted: np.ndarray = x - top
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum())
    return out


class Sampler:
    """One sequence's sampling state: parameters, generator, generated-token counts."""

    __slots__ = ("bias_ids", "bias_values", "counts", "eos", "generated", "params", "rng", "seed", "seen")

    def __init__(
        self,
        params: SamplingParams,
        vocab_size: int,
        *,
        prompt: Sequence[int] = (),
        eos: Iterable[int] = (),
    ) -> None:
        """``prompt`` feeds ``repetition_penalty``; ``eos`` (the end-of-generation
        tokens) are what ``min_tokens``/``ignore_eos`` hold back."""
        self.params = params
        self.generated = 0
        #: tokens of the prompt and the output so far (``repetition_penalty`` only)
        self.seen: np.ndarray | None = None
        if params.repetition_penalty != 1.0:
            self.seen = np.zeros(vocab_size, dtype=bool)
            ids = np.fromiter((t for t in prompt if 0 <= t < vocab_size), dtype=np.int64)
            self.seen[ids] = True
        self.eos: np.ndarray | None = None
        if params.suppresses_eos:
            held = sorted(t for t in set(eos) if 0 <= t < vocab_size)
            self.eos = np.array(held, dtype=np.int64) if held else None
        self.bias_ids: np.ndarray | None = None
        self.bias_values: np.ndarray | None = None
        if params.logit_bias:
            kept = [(t, v) for t, v in params.logit_bias.items() if 0 <= t < vocab_size]
            self.bias_ids = np.array([t for t, _ in kept], dtype=np.int64)
            self.bias_values = np.array([v for _, v in kept], dtype=np.float32)
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.rng = None if params.greedy else np.random.default_rng(self.seed)
        self.counts: dict[int, int] | None = {} if (params.presence_penalty or params.frequency_penalty) else None

    @property
    def holds_eos(self) -> bool:
        """Whether the end-of-generation tokens are masked at this step."""
        return self.eos is not None and (self.params.ignore_eos or self.generated < self.params.min_tokens)

    def observe(self, token: int) -> None:
        """Record a generated token (once per token the sequence keeps)."""
        self.generated += 1
        if self.counts is not None:
            self.counts[token] = self.counts.get(token, 0) + 1
        if self.seen is not None and 0 <= token < self.seen.size:
            self.seen[token] = True

    def pick(self, logits: np.ndarray, blocked: np.ndarray | None = None, draft: int | None = None) -> Pick:
        """The next token from one row of logits (not modified). ``blocked``: a
        boolean mask of the tokens a constraint forbids now (``None``: none);
        ``draft``: the speculative token this row verifies (step 3)."""
        p = self.params
        want_logprobs = p.logprobs or p.top_logprobs > 0
        holds_eos = self.holds_eos
        plain = self.bias_ids is None and blocked is None and self.counts is None and self.seen is None
        if plain and not holds_eos and p.greedy and not want_logprobs:
            return int(np.argmax(logits)), None, None
        x = np.array(logits, dtype=np.float32)
        if self.bias_ids is not None and self.bias_values is not None:
            np.add.at(x, self.bias_ids, self.bias_values)
        if blocked is not None:
            x[blocked] = -np.inf
        if holds_eos:
            assert self.eos is not None
            kept = x[self.eos].copy()
            x[self.eos] = -np.inf
            if not np.isfinite(x).any():  # a constraint allows nothing but the end
                x[self.eos] = kept
        if self.seen is not None:
            seen = x[self.seen]
            x[self.seen] = np.where(seen > 0, seen / p.repetition_penalty, seen * p.repetition_penalty)
        if self.counts:
            ids = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
            counts = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
            x[ids] -= p.frequency_penalty * counts + p.presence_penalty
        if not p.greedy and p.temperature != 1.0:
            x /= p.temperature
        token = int(np.argmax(x)) if p.greedy else self._draw(x, draft)
        if not want_logprobs:
            return token, None, None
        lp = _log_softmax(x)
        top = None
        if p.top_logprobs:
            k = min(p.top_logprobs, lp.size)
            idx = np.argpartition(-lp, k - 1)[:k]
            idx = idx[np.argsort(-lp[idx], kind="stable")]
            top = [(int(i), float(lp[i])) for i in idx]
        return token, float(lp[token]), top

    def _draw(self, x: np.ndarray, draft: int | None = None) -> int:
        assert self.rng is not None
        order, probs = self._distribution(x)
        if draft is not None:
            at = np.flatnonzero(order == draft) if order is not None else [draft]
            chance = float(probs[at[0]]) if len(at) else 0.0
            if self.rng.random() < chance:
                return draft
            if len(at):  # rejected: draw from the distribution without the draft token
                probs = probs.copy()
                probs[at[0]] = 0.0
                rest = probs.sum()
                if rest <= 0.0:  # p(draft) was 1 but for rounding: nothing else can be drawn
                    return draft
                probs /= rest
        index = int(self.rng.choice(probs.size, p=probs))
        return int(order[index]) if order is not None else index

    def _distribution(self, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """The probabilities draws use: over the candidate ids ``order`` (best first)
        after min-p, top-k and top-p, or over the whole vocabulary (``order`` ``None``)."""
        p = self.params
        vocab = x.size
        if p.min_p > 0.0:  # copy: ``x`` also gives the logprobs, which min-p does not cut
            x = np.where(x < float(x.max()) + math.log(p.min_p), -np.inf, x).astype(np.float32)
        k = p.top_k if 0 < p.top_k < vocab else vocab
        if k < vocab or p.top_p < 1.0:
            # candidates: the k best, found without sorting the whole vocabulary when a
            # few hundred tokens already hold top_p of the probability
            order = self._best(x, k)
            logits = x[order]
            probs = np.exp(logits - logits[0])
            probs /= probs.sum()
            if p.top_p < 1.0:
                before = np.cumsum(probs) - probs
                keep = before < p.top_p
                keep[0] = True
                order, probs = order[keep], probs[keep]
                probs = probs / probs.sum()
            return order, probs
        probs = np.exp(x - x.max())
        probs /= probs.sum()
        return None, probs

    def _best(self, x: np.ndarray, k: int) -> np.ndarray:
        """Indices of the ``k`` largest logits, best first; with top-p and no top-k,
        only as many as needed to reach ``top_p``."""
        vocab = x.size
        if k < vocab:
            idx = np.argpartition(-x, k - 1)[:k]
            return idx[np.argsort(-x[idx], kind="stable")]
        top = float(x.max())
        total = float(np.exp(x - top).sum())
        for n in (64, 512, 4096):
            if n >= vocab:
                break
            idx = np.argpartition(-x, n - 1)[:n]
            idx = idx[np.argsort(-x[idx], kind="stable")]
            if float(np.exp(x[idx] - top).sum()) / total >= self.params.top_p:
                return idx
        return np.argsort(-x, kind="stable")
