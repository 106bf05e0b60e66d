"""XGBoost cost model: ranks candidate configs by predicted relative speed.

As AutoTVM's XGBoost model (Chen et al., "Learning to Optimize Tensor
Programs", NeurIPS 2018): gradient-boosted trees trained with a pairwise
ranking objective on throughput normalized per workload (throughput / the best
throughput of that workload, so 1.0 is the best measured config and a failed
trial is 0.0), one ranking group per workload. Retrained from scratch on all
data seen whenever asked (:meth:`CostModel.fit`); seeding from the records of
other shapes of the same operator family on the same device
(:meth:`CostModel.seed_from_records`) transfers what they taught.

Features are opaque here: float32 matrices of shape (n, n_features), the width
fixed by the first data the model sees. Predictions are scores whose order is
meaningful, not their scale. What the columns mean is the featurizer's business;
it names them with a :class:`FeatureSchema` (the tuner's is
``features.feature_schema()``), which a model created with one records in its
saved file, so that a file whose columns meant something else is refused on
load instead of ranking garbage (see :meth:`CostModel.load`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .records import Record

if TYPE_CHECKING:
    import xgboost as xgb

__all__ = ["CostModel", "DEFAULT_PARAMS", "FeatureSchema", "FeatureSchemaError", "FeatureSchemaWarning"]


def _xgboost():
    """The xgboost module, imported at the first fit, prediction or load: with scipy it takes
    about 0.3 s, which every process that imports the tuner (the API server among them) paid."""
    import xgboost

    return xgboost


#: Booster parameters. ``lambdarank_pair_method="mean"`` with 16 pairs per
#: sample ranks the whole list (XGBoost's default "topk" only orders the top,
#: which ranks held-out configs worse); shallow trees and a small step
#: generalize from a few hundred trials (AutoTVM uses depth 3).
DEFAULT_PARAMS = {
    "objective": "rank:pairwise",
    "lambdarank_pair_method": "mean",
    "lambdarank_num_pair_per_sample": 16,
    "max_depth": 4,
    "eta": 0.1,
    "gamma": 1e-4,
    "min_child_weight": 1,
    "subsample": 1.0,
    "tree_method": "hist",
}


@dataclass(frozen=True)
class FeatureSchema:
    """What the columns of a feature matrix mean: their ``names`` in order, and the ``version`` of
    the code computing them (bumped when a column's computation changes but its name does not)."""

    names: tuple[str, ...]
    version: int = 0

    @property
    def width(self) -> int:
        return len(self.names)

    @cached_property
    def digest(self) -> str:
        """sha256 (hex) of the version and the names: equal digests mean the same columns."""
        return hashlib.sha256(json.dumps([self.version, list(self.names)]).encode()).hexdigest()

    def to_json(self) -> dict:
        """What a saved model records: the digest, the version and the names."""
        return {"digest": self.digest, "version": self.version, "names": list(self.names)}


class FeatureSchemaError(ValueError):
    """A saved cost model whose features are not the ones this process computes."""


class FeatureSchemaWarning(UserWarning):
    """A saved cost model of the right width that does not say what its columns mean."""


class CostModel:
    """XGBoost ranking model over config features.

    ``num_rounds``: boosting rounds per fit; ``params``: overrides of
    :data:`DEFAULT_PARAMS`; ``nthread``: XGBoost threads (1 by default so that
    training does not disturb measurements on the same host); ``seed``: makes
    fits deterministic; ``feature_cache_size``: configs whose features are kept
    (oldest evicted first); ``schema``: what the feature columns mean (fixes the
    width before any data; recorded by :meth:`save`, checked by :meth:`load`).

    Data accumulates through :meth:`add` (or :meth:`update` = add + fit) and is
    never dropped; ``version`` increases with every successful fit, and the
    per-config prediction cache is cleared then.
    """

    def __init__(
        self,
        *,
        num_rounds: int = 150,
        params: dict | None = None,
        nthread: int = 1,
        seed: int = 0,
        feature_cache_size: int = 200_000,
        schema: FeatureSchema | None = None,
    ):
        self.num_rounds = num_rounds
        self.schema = schema
        self.params = {**DEFAULT_PARAMS, **(params or {}), "nthread": nthread, "seed": seed}
        self.feature_cache_size = feature_cache_size
        self.version = 0
        self._booster: xgb.Booster | None = None
        self._X = np.zeros((0, 0), dtype=np.float32)
        self._y = np.zeros(0, dtype=np.float64)
        self._groups: list[str] = []
        self._features: dict[tuple[str, int], np.ndarray] = {}
        self._predictions: dict[tuple[str, int], float] = {}

    # ---------------------------------------------------------------- data and training
    @property
    def n_features(self) -> int | None:
        """Feature width: the schema's, else fixed by the first data; ``None`` before any."""
        if self.schema is not None:
            return self.schema.width
        return self._X.shape[1] if len(self._X) else None

    @property
    def n_samples(self) -> int:
        return len(self._y)

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def largest_group(self) -> int:
        """Training rows of the ranking group (workload key) that has the most; 0 without data."""
        return max(Counter(self._groups).values(), default=0)

    def add(self, features: np.ndarray, throughputs: Sequence[float], groups: Sequence[str]) -> None:
        """Add training rows without refitting.

        ``features``: (n, n_features) float32; ``throughputs``: (n,) relative
        speed, any unit consistent within a group (e.g. 1 / median seconds),
        0 for a failed trial; ``groups``: (n,) workload keys (the ranking
        groups). Raises ValueError on shape mismatch or negative/non-finite
        throughput.
        """
        X = self._check_features(features)
        y = np.asarray(throughputs, dtype=np.float64).reshape(-1)
        if len(y) != len(X) or len(groups) != len(X):
            raise ValueError(f"features ({len(X)}), throughputs ({len(y)}) and groups ({len(groups)}) differ in length")
        if not np.all(np.isfinite(y)) or np.any(y < 0):
            raise ValueError("throughputs must be finite and >= 0")
        self._X = X if not len(self._X) else np.concatenate([self._X, X])
        self._y = np.concatenate([self._y, y])
        self._groups.extend(str(g) for g in groups)

    def fit(self) -> bool:
        """Retrain from scratch on all data; False (model unchanged) when no group has two distinct labels."""
        labels = self._normalized_labels()
        group_ids = {g: i for i, g in enumerate(sorted(set(self._groups)))}
        qid = np.array([group_ids[g] for g in self._groups], dtype=np.int64)
        informative = [g for g in group_ids.values() if np.ptp(labels[qid == g]) > 0]
        if not informative:
            return False
        order = np.argsort(qid, kind="stable")  # XGBoost wants rows grouped by query id
        xgb = _xgboost()
        dtrain = xgb.DMatrix(self._X[order], label=labels[order], qid=qid[order], nthread=self.params["nthread"])
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.num_rounds)
        self.version += 1
        self._predictions.clear()
        return True

    def update(self, features: np.ndarray, throughputs: Sequence[float], groups: Sequence[str]) -> bool:
        """:meth:`add` then :meth:`fit`; returns what fit returns."""
        self.add(features, throughputs, groups)
        return self.fit()

    def _normalized_labels(self) -> np.ndarray:
        labels = np.zeros_like(self._y)
        groups = np.asarray(self._groups)
        for g in set(self._groups):
            mask = groups == g
            top = self._y[mask].max()
            if top > 0:
                labels[mask] = self._y[mask] / top
        return labels

    def seed_from_records(self, records: Sequence[Record], featurize: Callable[[list[Record]], np.ndarray]) -> int:
        """Transfer: add earlier records (one ranking group per workload) and fit; returns the rows added.

        The caller picks the records: same operator family, same device key
        (checked: records of several device keys raise ValueError). Labels are
        ``own_throughput()``; failed trials count as throughput 0; disturbed ones are left out (they
        timed the host more than the config). ``featurize(records)`` returns their (n, n_features)
        float32 features.
        """
        records = [r for r in records if not r.result.disturbed]
        if not records:
            return 0
        devices = sorted({r.device_key for r in records})
        if len(devices) > 1:
            raise ValueError(f"records span several device keys {devices}; seed from one device's records")
        self.add(featurize(records), [r.result.own_throughput() for r in records], [r.workload_key for r in records])
        self.fit()
        return len(records)

    # ---------------------------------------------------------------- prediction
    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores (n,) float32, higher = predicted faster. Raises RuntimeError before the first fit."""
        if self._booster is None:
            raise RuntimeError("the cost model has not been trained yet")
        # DMatrix gets the model's thread count too: with OpenMP's default (all cores) building a
        # small matrix costs ~20 ms on a busy 2-core host instead of ~1 ms.
        X = _xgboost().DMatrix(self._check_features(features), nthread=self.params["nthread"])
        return self._booster.predict(X).astype(np.float32)

    def features(
        self, workload_key: str, indices: Sequence[int], featurize: Callable[[list[int]], np.ndarray]
    ) -> np.ndarray:
        """Features (n, n_features) of configs ``indices`` of a workload, cached per (workload key, index).

        ``featurize(missing_indices)`` is called once, only for configs not cached yet.
        """
        keys = [(workload_key, int(i)) for i in indices]
        missing = list(dict.fromkeys(k for k in keys if k not in self._features))
        fresh: dict[tuple[str, int], np.ndarray] = {}
        if missing:
            computed = self._check_features(featurize([i for _, i in missing]))
            if len(computed) != len(missing):
                raise ValueError(f"featurize returned {len(computed)} rows for {len(missing)} configs")
            fresh = dict(zip(missing, computed))
        rows = [fresh[k] if k in fresh else self._features[k] for k in keys]
        self._features.update(fresh)
        for k in list(self._features)[: max(0, len(self._features) - self.feature_cache_size)]:
            del self._features[k]
        return np.stack(rows) if rows else np.zeros((0, self.n_features or 0), np.float32)

    def predict_configs(
        self, workload_key: str, indices: Sequence[int], featurize: Callable[[list[int]], np.ndarray]
    ) -> np.ndarray:
        """Scores (n,) float32 of configs ``indices``, cached per (workload key, index) until the next fit."""
        keys = [(workload_key, int(i)) for i in indices]
        missing = list(dict.fromkeys(k for k in keys if k not in self._predictions))
        if missing:
            scores = self.predict(self.features(workload_key, [i for _, i in missing], featurize))
            self._predictions.update(zip(missing, scores.tolist()))
        return np.array([self._predictions[k] for k in keys], dtype=np.float32)

    def _check_features(self, features: np.ndarray) -> np.ndarray:
        X = np.asarray(features, dtype=np.float32)
        if X.ndim != 2:
            raise ValueError(f"features must be a 2-D (n, n_features) array, got shape {X.shape}")
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise ValueError(f"features have width {X.shape[1]}, the model's is {self.n_features}")
        return X

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the booster, the training data and the settings to one ``.npz`` file (atomically)."""
        meta = {
            "num_rounds": self.num_rounds,
            "params": self.params,
            "feature_cache_size": self.feature_cache_size,
            "version": self.version,
            "xgboost": _xgboost().__version__,
            "feature_schema": self.schema.to_json() if self.schema else None,
        }
        booster = np.frombuffer(self._booster.save_raw("ubj"), dtype=np.uint8) if self._booster else np.zeros(0, np.uint8)
        buf = io.BytesIO()
        np.savez(
            buf,
            meta=np.array(json.dumps(meta)),
            X=self._X,
            y=self._y,
            groups=np.array(self._groups, dtype=str),
            booster=booster,
        )
        tmp = Path(f"{path}.tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, schema: FeatureSchema | None = None) -> CostModel:
        """Read a model written by :meth:`save`; predictions are identical to the saved model's.

        ``schema``: what the columns of the features the caller will give the
        model mean (the tuner's: ``features.feature_schema()``); without it
        nothing is checked and the model keeps the file's schema. With it:

        - a file saved with a schema whose digest differs raises
          :class:`FeatureSchemaError`, naming both digests and the first
          difference: its trees split on columns that now mean something else.
          Retrain (a fresh ``CostModel(schema=schema)`` fitted on the records,
          e.g. with :meth:`seed_from_records`) and save over the file, or
          delete it;
        - a file saved without a schema (before schemas were recorded, or by a
          model created without one) is refused alike when its width differs
          from the schema's; of the same width it is accepted with a
          :class:`FeatureSchemaWarning`, the width being all that can be
          checked (the model keeps no schema, so a copy saved from it warns
          alike, until replaced by a model retrained with the schema); holding
          no data, it is accepted silently and gets ``schema``.

        A caller that loads a model only to warm-start (a missing file being
        fine too) should catch FeatureSchemaError, log it and start from a
        fresh model, as it would for a missing file. Raises OSError / KeyError
        / ValueError for an unreadable file.
        """
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            params = dict(meta["params"])
            saved = meta.get("feature_schema")
            model = cls(
                num_rounds=meta["num_rounds"],
                params=params,
                nthread=params["nthread"],
                seed=params["seed"],
                feature_cache_size=meta["feature_cache_size"],
                schema=FeatureSchema(tuple(saved["names"]), saved["version"]) if saved else None,
            )
            model._X, model._y, model._groups = z["X"], z["y"], [str(g) for g in z["groups"]]
            if len(z["booster"]):
                model._booster = _xgboost().Booster(params=model.params)
                model._booster.load_model(bytearray(z["booster"].tobytes()))
            model.version = meta["version"]
        if schema is not None:
            model._check_schema(path, schema)
        return model

    def _check_schema(self, path: str | os.PathLike, schema: FeatureSchema) -> None:
        """:meth:`load`'s check of a model read from ``path`` against the caller's ``schema``."""
        if self.schema is not None and self.schema.digest == schema.digest:
            return
        if self.schema is None:
            if self.n_features is None:
                self.schema = schema
                return
            if self.n_features == schema.width:
                warnings.warn(f"{path}: the cost model does not say what its {self.n_features} feature columns mean "
                              f"(saved before feature schemas were recorded); assuming they are this featurizer's "
                              f"(version {schema.version}, digest {schema.digest}). Retrain it and save it again to "
                              f"record them", FeatureSchemaWarning, stacklevel=3)
                return
            saved, difference = "no feature schema", f"{self.n_features} columns there, {schema.width} here"
        else:
            saved = f"feature schema {self.schema.digest} (version {self.schema.version})"
            difference = _difference(self.schema, schema)
        raise FeatureSchemaError(
            f"{path}: the cost model was saved with {saved}, this featurizer's is {schema.digest} (version "
            f"{schema.version}): {difference}, so its trees would read the wrong columns. Retrain it (a fresh "
            f"cost model fitted on the records) and save over the file, or delete the file")


def _difference(saved: FeatureSchema, current: FeatureSchema) -> str:
    """The first difference between two schemas, in words."""
    for column, (there, here) in enumerate(zip(saved.names, current.names)):
        if there != here:
            return f"column {column} is {there!r} there, {here!r} here"
    if saved.width != current.width:
        return f"{saved.width} columns there, {current.width} here"
    return f"the same columns computed by featurizer version {saved.version} there, {current.version} here"
