"""The built-in transformers text-generation backend (a default plugin)."""
