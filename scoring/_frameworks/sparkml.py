"""Spark ML importer: ``DecisionTree``, ``RandomForest`` and ``GBT`` classification and
regression models, fitted objects or folders saved by ``model.write().save(path)``, alone
or as a saved ``PipelineModel`` of a ``VectorAssembler`` and one of them.

A folder is read from its files (``metadata/`` JSON, ``data/`` and ``treesMetadata/``
Parquet) through fsspec, on local disks and object stores alike: no SparkSession and no
JVM.  What Spark's ``transform`` computes, made explicit in the IR:

* The features are a float64 vector; a continuous split sends ``x <= threshold`` left,
  so NaN, failing the test, goes right, +inf right and -inf left.  Categorical splits
  (features Spark was told are nominal) are refused by name.
* A decision tree classifier's probabilities are its leaf's class weights over their
  sum; a random forest's add each tree's normalised leaf, in tree order, and divide the
  sum by the tree count (Spark by the sum of the votes: within 1e-15 of it).  The label
  is the first class of the highest probability.
* GBT: each tree's leaf times its weight, added in tree order; a classifier's
  probability is ``1 / (1 + exp(-2 * margin))``.  A random forest regressor averages.
* A ``thresholds`` parameter (which reweights the label) is refused by name, as is a
  ``PipelineModel`` stage other than the two above, a ``VectorAssembler`` that skips
  invalid rows or reads a vector column.

A model is kept as :class:`SparkTrees`: the files' own tables, so that Spark can load it
again (its native predictor writes the folder back and runs ``transform`` in a local
session).  Its canonical bytes are a zip of the metadata (JSON, timestamps left out) and
the node tables (Arrow IPC, sorted by tree and node).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._ir import Forest, Tree
from .._spark_session import local_session
from ..errors import DependencyError, ModelFileError, UnsupportedModelError, cause_line
from ._common import numeric_tree
from ._protocol import Framework, NativeModel, native_input, register

__all__ = ["FRAMEWORK", "SparkTrees", "import_spark", "read_spark_folder"]

_PACKAGE = "org.apache.spark.ml."
#: Spark ML class -> (its module in pyspark.ml, what kind of ensemble it is).
_MODELS = {
    "DecisionTreeClassificationModel": ("classification", "tree"),
    "RandomForestClassificationModel": ("classification", "forest"),
    "GBTClassificationModel": ("classification", "boosted"),
    "DecisionTreeRegressionModel": ("regression", "tree"),
    "RandomForestRegressionModel": ("regression", "forest"),
    "GBTRegressionModel": ("regression", "boosted"),
}
_ASSEMBLER = "feature.VectorAssembler"
_PIPELINE = "PipelineModel"
#: Metadata keys that change with every save of the same model.
_VOLATILE = ("timestamp",)


@dataclass(frozen=True)
class SparkTrees:
    """A Spark ML tree model as its saved folder holds it.

    ``metadata``: the model's metadata (its class, parameters, ``numFeatures``);
    ``nodes``: the ``data/`` table (one row per node; ensembles: ``treeID`` and
    ``nodeData``); ``trees``: an ensemble's ``treesMetadata/`` table (each tree's
    metadata and weight); ``features``: the feature names (a ``VectorAssembler``'s input
    columns, or given by :meth:`SparkML.named`).
    """

    metadata: dict[str, Any]
    nodes: pa.Table
    trees: pa.Table | None = None
    features: tuple[str, ...] | None = None

    @property
    def kind(self) -> str:
        return str(self.metadata["class"]).rsplit(".", 1)[-1]

    def param(self, name: str) -> Any:
        """A parameter as the model has it: set, else its default."""
        for key in ("paramMap", "defaultParamMap"):
            if name in self.metadata.get(key, {}):
                return self.metadata[key][name]
        return None


# -- reading a saved folder ---------------------------------------------------------


def is_spark_folder(url: str) -> bool:
    """Whether ``url`` is a folder Spark ML saved (it holds ``metadata/``): a path on this
    machine by its files, an object-store URL by a listing."""
    if "://" not in url:
        return (Path(url) / "metadata").is_dir()
    with _reading(f"model folder {url!r}"):
        fs, path = _fs(url)
        return bool(fs.isdir(f"{path}/metadata"))


def read_spark_folder(url: str | os.PathLike[str]) -> SparkTrees:
    """The tree model saved at ``url`` (a model folder or a PipelineModel's)."""
    url = str(url).rstrip("/")
    with _reading(f"Spark ML folder {url!r}"):
        fs, path = _fs(url)
        metadata = _metadata(fs, path, url)
        kind = str(metadata.get("class", "")).removeprefix(_PACKAGE)
        if kind == _PIPELINE:
            return _pipeline(fs, path, url, metadata)
        return _model(fs, path, url, metadata)


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """A store's or a file's failure (fsspec's OSError, pyarrow's) as one line naming
    the model's folder."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise ModelFileError(
            f"cannot read {what}: {cause_line(exc, first_line=True)}; check that it and its "
            "storage can be read from here"
        ) from exc


def _fs(url: str) -> tuple[Any, str]:
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url)
    return fs, str(path).rstrip("/")


def _metadata(fs: Any, path: str, url: str) -> dict[str, Any]:
    parts = sorted(p for p in fs.ls(f"{path}/metadata", detail=False)
                   if Path(p).name.startswith("part-"))  # fmt: skip
    if not parts:
        raise ModelFileError(
            f"Spark ML folder {url!r} has no metadata/part-* file: it is not a saved Spark "
            "ML model, or its save did not finish; save it again"
        )
    with fs.open(parts[0], "rb") as f:
        text = f.read().decode().strip().splitlines()
    try:
        return dict(json.loads(text[0]))
    except (ValueError, IndexError) as exc:
        raise ModelFileError(f"Spark ML folder {url!r}: its metadata is not JSON ({exc})") from None


def _table(fs: Any, folder: str, url: str) -> pa.Table:
    import pyarrow.parquet as pq

    files = sorted(p for p in fs.ls(folder, detail=False) if p.endswith(".parquet"))
    if not files:
        raise ModelFileError(f"Spark ML folder {url!r}: {Path(folder).name}/ has no Parquet files")
    tables = []
    for file in files:
        with fs.open(file, "rb") as f:
            tables.append(pq.read_table(f))
    return pa.concat_tables(tables).replace_schema_metadata(None)


def _model(fs: Any, path: str, url: str, metadata: dict[str, Any]) -> SparkTrees:
    kind = str(metadata.get("class", "")).rsplit(".", 1)[-1]
    if kind not in _MODELS:
        raise UnsupportedModelError(
            f"Spark ML folder {url!r} holds a {metadata.get('class')}; supported: "
            f"{', '.join(_MODELS)}, or a PipelineModel of a VectorAssembler and one of them"
        )
    nodes = _table(fs, f"{path}/data", url)
    trees = None if _MODELS[kind][1] == "tree" else _table(fs, f"{path}/treesMetadata", url)
    return _canonical(SparkTrees(metadata=metadata, nodes=nodes, trees=trees))


def _pipeline(fs: Any, path: str, url: str, metadata: dict[str, Any]) -> SparkTrees:
    """A PipelineModel of ``[VectorAssembler,] tree model``: the model, named."""
    uids = list(metadata.get("paramMap", {}).get("stageUids", []))
    folders = [f"{path}/stages/{i}_{uid}" for i, uid in enumerate(uids)]
    stages = [_metadata(fs, folder, url) for folder in folders]
    kinds = [str(s.get("class", "")).removeprefix(_PACKAGE) for s in stages]
    shape_ok = len(kinds) in (1, 2) and kinds[:-1] in ([], [_ASSEMBLER])
    if not shape_ok or kinds[-1].rsplit(".", 1)[-1] not in _MODELS:
        names = [k.rsplit(".", 1)[-1] for k in kinds]
        raise UnsupportedModelError(
            f"Spark ML PipelineModel {url!r} has the stages {names}; "
            "supported: a VectorAssembler then one DecisionTree, RandomForest or GBT model "
            "(fit the other stages' work into the input table, or save the tree model alone)"
        )
    model = _model(fs, folders[-1], url, stages[-1])
    if len(stages) == 1:
        return model
    return replace(model, features=_assembled(stages[0], model, url))


def _assembled(assembler: dict[str, Any], model: SparkTrees, url: str) -> tuple[str, ...]:
    """The assembler's input columns as the model's feature names."""
    params = {**assembler.get("defaultParamMap", {}), **assembler.get("paramMap", {})}
    columns = [str(c) for c in params.get("inputCols", [])]
    if params.get("handleInvalid", "error") == "skip":
        raise UnsupportedModelError(
            f"Spark ML PipelineModel {url!r}: its VectorAssembler has handleInvalid='skip', "
            "which drops rows holding NULL or NaN; a scorer keeps every row: refit it with "
            "'keep' or 'error'"
        )
    if params.get("outputCol") != model.param("featuresCol"):
        raise UnsupportedModelError(
            f"Spark ML PipelineModel {url!r}: the VectorAssembler writes "
            f"{params.get('outputCol')!r}, the model reads {model.param('featuresCol')!r}"
        )
    if len(columns) != int(model.metadata["numFeatures"]):
        raise UnsupportedModelError(
            f"Spark ML PipelineModel {url!r}: the VectorAssembler joins {len(columns)} columns "
            f"into {model.metadata['numFeatures']} features, so some are vectors; assemble "
            "numeric columns only"
        )
    return tuple(columns)


def _canonical(trees: SparkTrees) -> SparkTrees:
    """The same model whatever save it came from: volatile metadata left out, rows sorted."""
    metadata = {k: v for k, v in trees.metadata.items() if k not in _VOLATILE}
    nodes = trees.nodes
    if "treeID" in nodes.column_names:
        order = pa.compute.sort_indices(pa.table({
            "t": nodes["treeID"], "n": pa.compute.struct_field(nodes["nodeData"], "id"),
        }), [("t", "ascending"), ("n", "ascending")])  # fmt: skip
    else:
        order = pa.compute.sort_indices(nodes, [("id", "ascending")])
    nodes = nodes.take(order).combine_chunks()
    forest = trees.trees
    if forest is not None:
        forest = forest.take(
            pa.compute.sort_indices(forest, [(forest.column_names[0], "ascending")])
        )
        described = [json.dumps({k: v for k, v in json.loads(m).items() if k not in _VOLATILE},
                                sort_keys=True) for m in forest.column(1).to_pylist()]  # fmt: skip
        forest = forest.set_column(1, forest.field(1), pa.array(described, pa.string()))
        forest = forest.combine_chunks()
    return replace(trees, metadata=metadata, nodes=nodes, trees=forest)


# -- the Forest -------------------------------------------------------------------------


def import_spark(trees: SparkTrees) -> Forest:
    """A Spark ML tree model as a Forest (see the module docstring)."""
    kind = trees.kind
    family, shape = _MODELS[kind]
    if trees.param("thresholds") is not None:
        raise UnsupportedModelError(
            f"Spark ML {kind} has thresholds {trees.param('thresholds')}, which reweight its "
            "label; unset them (the probabilities are the same) and choose the label from them"
        )
    classifier = family == "classification"
    n_classes = int(trees.metadata.get("numClasses", 2)) if classifier else 0
    boosted = shape == "boosted"
    n_out = 1 if not classifier or boosted else n_classes
    weights = _weights(trees)
    nodes = _nodes(trees)
    built = [_tree(nodes[t], kind, n_out, weight=weights[t] if boosted else None,
                   normalise=classifier and not boosted) for t in sorted(nodes)]  # fmt: skip
    task = ("binary" if n_classes == 2 else "multiclass") if classifier else "regression"
    return Forest(
        framework="spark",
        model_kind=f"spark.{kind}",
        task=task,  # type: ignore[arg-type]
        trees=built,
        n_features=int(trees.metadata["numFeatures"]),
        feature_names=None if trees.features is None else list(trees.features),
        n_outputs=n_out,
        base_score=np.zeros(n_out),
        post_transform="sigmoid" if classifier and boosted else "identity",
        sigmoid_alpha=2.0,
        average=shape == "forest",
        classes=np.arange(n_classes, dtype=np.float64) if classifier else None,
        objective=str(trees.param("lossType") or trees.param("impurity") or ""),
        input_dtype="float64",
        accumulate_dtype="float64",
        predict_returns="label" if classifier else "value",
    )


def _weights(trees: SparkTrees) -> list[float]:
    if trees.trees is None:
        return [1.0]
    return [float(w) for w in trees.trees.column(2).to_pylist()]


def _nodes(trees: SparkTrees) -> dict[int, dict[str, Any]]:
    """Each tree's node columns (numpy), by tree id."""
    table = trees.nodes
    wanted = ("id", "prediction", "impurityStats", "leftChild", "rightChild", "split")
    if "treeID" in table.column_names:
        data = table["nodeData"].combine_chunks()
        columns = {name: data.field(name) for name in wanted}
        tree_ids = table["treeID"].to_numpy()
    else:
        columns = {name: table[name].combine_chunks() for name in wanted}
        tree_ids = np.zeros(table.num_rows, dtype=np.int64)
    split = columns["split"]
    flat = {
        "id": columns["id"].to_numpy(),
        "prediction": columns["prediction"].to_numpy(),
        "stats": columns["impurityStats"].to_pylist(),
        "left": columns["leftChild"].to_numpy(),
        "right": columns["rightChild"].to_numpy(),
        "feature": split.field("featureIndex").to_numpy(),
        "categories": split.field("numCategories").to_numpy(),
        "threshold": split.field("leftCategoriesOrThreshold").to_pylist(),
    }
    # The rows are sorted by tree (:func:`_canonical`): each tree is one slice of them.
    ids, starts = np.unique(tree_ids, return_index=True)
    ends = [*starts[1:], len(tree_ids)]
    return {int(t): {k: v[a:b] for k, v in flat.items()}
            for t, a, b in zip(ids, starts, ends, strict=True)}  # fmt: skip


def _tree(nodes: dict[str, Any], kind: str, n_out: int, *, weight: float | None,
          normalise: bool) -> Tree:  # fmt: skip
    """One tree; Spark numbers its nodes in preorder from 0 (the root)."""
    ids = nodes["id"]
    n = len(ids)
    if sorted(ids.tolist()) != list(range(n)):
        raise ModelFileError(f"Spark ML {kind}: a tree's node ids are not 0..{n - 1}")
    at = np.empty(n, dtype=np.int64)
    at[ids] = np.arange(n)
    left, right = nodes["left"][at], nodes["right"][at]
    leaf = left < 0
    categorical = (nodes["categories"][at] >= 0) & ~leaf
    if categorical.any():
        raise UnsupportedModelError(
            f"Spark ML {kind} splits on categorical feature "
            f"{int(nodes['feature'][at][categorical][0])} (a nominal column of its input): "
            "categorical splits are not supported; fit it on the column as a number"
        )
    threshold = np.array([float(nodes["threshold"][i][0]) if not leaf[j] else 0.0
                          for j, i in enumerate(at)])  # fmt: skip
    value = np.zeros((n, n_out))
    for j, i in enumerate(at):
        if leaf[j]:
            value[j] = _leaf(nodes, int(i), n_out, weight=weight, normalise=normalise)
    leaf_index = np.cumsum(leaf) - 1  # Spark's leafCol: the leaf's place in preorder
    return numeric_tree(feature=nodes["feature"][at], threshold=threshold, left=left,
                        right=right, default_left=np.zeros(n, dtype=bool), value=value,
                        leaf_id=np.where(leaf, leaf_index, -1))  # fmt: skip


def _leaf(nodes: dict[str, Any], i: int, n_out: int, *, weight: float | None,
          normalise: bool) -> np.ndarray:  # fmt: skip
    if not normalise:  # a regression tree's value, times a boosted tree's weight
        value = float(nodes["prediction"][i])
        return np.array([value * weight if weight is not None else value])
    stats = np.asarray(nodes["stats"][i], dtype=np.float64)[:n_out]
    total = float(np.cumsum(stats)[-1]) if len(stats) else 0.0  # added in order, as Spark
    return stats / total if total != 0 else np.zeros(n_out)


# -- fitted objects, the native predictor ---------------------------------------------


def _is_spark_object(model: Any) -> bool:
    module = type(model).__module__
    return module.startswith("pyspark.ml") and (
        type(model).__name__ in _MODELS or type(model).__name__ == _PIPELINE
    )


def adopt(model: Any) -> SparkTrees:
    """A fitted Spark ML model (or PipelineModel) as :class:`SparkTrees`: saved to a
    temporary folder by Spark and read back from its files."""
    if isinstance(model, SparkTrees):
        return model
    with tempfile.TemporaryDirectory(prefix="scoring-sparkml-") as tmp:
        model.write().save(f"{tmp}/model")
        return read_spark_folder(f"{tmp}/model")


def write_spark_folder(trees: SparkTrees, folder: str) -> None:
    """``trees`` as the folder Spark saves, which its ``load`` reads."""
    import pyarrow.parquet as pq

    def line(metadata: dict[str, Any]) -> str:
        return json.dumps({**metadata, "timestamp": 0})

    base = Path(folder)
    (base / "metadata").mkdir(parents=True)
    (base / "metadata" / "part-00000").write_text(line(trees.metadata) + "\n")
    (base / "data").mkdir()
    pq.write_table(trees.nodes, base / "data" / "part-00000.parquet")
    if trees.trees is not None:
        described = [line(json.loads(m)) for m in trees.trees.column(1).to_pylist()]
        table = trees.trees.set_column(1, trees.trees.field(1), pa.array(described))
        (base / "treesMetadata").mkdir()
        pq.write_table(table, base / "treesMetadata" / "part-00000.parquet")


def _session() -> Any:
    """The active Spark session, or a local one on this interpreter."""
    try:
        import pyspark  # noqa: F401  (the reference needs it; reading does not)
    except ImportError:
        raise DependencyError(
            "Spark ML models are checked against Spark's own transform: pip install "
            "'scoring[spark]' (and a Java runtime)"
        ) from None
    return local_session("local[1]", app_name="scoring-native")


class SparkNative(NativeModel):
    """Spark's own ``transform`` on the model, loaded from the folder it is written to."""

    def __init__(self, model: Any, forest: Forest):
        super().__init__(adopt(model), forest)
        self._loaded: Any = None
        #: The last rows asked and Spark's answer: parity asks for the probabilities, the
        #: labels, the margins and the leaves of the same rows, one Spark job serves all.
        self._last: tuple[bytes, dict[str, np.ndarray]] | None = None

    def _spark_model(self) -> Any:
        if self._loaded is None:
            import importlib

            family = _MODELS[self.model.kind][0]
            cls = getattr(importlib.import_module(f"pyspark.ml.{family}"), self.model.kind)
            _session()
            with tempfile.TemporaryDirectory(prefix="scoring-sparkml-") as tmp:
                write_spark_folder(self.model, f"{tmp}/model")
                self._loaded = cls.load(f"{tmp}/model").setLeafCol("leaf")
        return self._loaded

    def _transform(self, X: Any) -> dict[str, np.ndarray]:
        """prediction, probability, rawPrediction and leaves for the rows of ``X``."""
        rows = np.asarray(native_input(X), dtype=np.float64).reshape(-1, self.forest.n_features)
        key = hashlib.sha256(np.ascontiguousarray(rows).tobytes()).digest()  # rows x features
        if self._last is None or self._last[0] != key:
            self._last = (key, self._transformed(rows))
        return self._last[1]

    def _transformed(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        from pyspark.ml.functions import array_to_vector, vector_to_array
        from pyspark.sql import functions as F

        if not len(rows):  # Spark's answer to no rows: no rows, each column its width
            width = len(self.forest.classes) if self.forest.classes is not None else 1
            return {
                "prediction": np.zeros(0),
                "probability": np.zeros((0, width)),
                "raw": np.zeros((0, width)),
                "leaf": np.zeros((0, self.forest.n_trees)),
            }
        model = self._spark_model()
        table = pa.table({
            "i": pa.array(np.arange(len(rows))),
            "x": pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), rows.shape[1]),
        })  # fmt: skip
        frame = _session().createDataFrame(table)
        frame = frame.select("i", array_to_vector(F.col("x").cast("array<double>"))
                             .alias(model.getFeaturesCol()))  # fmt: skip
        out = model.transform(frame)
        one = _MODELS[self.model.kind][1] == "tree"  # a tree's leaf is a number, not a vector
        leaf = F.array(F.col("leaf")) if one else vector_to_array(F.col("leaf"))
        keep = [F.col("i"), F.col(model.getPredictionCol()).alias("prediction"), leaf.alias("leaf")]
        if self.forest.task != "regression":
            keep += [vector_to_array(F.col(model.getProbabilityCol())).alias("probability"),
                     vector_to_array(F.col(model.getRawPredictionCol())).alias("raw")]  # fmt: skip
        result = out.select(*keep).toArrow().sort_by("i")
        return {name: _column(result[name]) for name in result.column_names}

    def predict(self, X: Any) -> np.ndarray:
        return self._transform(X)["prediction"]

    def predict_proba(self, X: Any) -> np.ndarray:
        return self._transform(X)["probability"]

    def predict_raw(self, X: Any) -> np.ndarray:
        """The margin the forest's outputs come from, from Spark's ``rawPrediction``: a
        GBT's margin; a random forest's votes over the tree count (what it averages); a
        decision tree's class weights over their sum (its probabilities)."""
        out = self._transform(X)
        if self.forest.task == "regression":
            return out["prediction"]
        raw = out["raw"]
        if self.forest.post_transform == "sigmoid":  # GBT: [-margin, margin]
            return raw[:, 1]
        if self.forest.average:
            return raw / self.forest.n_trees
        return out["probability"]

    def predict_leaf(self, X: Any) -> np.ndarray:
        """Spark's ``leafCol``: each tree's leaf, numbered in preorder among its leaves."""
        return self._transform(X)["leaf"].reshape(-1, self.forest.n_trees).astype(np.int64)


