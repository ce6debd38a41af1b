"""The ``flexserv`` command line."""
