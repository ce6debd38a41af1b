"""The typed classes backends implement (see :mod:`flexserv_core.backends.base`)."""
