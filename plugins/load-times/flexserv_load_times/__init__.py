"""FlexServ's load-times plugin: what each model's first request will wait for."""
