"""An ``image_url`` -> a decoded :class:`ImageInput`, within the operator's limits.

* ``data:`` URLs (``data:image/png;base64,...``) are always accepted, up to
  ``--image-input-max-bytes`` decoded bytes.
* ``http(s)`` URLs are fetched only from the hosts ``--image-input-url-hosts`` lists
  (none by default, so fetching is off), within ``--image-input-max-bytes`` and
  ``--image-input-fetch-timeout`` (the whole fetch, redirects included). Every address
  a host resolves to must be public (not loopback, private, link-local, reserved
  or multicast) unless ``--image-input-url-allow-private``, and the connection goes to
  one of the addresses checked (the name is resolved once: no DNS rebinding,
  :mod:`.pinned_transport`); redirects are followed by
  hand, at most ``--image-input-max-redirects``, each hop checked like the first.
* The bytes are decoded with Pillow (PNG, JPEG, WebP, GIF, BMP): the header's
  size is checked against ``--image-input-max-pixels`` before any pixel is decoded, so
  a small file that inflates to gigabytes (a decompression bomb) is refused.

Every failure is an :class:`InvalidRequest` (400) naming the content part.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import io
import ipaddress
import warnings
from typing import TYPE_CHECKING, Annotated
from urllib.parse import unquote_to_bytes, urljoin, urlsplit

import msgspec

from flexserv_core import ImageInput, InvalidRequest

if TYPE_CHECKING:
    from flexserv_image_input.pinned_transport import AddressCheck

#: Formats Pillow may decode (a short list: less parser surface).
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


class ImageSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where images may come from and how large they may be (the ``image-input`` plugin).

    Each setting keeps its earlier unprefixed name as an alias (``--image-url-hosts``...).
    """

    image_input_url_hosts: Annotated[
        list[str],
        msgspec.Meta(
            description="Fetch http(s) image URLs from these hosts ('*.example.com' for subdomains, '*' for any);"
            " repeatable. Empty (the default): only data: URLs are accepted.",
            extra={"metavar": "HOST", "aliases": ["image_url_hosts"]},
        ),
    ] = msgspec.field(default_factory=list)
    image_input_url_allow_private: Annotated[
        bool,
        msgspec.Meta(
            description="Let image URLs (and their redirects) reach loopback, private and link-local addresses.",
            extra={"aliases": ["image_url_allow_private"]},
        ),
    ] = False
    image_input_max_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Largest image, in encoded bytes (data: URL or fetched).",
            extra={"aliases": ["image_max_bytes"]},
        ),
    ] = 10 * 2**20
    image_input_max_pixels: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Largest image, in pixels (width x height), checked before decoding.",
            extra={"aliases": ["image_max_pixels"]},
        ),
    ] = 32 * 2**20
    image_input_fetch_timeout: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Seconds one image URL may take to fetch, redirects included.",
            extra={"aliases": ["image_fetch_timeout"]},
        ),
    ] = 10.0
    image_input_max_redirects: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Most redirects an image URL may take (each one checked again).",
            extra={"aliases": ["image_max_redirects"]},
        ),
    ] = 3


def _bad(message: str, param: str, code: str = "invalid_image") -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)


