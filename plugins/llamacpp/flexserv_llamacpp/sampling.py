"""Choosing a sequence's next token from llama.cpp's logits, in numpy.

The semantics are the transformers backend's (``flexserv_transformers.sampling``),
so a request means the same on either backend:

0. ``logit_bias`` is added; a constrained row's disallowed tokens become ``-inf``;
1. penalties over *generated* tokens (OpenAI semantics):
   ``logit -= presence_penalty * (count > 0) + frequency_penalty * count``;
2. temperature (a greedy row, ``temperature == 0`` or ``top_k == 1``, uses 1);
3. greedy rows take the argmax; others keep the top-k, then the smallest set of
   most likely tokens whose probability reaches ``top_p``, and draw once from the
   row's own generator (seeded by ``seed``, else from OS entropy).

Logprobs are the log-softmax after steps 0-2, before top-k/top-p truncation.
"""

from __future__ import annotations

import secrets

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

    __slots__ = ("bias_ids", "bias_values", "counts", "params", "rng", "seed")

    def __init__(self, params: SamplingParams, vocab_size: int) -> None:
        self.params = params
        self.bias_ids: np.ndarray | None = None
        self.bias_values: np.ndarray | None = None
        if params.logit_bias:
            kept = [(t, v) for t, v in params.logit_bias.items() if 0 <= t < vocab_size]
            self.bias_ids = np.array([t for t, _ in kept], dtype=np.int64)
            self.bias_values = np.array([v for _, v in kept], dtype=np.float32)
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.rng = None if params.greedy else np.random.default_rng(self.seed)
        self.counts: dict[int, int] | None = {} if (params.presence_penalty or params.frequency_penalty) else None

    def observe(self, token: int) -> None:
        """Record a generated token (once per token the sequence keeps)."""
        if self.counts is not None:
            self.counts[token] = self.counts.get(token, 0) + 1

    def pick(self, logits: np.ndarray, blocked: np.ndarray | None = None) -> Pick:
        """The next token from one row of logits (not modified). ``blocked``: a
        boolean mask of the tokens a constraint forbids now (``None``: none)."""
        p = self.params
        want_logprobs = p.logprobs or p.top_logprobs > 0
        plain = self.bias_ids is None and blocked is None and self.counts is None
        if plain and p.greedy and not want_logprobs:
            return int(np.argmax(logits)), None, None
        x = np.array(logits, dtype=np.float32)
        if self.bias_ids is not None and self.bias_values is not None:
            np.add.at(x, self.bias_ids, self.bias_values)
        if blocked is not None:
            x[blocked] = -np.inf
        if self.counts:
            ids = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
            counts = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
            x[ids] -= p.frequency_penalty * counts + p.presence_penalty
        if not p.greedy and p.temperature != 1.0:
            x /= p.temperature
        token = int(np.argmax(x)) if p.greedy else self._draw(x)
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

    def _draw(self, x: np.ndarray) -> int:
        assert self.rng is not None
        p = self.params
        vocab = x.size
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
            return int(order[self.rng.choice(order.size, p=probs)])
        probs = np.exp(x - x.max())
        probs /= probs.sum()
        return int(self.rng.choice(vocab, p=probs))

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
