"""Choosing the next token for a batch of sequences, each with its own parameters.

Every engine samples through :func:`sample_next`, so the simple engine and the
batching engine agree on semantics. Rows of ``logits`` are sequences; each has a
:class:`SamplerState` holding its :class:`SamplingParams`, its own
``torch.Generator`` and, when it uses penalties, its generated-token counts.

Order of processing (as ``transformers``' logits processors do it):

0. ``logit_bias`` is added, then the row's grammar (if it has a constraint)
   sets every token it does not allow to ``-inf`` (:mod:`.grammar`); under
   ``ignore_eos``, or before ``min_tokens`` tokens, the end-of-sequence tokens
   become ``-inf`` too, unless nothing else is left (a complete constrained output);
1. penalties: ``repetition_penalty`` (vLLM's, over the prompt *and* the generated
   tokens: a seen token's positive logit is divided by it, a negative one
   multiplied), then OpenAI's over *generated* tokens only:
   ``logit -= presence_penalty * (count > 0) + frequency_penalty * count``;
2. temperature: ``logits / temperature`` (a greedy row uses 1);
3. greedy rows (``temperature == 0`` or ``top_k == 1``) take the argmax;
4. other rows: min-p (tokens less likely than ``min_p`` times the most likely
   one go), top-k, then top-p (the smallest set of most likely tokens whose
   probability reaches ``top_p``), then one draw from the row's generator.

**Logprobs** are the log-softmax of the logits after steps 1-2, i.e. of the
penalised, temperature-scaled distribution, *before* min-p/top-k/top-p truncation (a
truncated distribution gives ``-inf`` to most tokens, which JSON cannot carry
and which says nothing about the alternatives). With no penalties and
temperature 1 or 0 they are the model's own log-probabilities.

A request without a seed gets a generator seeded from the OS entropy source, so
the process-wide RNG is never touched and never shared between requests.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Sequence

import torch
from flexserv_constraints import BlockedMasks, TokenMatcher

from flexserv_core import SamplingParams
from flexserv_transformers.engine_api import EngineToken
from flexserv_transformers.grammar import apply_blocked_masks

__all__ = ["SamplerState", "sample_next", "verify_draft"]


class SamplerState:
    """The per-sequence sampling state: parameters, generator, token counts."""

    __slots__ = ("bias", "counts", "eos", "generated", "generator", "grammar", "params", "seed", "seen")

    def __init__(
        self,
        params: SamplingParams,
        *,
        vocab_size: int,
        device: torch.device | str = "cpu",
        grammar: TokenMatcher | None = None,
        prompt_ids: Sequence[int] = (),
        eos_token_ids: Iterable[int] = (),
    ) -> None:
        """``prompt_ids`` feed ``repetition_penalty``; ``eos_token_ids`` are what
        ``min_tokens``/``ignore_eos`` hold back."""
        self.params = params
        self.grammar = grammar
        self.generated = 0
        #: tokens of the prompt and the output so far (``repetition_penalty`` only)
        self.seen: torch.Tensor | None = None
        if params.repetition_penalty != 1.0:
            self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
            seen = [t for t in prompt_ids if 0 <= t < vocab_size]
            if seen:
                self.seen[torch.tensor(seen, dtype=torch.long, device=device)] = True
        self.eos: torch.Tensor | None = None
        if params.suppresses_eos:
            eos = sorted(t for t in set(eos_token_ids) if 0 <= t < vocab_size)
            self.eos = torch.tensor(eos, dtype=torch.long, device=device) if eos else None
        self.bias: torch.Tensor | None = None
        if params.logit_bias:
            self.bias = torch.zeros(vocab_size, dtype=torch.float32, device=device)
            ids = torch.tensor([t for t in params.logit_bias if 0 <= t < vocab_size], dtype=torch.long, device=device)
            values = [v for t, v in params.logit_bias.items() if 0 <= t < vocab_size]
            self.bias[ids] = torch.tensor(values, dtype=torch.float32, device=device)
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.generator: torch.Generator | None = None
        if not params.greedy:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.seed)
        self.counts: torch.Tensor | None = None
        if params.presence_penalty or params.frequency_penalty:
            self.counts = torch.zeros(vocab_size, dtype=torch.float32, device=device)

    @property
    def uses_penalties(self) -> bool:
        return self.counts is not None

    @property
    def holds_eos(self) -> bool:
        """Whether the end-of-sequence tokens are masked at this step."""
        return self.eos is not None and (self.params.ignore_eos or self.generated < self.params.min_tokens)

    def observe(self, token_id: int) -> None:
        """Record a generated token (call once per token the sequence emits); it
        also advances the grammar, so state and tokens never diverge."""
        self.generated += 1
        if self.counts is not None:
            self.counts[token_id] += 1
        if self.seen is not None and 0 <= token_id < self.seen.shape[0]:
            self.seen[token_id] = True
        if self.grammar is not None:
            self.grammar.advance(token_id)


def _column(values: list[float], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=like.device).unsqueeze(1)


def _hold_eos(logits: torch.Tensor, states: Sequence[SamplerState]) -> torch.Tensor:
    """``-inf`` for the end-of-sequence tokens of the rows that hold them back, except
    in a row where nothing else would be left (a constraint that only allows the end)."""
    logits = logits.clone()
    for i, state in enumerate(states):
        if not state.holds_eos:
            continue
        assert state.eos is not None
        row = logits[i]
        kept = row[state.eos].clone()
        row[state.eos] = float("-inf")
        if not bool(torch.isfinite(row).any()):
            row[state.eos] = kept
    return logits


def _repetition_penalty(logits: torch.Tensor, states: Sequence[SamplerState]) -> torch.Tensor:
    """vLLM's (and transformers') repetition penalty, per row: a token already seen
    gets ``logit / penalty`` when positive, ``logit * penalty`` otherwise."""
    penalties = _column([s.params.repetition_penalty if s.seen is not None else 1.0 for s in states], logits)
    seen = torch.stack(
        [s.seen if s.seen is not None else torch.zeros_like(logits[0], dtype=torch.bool) for s in states]
    )
    penalised = torch.where(logits > 0, logits / penalties, logits * penalties)
    return torch.where(seen, penalised, logits)


def _filter_min_p(logits: torch.Tensor, min_p: list[float]) -> torch.Tensor:
    """``-inf`` for the tokens whose probability is below ``min_p`` x the row's most
    likely token's (``0`` = off): ``logit < max_logit + log(min_p)``."""
    floor = _column([math.log(p) if p > 0.0 else float("-inf") for p in min_p], logits)
    best = logits.max(dim=-1, keepdim=True).values
    return logits.masked_fill(logits < best + floor, float("-inf"))


