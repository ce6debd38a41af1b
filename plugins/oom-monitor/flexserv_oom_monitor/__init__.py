"""FlexServ OOM monitor: evicts models when RAM or VRAM use crosses a threshold."""

from flexserv_oom_monitor.monitor import Eviction, OomMonitor, Reading
from flexserv_oom_monitor.settings import OomMonitorSettings

__all__ = ["Eviction", "OomMonitor", "OomMonitorSettings", "Reading"]
