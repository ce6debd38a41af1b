"""Field accuracy of ``/v1/documents/extract`` with the embedded SmolLM2-135M on generated invoices.

Each invoice (``flexserv_ocr.testing.invoice``: number, date, customer, total,
plus a distracting quantity line) is sent twice: as a PDF with a text layer and
as a scanned PDF read by RapidOCR. Reports how many answers validated against
the schema (the bar) and, per field, how many matched the truth exactly (after
trimming whitespace and end punctuation, case-insensitively)::

    python benchmarks/extract_accuracy.py --invoices 10
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import jsonschema
from flexserv_ocr.testing import INVOICE_SCHEMA, b64, image_pdf, invoice, render_lines, text_pdf

from flexserv_core.testing import app_client, make_app


def same(a: Any, b: str) -> bool:
    def norm(v: Any) -> str:
        return " ".join(str(v).split()).strip(".,;:").casefold()

    return norm(a) == norm(b)


async def run(count: int) -> None:
    app = make_app(["ocr", "transformers", "constraints"], settings={"state_url": "memory://"})
    fields = list(INVOICE_SCHEMA["properties"])
    results: dict[str, dict[str, int]] = {kind: {"valid": 0, **dict.fromkeys(fields, 0)} for kind in ("text", "scan")}
    seconds: dict[str, list[float]] = {"text": [], "scan": []}
    async with app_client(app) as http:
        for seed in range(count):
            lines, truth = invoice(seed)
            documents = {"text": text_pdf([lines]), "scan": image_pdf([render_lines(lines, size=30)])}
            for kind, pdf in documents.items():
                t0 = time.perf_counter()
                response = await http.post(
                    "/v1/documents/extract", json={"file_data": b64(pdf), "schema": INVOICE_SCHEMA}, timeout=600
                )
                seconds[kind].append(time.perf_counter() - t0)
                if response.status_code != 200:
                    print(f"invoice {seed} ({kind}): {response.status_code} {response.text[:200]}")
                    continue
                data = response.json()["data"]
                try:
                    jsonschema.validate(data, INVOICE_SCHEMA)
                except jsonschema.ValidationError:
                    continue
                results[kind]["valid"] += 1
                for field in fields:
                    results[kind][field] += same(data.get(field), truth[field])
                print(f"invoice {seed} ({kind}): {data} / truth {truth}")
    print(f"\n| input | valid JSON | {' | '.join(fields)} | all fields | s/request (median) |")
    print(f"|---|---|{'---|' * len(fields)}---|---|")
    for kind, counts in results.items():
        per_field = " | ".join(f"{counts[f]}/{count}" for f in fields)
        total = sum(counts[f] for f in fields)
        median = sorted(seconds[kind])[len(seconds[kind]) // 2]
        print(f"| {kind} | {counts['valid']}/{count} | {per_field} | {total}/{count * len(fields)} | {median:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invoices", type=int, default=10)
    asyncio.run(run(parser.parse_args().invoices))


if __name__ == "__main__":
    main()