def _filter_top_k_top_p(logits: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """Set to ``-inf`` what top-k (``0`` = off) and top-p (``1.0`` = off) remove, per row."""
    vocab = logits.shape[-1]
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    k = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=logits.device).unsqueeze(1)
    remove = ranks >= k
    if any(p < 1.0 for p in top_p):
        probs = sorted_logits.masked_fill(remove, float("-inf")).softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
        remove |= before >= _column([p if p < 1.0 else float("inf") for p in top_p], logits)
    remove[:, 0] = False  # always keep the most likely token
    return logits.scatter(-1, sorted_idx, sorted_logits.masked_fill(remove, float("-inf")))


def _process(logits: torch.Tensor, states: Sequence[SamplerState], masks: BlockedMasks | None) -> torch.Tensor:
    """Steps 0-2 of the module docstring: bias, grammar, held EOS, penalties, temperature."""
    logits = logits.float()
    params = [s.params for s in states]
    if any(s.bias is not None for s in states):
        zeros = torch.zeros(logits.shape[-1], dtype=torch.float32, device=logits.device)
        logits = logits + torch.stack([s.bias if s.bias is not None else zeros for s in states])
    if masks is not None or any(s.grammar is not None for s in states):
        logits = apply_blocked_masks(logits, [s.grammar for s in states], masks)
    if any(s.holds_eos for s in states):
        logits = _hold_eos(logits, states)
    if any(s.seen is not None for s in states):
        logits = _repetition_penalty(logits, states)
    if any(s.uses_penalties for s in states):
        zeros = torch.zeros(logits.shape[-1], dtype=torch.float32, device=logits.device)
        counts = torch.stack([s.counts if s.counts is not None else zeros for s in states])
        logits = logits - _column([p.frequency_penalty for p in params], logits) * counts
        logits = logits - _column([p.presence_penalty for p in params], logits) * (counts > 0)
    temperatures = [1.0 if p.greedy else p.temperature for p in params]
    if any(t != 1.0 for t in temperatures):
        logits = logits / _column(temperatures, logits)
    return logits


