"""Developer tools of the core (not part of the plugin API)."""
