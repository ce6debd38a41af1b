"""Continuous batching with a paged KV cache and prefix caching.

``engine.PagedEngine`` is the engine (``--transformers-engine paged``); ``settings.EngineSettings``
its settings. Nothing is imported here, so reading the settings stays cheap (no torch).
"""
