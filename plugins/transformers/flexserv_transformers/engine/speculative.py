"""Prompt-lookup (n-gram) speculative decoding: drafts, and how long they get.

A decoding sequence whose last few tokens (an n-gram, the longest of
``MAX_NGRAM`` down to ``MIN_NGRAM``) occurred earlier in its prompt or output
proposes the tokens that followed that earlier occurrence (the most recent one)
as a *draft*. The scheduler runs the draft as extra query positions of the
sequence in the same step (a small prefill chunk: its K/V is written like any
other), and the engine verifies it from the logits of every position
(:func:`flexserv_transformers.sampling.verify_draft`): the accepted tokens, plus
one token sampled where verification stopped, are emitted; the K/V of rejected
positions is left behind ``num_computed`` (overwritten later, never read, never
registered in the prefix cache: only full blocks below ``num_computed`` are) and
the blocks past it are given back.

Copy-, extract- and edit-style requests repeat long runs of their prompt, so
most drafted tokens are accepted and a step emits several tokens for about the
cost of one (a decode step reads every weight once; a few more query positions
cost little more on a memory-bound CPU or GPU). Where drafts do not pay, they are
shortened and then stopped (:class:`DraftState`).

Which sequences never speculate (a deliberate rule, tested):

* a constrained sequence (``response_format``/tools grammar): its matcher would
  have to be advanced and a mask computed per drafted position;
* a seeded sampled sequence (``seed`` with ``temperature > 0``): verification draws
  from its generator a varying number of times, depending on how long its drafts are,
  which depends on what else is in the step; without drafts a seed gives the same
  tokens whatever the load, and the same as with speculation off;
* a sequence whose next token is the last one it may generate.

Requests with logprobs, penalties, logit bias or ``n > 1`` do speculate: each
position is processed as the sampler processes a row, with the state advanced by
the tokens kept before it.

Greedy output is token for token the output without speculation (a draft token is
accepted while it is the argmax), and sampled output has the same distribution
(a draft token ``x`` is accepted with probability ``p(x)``, else a token is drawn
from ``p`` without ``x``; ``p`` is the distribution the normal sampler draws from,
after penalties, temperature, min-p, top-k and top-p).

Runs on the engine thread only.
"""

from __future__ import annotations

# The drafts and their adaptive length are the batching library's, shared with the
# llama.cpp engine; this module keeps the paged engine's rules above.
from flexserv_batching import DraftState, may_speculate, propose

__all__ = ["DraftState", "may_speculate", "propose"]