def _truncate(candidates: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Step 4's min-p, top-k and top-p filters over rows of sampled requests."""
    if any(p.min_p > 0.0 for p in params):
        candidates = _filter_min_p(candidates, [p.min_p for p in params])
    if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
        candidates = _filter_top_k_top_p(candidates, [p.top_k for p in params], [p.top_p for p in params])
    return candidates


@torch.inference_mode()
def sample_next(
    logits: torch.Tensor, states: Sequence[SamplerState], masks: BlockedMasks | None = None
) -> list[EngineToken]:
    """Pick one token per row of ``logits`` (``[batch, vocab]``, any float dtype).
    ``masks``: the rows' grammar masks if computed ahead (see :func:`.fill_blocked_masks`).

    Does not call :meth:`SamplerState.observe`; the engine does once it keeps the
    token. ``finish_reason`` of the results is ``None``; the engine sets it.
    """
    logits = _process(logits, states, masks)
    params = [s.params for s in states]
    chosen = logits.argmax(dim=-1)
    sampled_rows = [i for i, p in enumerate(params) if not p.greedy]
    if sampled_rows:
        rows = torch.tensor(sampled_rows, device=logits.device)
        candidates = _truncate(logits.index_select(0, rows), [params[i] for i in sampled_rows])
        probs = candidates.softmax(dim=-1)
        draws = [torch.multinomial(probs[j], 1, generator=states[i].generator) for j, i in enumerate(sampled_rows)]
        chosen = chosen.index_copy(0, rows, torch.cat(draws))
    return _tokens(logits, chosen, params)


def _tokens(logits: torch.Tensor, chosen: torch.Tensor, params: Sequence[SamplingParams]) -> list[EngineToken]:
    """The chosen ids as :class:`EngineToken`, with logprobs for the rows that asked."""
    token_ids: list[int] = chosen.tolist()
    want_logprobs = [p.logprobs or p.top_logprobs > 0 for p in params]
    if not any(want_logprobs):
        return [EngineToken(token_id=t) for t in token_ids]

    logprobs = logits.log_softmax(dim=-1)
    chosen_lp: list[float] = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1).tolist()
    n_top = max(p.top_logprobs for p in params)
    top_vals: list[list[float]] = []
    top_ids: list[list[int]] = []
    if n_top > 0:
        top = logprobs.topk(n_top, dim=-1)
        top_vals, top_ids = top.values.tolist(), top.indices.tolist()
    out = []
    for i, (token_id, p) in enumerate(zip(token_ids, params, strict=True)):
        if not want_logprobs[i]:
            out.append(EngineToken(token_id=token_id))
            continue
        top_pairs = (
            list(zip(top_ids[i][: p.top_logprobs], top_vals[i][: p.top_logprobs], strict=True))
            if p.top_logprobs
            else None
        )
        out.append(EngineToken(token_id=token_id, logprob=chosen_lp[i], top_logprobs=top_pairs))
    return out


def _positions_independent(state: SamplerState, draft_len: int) -> bool:
    """Whether every position of a draft is processed alike, whatever is kept before
    it: no penalties (they count the kept tokens), no grammar, and end-of-sequence
    tokens held back at all positions or at none (``min_tokens`` not crossed)."""
    if state.grammar is not None or state.counts is not None or state.seen is not None:
        return False
    if state.eos is None or state.params.ignore_eos:
        return True
    generated, floor = state.generated, state.params.min_tokens
    return generated >= floor or generated + draft_len < floor