async def load_image(url: str, settings: ImageSettings, param: str) -> ImageInput:
    """Fetch (or unpack) and decode the image ``url`` names; ``param`` names it in errors."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        data = data_url_bytes(url, settings.image_input_max_bytes, param)
    elif scheme in ("http", "https"):
        if not settings.image_input_url_hosts:
            raise _bad(
                "Image URLs are not fetched by this server; send the image inline as a data: URL"
                " (data:image/png;base64,...). The operator can allow hosts with --image-input-url-hosts.",
                param,
                "image_url_not_allowed",
            )
        data = await fetch_image(url, settings, param)
    else:
        raise _bad("An image URL must be a data: URL or an http(s) URL.", param, "invalid_image_url")
    return await asyncio.to_thread(decode_image, data, settings.image_input_max_pixels, param)


# --- data: URLs -------------------------------------------------------------------------


def data_url_bytes(url: str, max_bytes: int, param: str) -> bytes:
    """The bytes of a ``data:`` URL (base64 or percent-encoded), at most ``max_bytes``."""
    header, sep, payload = url.partition(",")
    if not sep:
        raise _bad("A data: URL needs a ',' before its data.", param, "invalid_image_url")
    media, *flags = header[len("data:") :].split(";")
    if media and not media.lower().startswith("image/"):
        raise _bad(f"A data: URL's media type must be an image type, not {media[:40]!r}.", param)
    if "base64" in (f.lower() for f in flags):
        # 4 characters carry 3 bytes: refuse before decoding what is clearly too large
        if len(payload) // 4 * 3 > max_bytes + 3:
            raise _too_large(max_bytes, param)
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise _bad("The data: URL's base64 data is not valid base64.", param) from None
    else:
        data = unquote_to_bytes(payload)
    if len(data) > max_bytes:
        raise _too_large(max_bytes, param)
    if not data:
        raise _bad("The data: URL holds no data.", param)
    return data


def _too_large(max_bytes: int, param: str) -> InvalidRequest:
    return _bad(f"The image is larger than this server's limit of {max_bytes} bytes (--image-input-max-bytes).", param)


# --- http(s) URLs -----------------------------------------------------------------------


def host_allowed(host: str, allowed: list[str]) -> bool:
    """``host`` matches an entry: equal (case-insensitive), ``*``, or ``*.domain`` for its subdomains."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().rstrip(".")
        if entry == "*" or entry == host or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
    return False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _check_target(url: str, settings: ImageSettings, param: str) -> None:
    """Scheme and host allow-list (the addresses are checked when connecting: :func:`_address_check`)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise _bad("An image URL must be an http(s) URL with a host.", param, "invalid_image_url")
    host = parts.hostname
    if not host_allowed(host, settings.image_input_url_hosts):
        raise _bad(
            f"Images are not fetched from the host {host[:100]!r} (not in --image-input-url-hosts).",
            param,
            "image_url_not_allowed",
        )


def _address_check(settings: ImageSettings, param: str) -> AddressCheck:
    """Public addresses only (unless ``--image-input-url-allow-private``), checked on the
    addresses the connection will use (see :mod:`.pinned_transport`)."""

    async def check(host: str, addresses: list[str]) -> None:
        if settings.image_input_url_allow_private:
            return
        if not addresses or not all(_public(address) for address in addresses):
            raise _bad(
                f"The image URL's host {host[:100]!r} resolves to a private, loopback or link-local address; such"
                " URLs are refused (--image-input-url-allow-private allows them).",
                param,
                "image_url_not_allowed",
            )

    return check


async def fetch_image(url: str, settings: ImageSettings, param: str) -> bytes:
    """GET ``url`` within the limits of ``settings`` (see the module docstring)."""
    try:
        async with asyncio.timeout(settings.image_input_fetch_timeout):
            return await _fetch(url, settings, param)
    except TimeoutError:
        raise _bad(
            f"Fetching the image took longer than {settings.image_input_fetch_timeout:g} s (--image-input-fetch-timeout).",
            param,
            "image_fetch_failed",
        ) from None


async def _fetch(url: str, settings: ImageSettings, param: str) -> bytes:
    # Imported here: httpx and httpcore are ~0.1 s of every server's start-up, and most
    # servers never fetch an image.
    import httpx

    from flexserv_image_input.pinned_transport import PinnedTransport

    limit = settings.image_input_max_bytes
    # trust_env=False: no proxy from the environment, which would bypass the address checks;
    # the transport connects only to addresses it resolved and checked (no DNS rebinding)
    transport = PinnedTransport(_address_check(settings, param))
    async with httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False) as client:
        for _hop in range(settings.image_input_max_redirects + 1):
            _check_target(url, settings, param)
            try:
                async with client.stream("GET", url, headers={"Accept": "image/*"}) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise _bad("The image URL redirected without a Location.", param, "image_fetch_failed")
                        url = urljoin(url, location)
                        continue
                    if response.status_code != 200:
                        raise _bad(
                            f"Fetching the image failed: HTTP {response.status_code}.", param, "image_fetch_failed"
                        )
                    declared = response.headers.get("content-length")
                    if declared is not None and declared.isdigit() and int(declared) > limit:
                        raise _too_large(limit, param)
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > limit:
                            raise _too_large(limit, param)
                    return bytes(body)
            except httpx.HTTPError as exc:
                raise _bad(
                    f"Fetching the image failed: {type(exc).__name__}: {exc}", param, "image_fetch_failed"
                ) from None
    raise _bad(
        f"The image URL redirected more than {settings.image_input_max_redirects} times (--image-input-max-redirects).",
        param,
        "image_fetch_failed",
    )


# --- decoding ---------------------------------------------------------------------------


def decode_image(data: bytes, max_pixels: int, param: str) -> ImageInput:
    """Decode ``data`` into an RGB image after checking its declared size (blocking)."""
    from PIL import Image, UnidentifiedImageError

    digest = hashlib.sha256(data).hexdigest()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own bound applies
            image = Image.open(io.BytesIO(data), formats=FORMATS)
            if image.width * image.height > max_pixels:
                raise _bad(
                    f"The image is {image.width}x{image.height} pixels; this server accepts at most {max_pixels}"
                    " pixels (--image-input-max-pixels).",
                    param,
                )
            rgb = image.convert("RGB")  # decodes (the first frame of an animation)
    except InvalidRequest:
        raise
    except Image.DecompressionBombError:
        raise _bad(f"The image has more than {max_pixels} pixels (--image-input-max-pixels).", param) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise _bad(
            f"The image could not be decoded ({', '.join(FORMATS)} are accepted): {type(exc).__name__}.", param
        ) from None
    return ImageInput(image=rgb, digest=digest)
