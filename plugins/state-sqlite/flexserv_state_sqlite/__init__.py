"""FlexServ's default state store: one SQLite file (``--state-url sqlite:///PATH``)."""
