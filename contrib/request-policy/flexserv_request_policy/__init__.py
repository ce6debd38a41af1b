"""Server-side caps and defaults for generation requests (an example plugin)."""
