"""``flexserv bench``: a streaming load generator for any OpenAI-compatible server.

Modules: :mod:`.dataset` (prompts, shared prefix), :mod:`.client` (one streamed
request, timed), :mod:`.loadgen` (a concurrency level), :mod:`.stats`
(percentiles, per-level summary), :mod:`.report` (text and JSON), :mod:`.cli`.
"""
