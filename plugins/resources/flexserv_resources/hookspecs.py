"""The hook this library owns: ``flexserv_resource_probes``.

The distribution declares this module in the entry-point group
``flexserv.hookspecs``, so every FlexServ plugin manager knows the hook once
flexserv-resources is installed (even with ``-p no:resources``: a probe plugin
still registers; its probes are then read only by what asks for them, such as the
OOM monitor). The README documents the hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexserv_core import hookspec

if TYPE_CHECKING:
    from flexserv_core import Settings
    from flexserv_resources.readings import ResourceProbe


@hookspec
def flexserv_resource_probes(settings: Settings) -> list[ResourceProbe] | None:
    """Provide probes that read GPU, CPU and memory usage.

    Called once per server, the first time something asks for its probes
    (:func:`flexserv_resources.probes_of`: the ``resources`` plugin at start-up, the
    OOM monitor). :mod:`flexserv_resources.readings` asks the probes in call order
    and takes, for each of GPU, CPU and memory, the first probe's reading that is
    not ``None``. Close what a probe holds in ``flexserv_shutdown``.

    :param settings: all resolved settings.

    Collect all; synchronous; return a list of :class:`~flexserv_resources.ResourceProbe`.
    """
