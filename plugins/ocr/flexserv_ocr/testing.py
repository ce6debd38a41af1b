"""Documents generated for tests and benchmarks: rendered text images and PDFs.

Everything is drawn here with Pillow and the DejaVu/Liberation fonts Debian
ships, or written with fpdf2, so the expected text is known exactly.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/truetype/liberation"))
FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "LiberationSans-Regular.ttf")

INVOICE_LINES = [
    "Invoice 2026 total 42.50",
    "Due date: 2026-12-31 Ref INV-0042",
    "Acme Widgets Ltd, 12 Harbour Road",
    "Quantity 7 at 6.07 each",
]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(data)}"


def font_path(name: str) -> Path | None:
    for directory in FONT_DIRS:
        path = directory / name
        if path.is_file():
            return path
    return None


def installed_fonts() -> list[str]:
    return [name for name in FONTS if font_path(name) is not None]


def render_lines(
    lines: list[str],
    *,
    font: str = "DejaVuSans.ttf",
    size: int = 32,
    ink: int = 0,
    paper: int = 255,
    margin: int = 40,
    spacing: float = 1.8,
) -> Image.Image:
    """Black (``ink``) text on white (``paper``), one line per entry, grey levels 0-255."""
    path = font_path(font)
    face: Any = ImageFont.truetype(str(path), size) if path else ImageFont.load_default(size)
    width = max(int(face.getlength(line)) for line in lines) + 2 * margin
    height = int(len(lines) * size * spacing) + 2 * margin
    image = Image.new("L", (width, height), paper)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((margin, margin + int(i * size * spacing)), line, fill=ink, font=face)
    return image.convert("RGB")


def scanned(image: Image.Image, *, angle: float = 3.0, noise: int = 12, seed: int = 7) -> Image.Image:
    """A slightly rotated page with speckle, as a flatbed scan looks."""
    import random

    rotated = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=(255, 255, 255))
    rng = random.Random(seed)
    pixels = rotated.load()
    assert pixels is not None
    for _ in range(rotated.width * rotated.height // 400):
        x, y = rng.randrange(rotated.width), rng.randrange(rotated.height)
        shade = max(0, 255 - rng.randrange(noise * 8))
        pixels[x, y] = (shade, shade, shade)
    return rotated


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A valid PNG header announcing ``width x height`` grey pixels over a tiny
    compressed stream of zero rows: decoding it would need width*height bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    compressor = zlib.compressobj(9)
    row = b"\x00" * (width + 1)
    body = b"".join(compressor.compress(row) for _ in range(64)) + compressor.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def text_pdf(pages: list[list[str]], *, font_size: int = 14) -> bytes:
    """A PDF whose pages carry ``pages[i]``'s lines as a real text layer (fpdf2, DejaVu Sans)."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    path = font_path("DejaVuSans.ttf")
    if path is not None:
        pdf.add_font("DejaVu", fname=str(path))
        pdf.set_font("DejaVu", size=font_size)
    else:
        pdf.set_font("Helvetica", size=font_size)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(0, font_size * 0.7, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def image_pdf(images: list[Image.Image], *, dpi: int = 150) -> bytes:
    """A PDF of scanned pages: one image per page, no text layer."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt")
    for image in images:
        width, height = image.width * 72 / dpi, image.height * 72 / dpi
        pdf.add_page(format=(width, height))
        pdf.image(image, x=0, y=0, w=width, h=height)
    return bytes(pdf.output())


def many_pages_pdf(count: int) -> bytes:
    """A PDF with ``count`` empty pages, written by hand (fast for 10,000 pages)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + i} 0 R" for i in range(count))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.extend(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>" for _ in range(count))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def cer(expected: str, got: str) -> float:
    """Character error rate: edit distance over the expected length (whitespace runs count as one space)."""
    import jiwer

    def norm(text: str) -> str:
        return " ".join(text.split())

    return float(jiwer.cer(norm(expected), norm(got)))


CUSTOMERS = ("Acme Widgets Ltd", "Blue Harbour Trading", "Northwind Supplies", "Contoso Foods", "Globex Parts")
INVOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "date": {"type": "string"},
        "customer": {"type": "string"},
        "total": {"type": "string"},
    },
    "required": ["invoice_number", "date", "customer", "total"],
    "additionalProperties": False,
}


def invoice(seed: int) -> tuple[list[str], dict[str, str]]:
    """A generated invoice: its lines and the true value of each :data:`INVOICE_SCHEMA` field."""
    import random

    rng = random.Random(seed)
    fields = {
        "invoice_number": f"INV-{rng.randrange(1000, 9999)}",
        "date": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
        "customer": CUSTOMERS[seed % len(CUSTOMERS)],
        "total": f"{rng.randrange(10, 5000)}.{rng.randrange(100):02d}",
    }
    quantity = rng.randrange(1, 9)
    lines = [
        f"Invoice number: {fields['invoice_number']}",
        f"Date: {fields['date']}",
        f"Bill to: {fields['customer']}",
        f"Item: widgets, quantity {quantity}",
        f"Total due: {fields['total']} EUR",
    ]
    return lines, fields
