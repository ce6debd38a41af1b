"""Seeded data sets with known anomalies (label 1) for the detector tests and the benchmark."""

from __future__ import annotations

import numpy as np

CENTERS = np.array([[-6.0, -6.0, 0.0], [0.0, 6.0, 3.0], [6.0, -2.0, -3.0]])


def blobs(n: int = 600, outliers: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three Gaussian blobs (unit variance, 3 features) and points drawn uniformly in
    the box around them at least 4.5 standard deviations from every centre."""
    rng = np.random.default_rng(seed)
    normal = CENTERS[rng.integers(0, len(CENTERS), n)] + rng.normal(size=(n, 3))
    far: list[np.ndarray] = []
    while len(far) < outliers:
        p = rng.uniform(-12, 12, size=3)
        if np.min(np.linalg.norm(CENTERS - p, axis=1)) > 4.5:
            far.append(p)
    x = np.vstack([normal, np.array(far)])
    y = np.r_[np.zeros(n), np.ones(outliers)]
    order = rng.permutation(len(x))
    return x[order], y[order]


def sine_series(n: int = 800, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``sin(t / 8)`` with noise 0.05, 12 spikes of +-(1.5 to 3) and two level shifts
    of +2 lasting 10 points; rows are ``[value, value - previous value]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    value = np.sin(t / 8) + rng.normal(scale=0.05, size=n)
    label = np.zeros(n)
    spikes = rng.choice(np.arange(50, n - 50), 12, replace=False)
    value[spikes] += rng.choice([-1, 1], 12) * rng.uniform(1.5, 3, 12)
    label[spikes] = 1
    for start in (n // 3, 2 * n // 3):
        value[start : start + 10] += 2.0
        label[start : start + 10] = 1
    diff = np.r_[0.0, np.diff(value)]
    return np.c_[value, diff], label


ON_TOPIC = [
    "I was charged twice for my subscription this month",
    "My invoice shows the wrong billing address",
    "How do I update the credit card on my account",
    "The payment failed but the money left my bank account",
    "Please refund the duplicate charge on my card",
    "I cannot log in, the password reset email never arrives",
    "My account is locked after too many login attempts",
    "Two-factor authentication codes are not accepted",
    "The app logs me out every few minutes",
    "I need to change the email address on my account",
    "The export to CSV button does nothing",
    "The dashboard takes a minute to load every morning",
    "Uploading a file larger than 10 MB fails with an error",
    "Notifications stopped arriving on my phone",
    "The search returns no results for existing orders",
    "How can I cancel my plan before the renewal date",
    "Can I get an invoice with my company's VAT number",
    "The discount code was not applied at checkout",
    "I was billed after I cancelled my subscription",
    "The mobile app crashes when I open settings",
    "Our team members cannot see the shared projects",
    "Please add a second admin to our organisation account",
    "The API returns 500 errors since this morning",
    "Single sign-on with our identity provider stopped working",
    "The report shows last month's numbers instead of this month's",
    "I want to downgrade to the basic plan",
    "My order history is empty although I placed orders",
    "The password reset link says it has expired",
    "We were charged in dollars instead of euros",
    "The sync between devices is missing recent changes",
]

OFF_TOPIC = [
    "Preheat the oven and knead the dough for ten minutes",
    "The striker scored twice in the second half of the derby",
    "Autumn leaves drift slowly over the quiet pond at dusk",
    "Volcanic eruptions release sulfur dioxide into the stratosphere",
    "The sonata's second movement is marked adagio cantabile",
]


def texts() -> tuple[list[str], np.ndarray]:
    data = ON_TOPIC + OFF_TOPIC
    return data, np.r_[np.zeros(len(ON_TOPIC)), np.ones(len(OFF_TOPIC))]