@torch.inference_mode()
def verify_draft(
    logits: torch.Tensor, state: SamplerState, draft: Sequence[int], *, limit: int, stop_ids: frozenset[int]
) -> tuple[list[EngineToken], int]:
    """Verify a speculative ``draft`` of one sequence (see ``engine.speculative``).

    ``logits`` (``[len(draft) + 1, vocab]``) are the model's at the sequence's last
    known token and at each draft token. Position ``j`` is processed exactly as
    :func:`sample_next` processes a row, with the state advanced by the tokens kept
    before it (penalties see them); then a greedy sequence keeps the draft token
    while it is the argmax, and a sampled one keeps draft token ``x`` with
    probability ``p(x)`` (``p``: the distribution :func:`sample_next` draws from)
    and otherwise draws from ``p`` without ``x``, renormalised: the standard
    speculative-sampling rule for a deterministic draft, which leaves the output's
    distribution unchanged. Verification stops at the first token that differs from
    the draft, after the token past the whole draft, at a token in ``stop_ids``, or
    after ``limit`` tokens.

    A greedy draft without logprobs whose positions do not depend on each other
    (:func:`_positions_independent`: no penalties; the usual case) is verified in
    one pass: every position's logits processed and argmaxed at once, read back in
    one call, and one accept loop over plain ints. Anything else (sampled,
    logprobs, penalties) goes position by position, which stops at the first
    rejection. Measured on CPU with SmolLM2's 49k vocabulary (docs/benchmarks.md,
    issue 29), the one pass costs what the stepwise loop costs for a draft accepted
    whole (~1.3 ms for 32 tokens: converting and scanning the rows dominates, not
    per-position overhead), and batching sampled or logprob rows was slower (rows
    past the first rejection, and a block of rows that no longer fits in cache).

    Returns the kept tokens (each observed, unlike :func:`sample_next`) and how
    many of them are draft tokens accepted.
    """
    params = state.params
    if not params.greedy or params.logprobs or params.top_logprobs > 0 or not _positions_independent(state, len(draft)):
        return _verify_stepwise(logits, state, draft, limit=limit, stop_ids=stop_ids)
    k = len(draft)
    picks: list[int] = _process(logits[: k + 1], [state] * (k + 1), None).argmax(dim=-1).tolist()
    kept: list[int] = []
    accepted = 0
    for j, token in enumerate(picks):
        kept.append(token)
        if j == k or token != draft[j]:
            break
        accepted += 1
        if token in stop_ids or len(kept) >= limit:
            break
    for token_id in kept:
        state.observe(token_id)
    return [EngineToken(token_id=t) for t in kept], accepted


def _verify_stepwise(
    logits: torch.Tensor, state: SamplerState, draft: Sequence[int], *, limit: int, stop_ids: frozenset[int]
) -> tuple[list[EngineToken], int]:
    """:func:`verify_draft` one position at a time: sampled drafts, and states whose
    processing depends on the tokens kept before (penalties, ``min_tokens`` crossed)."""
    params = [state.params]
    out: list[EngineToken] = []
    accepted = 0
    for j in range(len(draft) + 1):
        row = _process(logits[j : j + 1], [state], None)
        x = draft[j] if j < len(draft) else None
        if state.params.greedy:
            chosen = row.argmax(dim=-1)
        else:
            probs = _truncate(row, params).softmax(dim=-1)[0]
            if x is not None and float(torch.rand((), generator=state.generator, device=probs.device)) < float(
                probs[x]
            ):
                chosen = torch.tensor([x], device=row.device)
            else:
                if x is not None:
                    probs[x] = 0.0  # p(x) < 1 here, so something else is left
                chosen = torch.multinomial(probs, 1, generator=state.generator)
        token = _tokens(row, chosen, params)[0]
        out.append(token)
        state.observe(token.token_id)
        if token.token_id != x:
            break
        accepted += 1
        if token.token_id in stop_ids or len(out) >= limit:
            break
    return out, accepted
