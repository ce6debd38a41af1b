"""The app leaves out Litestar's pydantic and attrs plugins unless a plugin's routes need them.

Litestar adds both whenever the libraries are installed, and importing them is
part of every start-up. FlexServ's routes are msgspec; a plugin whose routes use
pydantic has imported it before the app is built, and then keeps Litestar's
default. A Litestar release that renamed the method FlexServApp overrides would
fail the first test (pydantic would be imported again).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pydantic
from litestar import post
from litestar.params import JSONBody
from litestar.plugins.pydantic import PydanticPlugin

from flexserv_core import hookimpl
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CHECK_IN_A_FRESH_PROCESS = """
import json, sys
from flexserv_core.testing import FakeBackendPlugin, make_app
app = make_app([FakeBackendPlugin()])
print(json.dumps({
    "imported": sorted(name for name in ("pydantic", "attrs", "attr") if name in sys.modules),
    "plugins": [type(plugin).__name__ for plugin in app.plugins],
}))
"""


def test_an_app_of_msgspec_routes_imports_neither_pydantic_nor_attrs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK_IN_A_FRESH_PROCESS], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["imported"] == []
    assert "MsgspecDIPlugin" in found["plugins"]
    assert not any(name.startswith(("Pydantic", "Attrs")) for name in found["plugins"])


class Reading(pydantic.BaseModel):
    celsius: float


class PydanticRoutes:
    @hookimpl
    def flexserv_register_routes(self, settings: Any) -> list[Any]:
        @post("/v1/thermo/fahrenheit", sync_to_thread=False)
        def fahrenheit(data: JSONBody[Reading]) -> dict[str, float]:
            return {"fahrenheit": data.celsius * 9 / 5 + 32}

        return [fahrenheit]


async def test_a_plugin_route_typed_with_pydantic_still_works() -> None:
    app = make_app([FakeBackendPlugin(), PydanticRoutes()])
    assert any(isinstance(plugin, PydanticPlugin) for plugin in app.plugins)
    async with app_client(app) as client:
        r = await client.post("/v1/thermo/fahrenheit", json={"celsius": 100})
        assert r.status_code == 201 and r.json() == {"fahrenheit": 212.0}
        r = await client.post("/v1/thermo/fahrenheit", json={"celsius": "hot"})
        assert r.status_code == 400 and "error" in r.json()
