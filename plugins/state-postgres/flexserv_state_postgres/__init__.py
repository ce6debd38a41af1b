"""FlexServ's state layer on PostgreSQL (``--state-url postgresql://...``)."""
