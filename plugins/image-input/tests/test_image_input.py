"""Image URLs -> decoded images: data: URLs, and http(s) fetching within the
operator's limits, against a real HTTP server on loopback (the test's own)."""

from __future__ import annotations

import base64
import hashlib
import io
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import openai
import pytest
from flexserv_image_input import load as image_input
from flexserv_image_input.load import ImageSettings, decode_image, host_allowed, load_image
from PIL import Image

from flexserv_core import InvalidRequest

PARAM = "messages[0].content[1].image_url.url"


def png(size: tuple[int, int] = (40, 30), color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def settings(**changes: Any) -> ImageSettings:
    return msgspec.structs.replace(ImageSettings(), **changes)


async def refused(url: str, config: ImageSettings, code: str = "invalid_image") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        await load_image(url, config, PARAM)
    assert info.value.param == PARAM and info.value.code == code, (info.value.code, info.value.message)
    return info.value


# --- data: URLs and decoding --------------------------------------------------------------


async def test_data_url_decodes_to_rgb_with_the_digest_of_its_bytes() -> None:
    data = png((40, 30))
    image = await load_image(data_url(data), ImageSettings(), PARAM)
    assert (image.width, image.height) == (40, 30) and image.image.mode == "RGB"
    assert image.image.getpixel((3, 3)) == (200, 30, 30)
    assert image.digest == hashlib.sha256(data).hexdigest()
    other = await load_image(data_url(png(color=(0, 0, 255))), ImageSettings(), PARAM)
    assert other.digest != image.digest


@pytest.mark.parametrize(
    ("url", "fragment", "code"),
    [
        ("data:image/png;base64,@@@not base64@@@", "not valid base64", "invalid_image"),
        ("data:text/plain;base64,aGVsbG8=", "image type", "invalid_image"),
        ("data:image/png;base64", "','", "invalid_image_url"),
        ("data:image/png;base64,", "no data", "invalid_image"),
        (data_url(b"just some text, not a picture"), "could not be decoded", "invalid_image"),
        ("ftp://example.com/cat.png", "data: URL or an http(s) URL", "invalid_image_url"),
    ],
)
async def test_bad_data_urls_are_400_naming_the_part(url: str, fragment: str, code: str) -> None:
    error = await refused(url, ImageSettings(), code=code)
    assert fragment in error.message, error.message


async def test_byte_and_pixel_bounds() -> None:
    data = png((64, 64))
    error = await refused(data_url(data), settings(image_input_max_bytes=len(data) - 1))
    assert "--image-input-max-bytes" in error.message
    assert (await load_image(data_url(data), settings(image_input_max_bytes=len(data)), PARAM)).width == 64
    error = await refused(data_url(data), settings(image_input_max_pixels=64 * 64 - 1))
    assert "64x64" in error.message and "--image-input-max-pixels" in error.message


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    """20000x20000 of one colour compresses to a few hundred KB; the bound is checked
    before any pixel is decoded, so this costs no 1.2 GB of memory."""
    buf = io.BytesIO()
    Image.new("L", (20_000, 20_000)).save(buf, "PNG", optimize=False)
    data = buf.getvalue()
    assert len(data) < 2 * 2**20
    started = time.perf_counter()
    with pytest.raises(InvalidRequest) as info:
        decode_image(data, ImageSettings().image_input_max_pixels, PARAM)
    assert "pixels" in info.value.message and time.perf_counter() - started < 2


def test_host_allow_list() -> None:
    assert host_allowed("images.example.com", ["images.example.com"])
    assert host_allowed("IMAGES.example.com.", ["images.example.com"])
    assert host_allowed("a.b.example.com", ["*.example.com"])
    assert not host_allowed("example.com", ["*.example.com"])
    assert not host_allowed("evil-example.com", ["*.example.com"])
    assert host_allowed("anything.org", ["*"])
    assert not host_allowed("example.org", [])


# --- http(s) URLs against a local server --------------------------------------------------

IMAGE = png((48, 40), (10, 200, 10))


class _Handler(BaseHTTPRequestHandler):
    #: ``(path, Host header)`` of every request served.
    seen: list[tuple[str, str | None]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path
        self.seen.append((path, self.headers.get("Host")))
        if path == "/cat.png":
            self._send(IMAGE)
        elif path == "/big.png":
            self._send(IMAGE + b"\0" * 200_000)
        elif path == "/big-chunked.png":  # no Content-Length: the reader's own count stops it
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"\0" * 65536
            for _ in range(8):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/slow.png":  # trickles bytes: only an overall deadline stops it
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            for byte in IMAGE[:40]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
        elif path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", path.split("=", 1)[1])
            self.end_headers()
        elif path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def image_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


LOCAL = {"image_input_url_hosts": ["127.0.0.1"], "image_input_url_allow_private": True}


async def test_urls_are_not_fetched_by_default(image_server: str) -> None:
    error = await refused(f"{image_server}/cat.png", ImageSettings(), code="image_url_not_allowed")
    assert "data: URL" in error.message and "--image-input-url-hosts" in error.message


async def test_an_allowed_local_url_is_fetched(image_server: str) -> None:
    image = await load_image(f"{image_server}/cat.png", settings(**LOCAL), PARAM)
    assert image.digest == hashlib.sha256(IMAGE).hexdigest() and (image.width, image.height) == (48, 40)


async def test_hosts_outside_the_allow_list_are_refused(image_server: str) -> None:
    port = image_server.rsplit(":", 1)[1]
    await refused(f"http://localhost:{port}/cat.png", settings(**LOCAL), code="image_url_not_allowed")


async def test_loopback_is_refused_unless_private_addresses_are_allowed(image_server: str) -> None:
    port = image_server.rsplit(":", 1)[1]
    config = settings(image_input_url_hosts=["*"])
    error = await refused(f"{image_server}/cat.png", config, code="image_url_not_allowed")
    assert "private, loopback or link-local" in error.message
    # a name that resolves to loopback is refused as well
    await refused(f"http://localhost:{port}/cat.png", config, code="image_url_not_allowed")


@pytest.mark.parametrize("path", ["/big.png", "/big-chunked.png"])
async def test_fetches_are_bounded_in_bytes(image_server: str, path: str) -> None:
    error = await refused(f"{image_server}{path}", settings(**LOCAL, image_input_max_bytes=100_000))
    assert "--image-input-max-bytes" in error.message


async def test_fetches_are_bounded_in_time(image_server: str) -> None:
    started = time.perf_counter()
    error = await refused(
        f"{image_server}/slow.png", settings(**LOCAL, image_input_fetch_timeout=0.5), code="image_fetch_failed"
    )
    assert "--image-input-fetch-timeout" in error.message
    assert time.perf_counter() - started < 2.5


async def test_http_errors_and_redirect_loops(image_server: str) -> None:
    error = await refused(f"{image_server}/missing.png", settings(**LOCAL), code="image_fetch_failed")
    assert "HTTP 404" in error.message
    error = await refused(f"{image_server}/loop", settings(**LOCAL), code="image_fetch_failed")
    assert "redirected more than 3 times" in error.message


async def test_each_redirect_is_checked_again(image_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redirect from an allowed host to one outside the allow-list is refused; and
    (with this machine's loopback server standing in for a public one, since no
    public server is reachable here) a redirect to a private address is refused."""
    port = image_server.rsplit(":", 1)[1]
    ok = f"{image_server}/redirect?to=/cat.png"
    assert (await load_image(ok, settings(**LOCAL), PARAM)).digest == hashlib.sha256(IMAGE).hexdigest()
    elsewhere = f"{image_server}/redirect?to=http://localhost:{port}/cat.png"
    await refused(elsewhere, settings(**LOCAL), code="image_url_not_allowed")

    real_public = image_input._public
    monkeypatch.setattr(image_input, "_public", lambda address: address == "127.0.0.1" or real_public(address))
    public_only = settings(image_input_url_hosts=["*"])
    assert (await load_image(ok, public_only, PARAM)).width == 48  # 127.0.0.1 now counts as public
    for private in (f"http://127.0.0.2:{port}/cat.png", "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/"):
        error = await refused(f"{image_server}/redirect?to={private}", public_only, code="image_url_not_allowed")
        assert "private, loopback or link-local" in error.message


# --- through the API: a text-only model -----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_only_model_answers_image_parts_with_a_400_naming_it(flexserv_openai: Any, stream: bool) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": data_url(IMAGE)}},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError) as info:
        await flexserv_openai.chat.completions.create(model="fake-model", messages=messages, stream=stream)
    body = info.value.body
    assert body["code"] == "image_input_not_supported" and body["param"] == "messages[0].content[1]"
    assert "'fake-model'" in body["message"]

    with pytest.raises(openai.BadRequestError) as info:
        await flexserv_openai.responses.create(
            model="fake-model",
            stream=stream,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": data_url(IMAGE), "detail": "auto"},
                    ],
                }
            ],
        )
    body = info.value.body
    assert body["code"] == "image_input_not_supported" and body["param"] == "input[0].content[1]"
    assert "'fake-model'" in body["message"]


# --- DNS rebinding: the connection goes to the address that was checked ------------------


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[str]:
    """Resolve each name in ``answers`` to its next address (the last one repeats);
    returns the names looked up, in order. Other names resolve as usual."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host  # anyio passes IDNA-encoded bytes
        if name not in answers:
            return real(host, port, *args, **kwargs)
        asked.append(name)
        queue = answers[name]
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def treat_as_public(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    """No public server is reachable here: let one loopback address stand in for one."""
    real_public = image_input._public
    monkeypatch.setattr(image_input, "_public", lambda a: a == address or real_public(a))


async def test_a_rebinding_name_cannot_move_the_connection_to_a_private_address(
    image_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name answers the check with a "public" address (127.0.0.2, where nothing
    listens) and any later lookup with loopback, where the image server listens:
    the fetch must connect to the checked address and so never reach the server."""
    port = image_server.rsplit(":", 1)[1]
    treat_as_public(monkeypatch, "127.0.0.2")
    asked = fake_dns(monkeypatch, {"rebind.test": ["127.0.0.2", "127.0.0.1"]})
    served = len(_Handler.seen)
    error = await refused(
        f"http://rebind.test:{port}/cat.png", settings(image_input_url_hosts=["rebind.test"]), code="image_fetch_failed"
    )
    assert "ConnectError" in error.message, error.message
    assert asked == ["rebind.test"]  # resolved once, by the check that connects
    assert len(_Handler.seen) == served  # the loopback server was never reached


async def test_the_checked_address_is_used_with_the_name_in_the_host_header(
    image_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = image_server.rsplit(":", 1)[1]
    treat_as_public(monkeypatch, "127.0.0.1")
    asked = fake_dns(monkeypatch, {"images.test": ["127.0.0.1"]})
    image = await load_image(
        f"http://images.test:{port}/cat.png", settings(image_input_url_hosts=["images.test"]), PARAM
    )
    assert image.digest == hashlib.sha256(IMAGE).hexdigest()
    assert asked == ["images.test"]
    assert _Handler.seen[-1] == ("/cat.png", f"images.test:{port}")
    # a name resolving to loopback (not treated as public) is refused before any connection
    served = len(_Handler.seen)
    fake_dns(monkeypatch, {"inside.test": ["127.0.0.3"]})
    error = await refused(
        f"http://inside.test:{port}/cat.png", settings(image_input_url_hosts=["*"]), code="image_url_not_allowed"
    )
    assert "'inside.test'" in error.message and len(_Handler.seen) == served


@pytest.mark.parametrize("order", ["public first", "private first"])
async def test_a_host_resolving_to_a_public_and_a_private_address_is_refused(
    image_server: str, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """One answer with two addresses: 127.0.0.2 standing in for a public one, and
    loopback, where the image server listens. Either order, the host is refused
    before any connection: a client could otherwise fall back to the private one."""
    port = int(image_server.rsplit(":", 1)[1])
    treat_as_public(monkeypatch, "127.0.0.2")
    addresses = ["127.0.0.2", "127.0.0.1"] if order == "public first" else ["127.0.0.1", "127.0.0.2"]
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name != "both.test":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, int(port))) for a in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    served = len(_Handler.seen)
    error = await refused(
        f"http://both.test:{port}/cat.png", settings(image_input_url_hosts=["*"]), code="image_url_not_allowed"
    )
    assert "'both.test'" in error.message and "private" in error.message
    assert len(_Handler.seen) == served  # nothing was fetched
