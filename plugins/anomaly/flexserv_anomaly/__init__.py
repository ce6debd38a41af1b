"""FlexServ anomaly detection: the ``anomaly`` model kind and its ``/v1/anomaly/`` routes."""