def _column(column: Any) -> np.ndarray:
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        values = column.combine_chunks()
        width = len(values[0]) if len(values) else 0
        return np.asarray(values.flatten().to_numpy(), dtype=np.float64).reshape(-1, width)
    return np.asarray(column.to_numpy(), dtype=np.float64)


class SparkML(Framework):
    """Stored as a zip of the saved folder's metadata and node tables (JSON and Arrow:
    nothing executes when it is read)."""

    name = "spark"
    distribution = "pyspark"
    artifact = "model.sparkml.zip"
    suffixes = ()
    hummingbird = False
    in_process = False

    def recognises(self, model: Any) -> bool:
        return isinstance(model, SparkTrees) or _is_spark_object(model)

    def load_file(self, path: Path, *, trusted: bool) -> Any:
        return read_spark_folder(path)  # no suffixes: only folders reach it

    def reads_folder(self, url: str) -> bool:
        return is_spark_folder(url)

    def load_folder(self, url: str) -> Any:
        return read_spark_folder(url)

    def adopt(self, model: Any) -> Any:
        return adopt(model)

    def to_forest(self, model: Any) -> Forest:
        return import_spark(adopt(model))

    def dump(self, model: Any) -> bytes:
        return _zipped(adopt(model))

    def restore(
        self, data: bytes, *, kind: str, classes: list[Any] | None, trusted: bool
    ) -> tuple[Any, Forest]:
        trees = _unzipped(data)
        return trees, import_spark(trees)

    def native(self, model: Any, forest: Forest) -> NativeModel:
        return SparkNative(model, forest)

    def named(self, model: Any, names: list[str]) -> Any | None:
        return replace(adopt(model), features=tuple(names))


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _zipped(trees: SparkTrees) -> bytes:
    entries = {
        "metadata.json": json.dumps(trees.metadata, sort_keys=True).encode(),
        "features.json": json.dumps(
            None if trees.features is None else list(trees.features)
        ).encode(),
        "data.arrow": _ipc(trees.nodes),
    }
    if trees.trees is not None:
        entries["treesMetadata.arrow"] = _ipc(trees.trees)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(entries):
            z.writestr(zipfile.ZipInfo(name, date_time=_ZIP_DATE), entries[name])
    return buffer.getvalue()


def _unzipped(data: bytes) -> SparkTrees:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = set(z.namelist())
        features = json.loads(z.read("features.json"))
        return SparkTrees(
            metadata=json.loads(z.read("metadata.json")),
            nodes=_from_ipc(z.read("data.arrow")),
            trees=_from_ipc(z.read("treesMetadata.arrow"))
            if "treesMetadata.arrow" in names
            else None,
            features=None if features is None else tuple(features),
        )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(data) as reader:
        return reader.read_all()


FRAMEWORK = register(SparkML())
