"""FlexServ on Ray Serve: ``flexserv ray-serve`` runs the FlexServ app as Ray Serve replicas."""

__all__: list[str] = []
