"""One probe per source of hardware facts; see :class:`flexserv_resources.readings.ResourceProbe`."""
