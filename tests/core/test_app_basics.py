from flexserv_core.testing.fakes import FakeBackendPlugin


async def test_health_and_errors(flexserv_client):
    r = await flexserv_client.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = await flexserv_client.get("/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    r = await flexserv_client.get("/v1/flexserv/info")
    assert r.status_code == 200, r.text
    r = await flexserv_client.delete("/health")
    assert r.status_code == 405, r.text
    assert r.json()["error"]["code"] == "method_not_allowed"


async def test_fake_model_registry():
    from flexserv_core.backends.base import TextGenerationModel
    from flexserv_core.testing.app import app_client, make_app

    plugin = FakeBackendPlugin(load_delay=0.2)
    app = make_app([plugin])
    async with app_client(app) as client:
        server = app.state.flexserv
        import asyncio

        async def use():
            async with server.registry.acquire("fake-model", TextGenerationModel) as lease:
                return lease.model

        a, b = await asyncio.gather(use(), use())
        assert a is b and plugin.backend.loads == 1
        r = await client.get("/v1/flexserv/models/loaded")
        assert r.json()["models"][0]["model_id"] == "fake-model"
        r = await client.post("/v1/flexserv/models/unload", json={})
        assert r.json()["unloaded"][0]["was_loaded"] is True, r.text
        r = await client.get("/v1/models")
        assert r.json()["data"][0]["id"] == "fake-model"
