"""Fitting scikit-learn's isolation forest without its per-tree bookkeeping.

``IsolationForest.fit`` builds each tree through scikit-learn's generic bagging:
it clones the template tree (reading its parameters by signature inspection), seeds
a ``RandomState`` from the tree's seed twice (once for the tree's own seed, once for
its rows), validates the tree's parameters and routes its fit arguments. For 100
trees of 256 rows that bookkeeping is about a fifth of a 10,000-row fit (66 ms on a
2-core CPU, the trees themselves ~20 ms).

:func:`fit_isolation_forest` makes the same calls scikit-learn makes, in the same
order, on the same random streams, and sets the same attributes, minus the
bookkeeping: one ``RandomState`` per tree whose state is rewound instead of seeded
again, the template's parameters read once, each tree fitted with its validated
``_fit``. It mirrors scikit-learn 1.6-1.9 through private functions and attributes, so
it is used only once this process has seen it build a forest equal to
``IsolationForest.fit``'s, attribute by attribute and node by node, on a small seeded
data set for each kind of forest (rows drawn with or without replacement, all
features or a subsample): :func:`verified`. Anything else, or any difference, and the
fit is scikit-learn's own.
"""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Whether :func:`fit_isolation_forest` built ``fit``'s forest in this process, by kind
#: ``(bootstrap, subsamples features)``; absent: not checked yet.
_VERIFIED: dict[tuple[bool, bool], bool] = {}


def applies(forest: Any, x: Any) -> bool:
    """Whether :func:`fit_isolation_forest` may fit ``forest`` on ``x``: the forests it
    mirrors (dense rows, an integer seed, ``contamination="auto"``, no warm start), of a
    kind this process has :func:`verified`."""
    return (
        isinstance(x, np.ndarray)
        and forest.contamination == "auto"
        and not forest.warm_start
        and isinstance(forest.random_state, int)
        and verified((bool(forest.bootstrap), _features_per_tree(forest, x.shape[1]) != x.shape[1]))
    )


def _features_per_tree(forest: Any, n_features: int) -> int:
    """What bagging makes of ``max_features``: a count, or a fraction of ``n_features``; at least 1."""
    max_features = forest.max_features
    if not isinstance(max_features, numbers.Integral):
        max_features = int(max_features * n_features)
    return max(1, int(max_features))


def fit_isolation_forest(forest: Any, x: np.ndarray) -> None:
    """Fit ``forest`` on the dense rows ``x`` as ``forest.fit(x)`` does, for a forest
    and rows :func:`applies` accepts."""
    from sklearn.ensemble._bagging import MAX_INT, _generate_bagging_indices
    from sklearn.ensemble._iforest import _average_path_length
    from sklearn.tree import ExtraTreeRegressor
    from sklearn.utils.validation import validate_data

    rows = validate_data(forest, x, accept_sparse=["csc"], dtype=np.float32, ensure_all_finite=False)
    n_samples, n_features = rows.shape
    y = np.random.RandomState(forest.random_state).uniform(size=n_samples)

    max_samples = forest.max_samples
    if isinstance(max_samples, str):  # "auto"
        max_samples = min(256, n_samples)
    elif isinstance(max_samples, numbers.Integral):
        max_samples = min(max_samples, n_samples)
    else:
        max_samples = int(max_samples * n_samples)
    forest.max_samples_ = max_samples
    max_depth = math.ceil(math.log2(max(max_samples, 2)))

    seeds = np.random.RandomState(forest.random_state).randint(MAX_INT, size=forest.n_estimators)
    forest._n_samples = n_samples
    template = ExtraTreeRegressor(max_features=1, splitter="random", random_state=forest.random_state)
    template.max_depth = max_depth
    forest.estimator_ = template
    forest._max_samples = max_samples
    max_features = _features_per_tree(forest, n_features)
    forest._max_features = max_features
    forest._sample_weight = None
    forest.estimators_ = []
    forest.estimators_features_ = []
    forest._seeds = seeds

    params = template.get_params()
    subsample = max_features != n_features
    trees, features_of = forest.estimators_, forest.estimators_features_
    for seed in seeds:
        stream = np.random.RandomState(seed)
        start = stream.get_state()
        tree = ExtraTreeRegressor(**{**params, "random_state": stream.randint(MAX_INT)})
        stream.set_state(start)  # the rows come from the seed's stream from its start, as in scikit-learn
        features, indices = _generate_bagging_indices(
            stream, False, forest.bootstrap, n_features, n_samples, max_features, max_samples, None
        )
        weights = np.bincount(indices, minlength=n_samples)
        tree._fit(rows[:, features] if subsample else rows, y, sample_weight=weights, check_input=False)
        trees.append(tree)
        features_of.append(features)
    forest._average_path_length_per_tree, forest._decision_path_lengths = zip(
        *[(_average_path_length(tree.tree_.n_node_samples), tree.tree_.compute_node_depths()) for tree in trees],
        strict=True,
    )
    forest.offset_ = -0.5


def verified(kind: tuple[bool, bool]) -> bool:
    """Whether :func:`fit_isolation_forest` builds ``IsolationForest.fit``'s forest of this
    kind in this process: checked once per kind, on 600 seeded rows of 5 features."""
    if kind not in _VERIFIED:
        _VERIFIED[kind] = _check(kind)
        if not _VERIFIED[kind]:
            log.warning("the isolation forest's direct fit differs from scikit-learn's here (kind %s): not used", kind)
    return _VERIFIED[kind]


def _check(kind: tuple[bool, bool]) -> bool:
    from sklearn.base import clone
    from sklearn.ensemble import IsolationForest

    bootstrap, subsample = kind
    rows = np.random.default_rng(7).normal(size=(600, 5))
    library = IsolationForest(
        n_estimators=12,
        max_features=0.6 if subsample else 1.0,
        bootstrap=bootstrap,
        contamination="auto",
        random_state=3,
    )
    direct = clone(library)
    try:
        library.fit(rows)
        fit_isolation_forest(direct, rows)
        return same_fitted(library, direct) and bool(
            np.array_equal(library.score_samples(rows), direct.score_samples(rows))
        )
    except Exception:  # a private name moved: use scikit-learn's own fit
        log.debug("the isolation forest's direct fit failed its check", exc_info=True)
        return False


def same_fitted(a: Any, b: Any) -> bool:
    """Whether two fitted forests (or trees, or their parts) hold equal attributes, in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_fitted(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_fitted(a[k], b[k]) for k in a)
    if hasattr(a, "__getstate__") and type(a).__module__.startswith("sklearn"):
        return same_fitted(a.__getstate__(), b.__getstate__())
    return bool(a == b)
