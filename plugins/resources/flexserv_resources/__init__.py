"""FlexServ resource probes (NVML, Apple MPS, psutil) and the resources route."""

from flexserv_resources.probes.mps import MpsProbe
from flexserv_resources.probes.nvml import NvmlProbe
from flexserv_resources.probes.psutil_probe import PsutilProbe

__all__ = ["MpsProbe", "NvmlProbe", "PsutilProbe"]
