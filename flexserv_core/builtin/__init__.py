"""Built-in plugins registered through the plugin manager like any other."""
