"""MLflow models in: ``models:/NAME/VERSION``, ``models:/NAME@ALIAS``, ``runs:/RUN/PATH``
or a local MLflow model directory -> the framework's own model object.

The MLmodel file names the flavor and the file inside; that file is read by the loader
this package uses for the same format elsewhere (:func:`load_model_file`), so what an
MLflow model may contain is exactly what a model file may: XGBoost's JSON/UBJSON,
LightGBM's model text or skops, scikit-learn's skops, CatBoost's cbm/json, an ONNX file,
a Spark ML PipelineModel folder (the ``spark`` flavor, read without Spark).  A pickled
flavor (``serialization_format`` pickle or cloudpickle) is refused unless trusted.  The
flavor's own ``skops_trusted_types`` are not read: they are part of the file we check.

The tracking and registry URIs are MLflow's own configuration (``MLFLOW_TRACKING_URI``,
``MLFLOW_REGISTRY_URI``) unless ``tracking_uri`` is given.  An http(s) server is asked
for its health first, with a short timeout: MLflow's client retries an unreachable one
for minutes before it says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DependencyError, ModelFileError, ModelNotFoundError, UntrustedModelError

__all__ = [
    "MlflowModel", "check_reachable", "is_mlflow_ref", "load_mlflow_model", "mlflow_client",
    "mlflow_name", "mlflow_tracking",
]  # fmt: skip

_SCHEMES = ("models:/", "runs:/", "mlflow-artifacts:/")
#: Flavors in the order one is picked when an MLflow model has several.
_TREE_FLAVORS = ("xgboost", "lightgbm", "catboost", "sklearn", "onnx", "spark")
#: The XGBoost classes the xgboost flavor's ``model_class`` may name (anything else in
#: that field is refused rather than imported).
_XGBOOST_CLASSES = frozenset({
    "Booster", "XGBClassifier", "XGBRegressor", "XGBRanker", "XGBRFClassifier",
    "XGBRFRegressor",
})  # fmt: skip
_HEALTH_TIMEOUT_S = 5.0


@dataclass
class MlflowModel:
    """A model read from MLflow: the object, its flavor and where it came from
    (``source``: what a registration records as tags, all strings)."""

    model: Any
    flavor: str
    source: dict[str, str] = field(default_factory=dict)


def is_mlflow_ref(model: Any) -> bool:
    """A ``models:/``, ``runs:/`` or ``mlflow-artifacts:/`` URI, or a local directory
    holding an MLmodel file."""
    if not isinstance(model, (str, os.PathLike)):
        return False
    text = str(model)
    return text.startswith(_SCHEMES) or (Path(text) / "MLmodel").is_file()


def mlflow_name(ref: str) -> str:
    """The name a model gets from its reference: ``models:/churn@champion`` -> churn, a
    run's or a directory's artifact path -> its last part."""
    rest = ref.removeprefix("models:/")
    if rest != ref:
        return rest.split("@", 1)[0].split("/", 1)[0]
    return Path(ref.rstrip("/")).name or "model"


def mlflow_tracking(uri: str | None) -> contextlib.AbstractContextManager[None]:
    """``uri`` as MLflow's own tracking setting (``MLFLOW_TRACKING_URI``) for a block: a
    job file's ``mlflow_uri``.  None leaves MLflow's configuration as it is."""
    return _environment("MLFLOW_TRACKING_URI", uri) if uri else contextlib.nullcontext()


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def load_mlflow_model(
    ref: str | os.PathLike[str], *, trusted: bool = False, tracking_uri: str | None = None
) -> MlflowModel:
    """The model ``ref`` names, with its flavor and MLflow source (see the module)."""
    mlflow = mlflow_client()
    ref = str(ref)
    uri = tracking_uri or mlflow.get_tracking_uri()
    source = {"mlflow.source": ref}
    with tempfile.TemporaryDirectory(prefix="scoring-mlflow-") as tmp:
        if Path(ref).is_dir():
            path = Path(ref)
        else:
            check_reachable(uri)
            found = _registered(mlflow, ref, uri)
            source.update(found, **{"mlflow.tracking_uri": uri})
            # The version found, not the alias again: an alias moved in between (a
            # promotion during a long download) would load another version than the
            # one recorded.
            path = Path(_download(mlflow, _pinned_ref(ref, found), uri, f"{tmp}/artifacts"))
        meta = _meta(mlflow, path, ref)
        if meta.run_id:
            source.setdefault("mlflow.run_id", str(meta.run_id))
        flavor = _tree_flavor(meta.flavors, ref)
        model = _LOADERS[flavor](path, meta.flavors[flavor], tmp, trusted=trusted, ref=ref)
    names = _signature_names(meta)
    if names is not None:
        source["mlflow.signature"] = json.dumps(meta.signature.inputs.to_dict())
        model = _named(model, names, ref)
    return MlflowModel(model=model, flavor=flavor, source=source)


def mlflow_client(what: str = "MLflow models") -> Any:
    """The ``mlflow`` module; where it is not installed, one line saying ``what`` needs
    it and how to install it."""
    try:
        import mlflow
    except ImportError:
        raise DependencyError(
            f"{what} need the mlflow client: pip install 'scoring[mlflow]'"
        ) from None
    return mlflow


def check_reachable(uri: str) -> None:
    """One line, at once, for a server that does not answer (see the module)."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=_HEALTH_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return  # it answered: an older server without /health, or one behind a proxy
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelFileError(
            f"MLflow tracking server {uri} is unreachable ({reason}); start it, or point "
            "MLFLOW_TRACKING_URI (--mlflow-uri) at a running one"
        ) from None


def _registered(mlflow: Any, ref: str, uri: str) -> dict[str, str]:
    """The registry's record of a ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS``."""
    rest = ref.removeprefix("models:/")
    if rest == ref:
        return {}
    name, alias = rest.split("@", 1) if "@" in rest else (rest, "")
    name, _, version = name.partition("/")
    client = mlflow.MlflowClient(tracking_uri=uri)
    try:
        if alias:
            mv = client.get_model_version_by_alias(name, alias)
        elif version.isdigit():
            mv = client.get_model_version(name, version)
        else:
            raise ModelNotFoundError(
                f"{ref!r} names no version: expected models:/NAME/VERSION or models:/NAME@ALIAS"
            )
    except mlflow.exceptions.MlflowException as exc:
        raise _not_found(ref, uri, exc) from None
    return {"mlflow.model_version": str(mv.version), "mlflow.run_id": str(mv.run_id or "")}


def _pinned_ref(ref: str, found: dict[str, str]) -> str:
    """``models:/NAME@ALIAS`` as ``models:/NAME/VERSION`` of the version it named."""
    if not ref.startswith("models:/") or "@" not in ref or "mlflow.model_version" not in found:
        return ref
    name = ref.removeprefix("models:/").split("@", 1)[0]
    return f"models:/{name}/{found['mlflow.model_version']}"


def _not_found(ref: str, uri: str, exc: Any) -> ModelNotFoundError:
    first = str(exc.message if hasattr(exc, "message") else exc).splitlines()[0]
    return ModelNotFoundError(
        f"MLflow has no model {ref!r} at {uri} ({first}); check the name, version or "
        "alias in the MLflow UI (or MlflowClient().search_model_versions), and that "
        "MLFLOW_TRACKING_URI (--mlflow-uri) names the right server"
    )


def _download(mlflow: Any, ref: str, uri: str, into: str) -> str:
    # A progress bar per download is noise in a job's log.
    try:
        with _environment("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"):
            return str(mlflow.artifacts.download_artifacts(
                artifact_uri=ref, dst_path=into, tracking_uri=uri
            ))  # fmt: skip
    except mlflow.exceptions.MlflowException as exc:
        raise _not_found(ref, uri, exc) from None
    except OSError as exc:
        raise ModelFileError(f"cannot download MLflow model {ref!r} from {uri}: {exc}") from None


def _meta(mlflow: Any, path: Path, ref: str) -> Any:
    """The MLmodel file, or one line on why it cannot be read."""
    from ..errors import cause_line

    try:
        meta = mlflow.models.Model.load(str(path / "MLmodel"))
    except Exception as exc:  # yaml's errors, MLflow's, a file gone: all one cause
        raise ModelFileError(
            f"MLflow model {ref!r}: its MLmodel file cannot be read ({type(exc).__name__}: "
            f"{cause_line(exc, first_line=True)}); log the model again"
        ) from exc
    if not isinstance(getattr(meta, "flavors", None), dict):
        raise ModelFileError(f"MLflow model {ref!r}: its MLmodel file names no flavors")
    return meta


def _tree_flavor(flavors: dict[str, Any], ref: str) -> str:
    for flavor in _TREE_FLAVORS:
        if flavor in flavors:
            return flavor
    raise ModelFileError(
        f"MLflow model {ref!r} has no tree-model flavor (it has {', '.join(sorted(flavors))}); "
        "log the model with mlflow.xgboost, mlflow.lightgbm, mlflow.catboost, mlflow.sklearn, "
        "mlflow.onnx or mlflow.spark.log_model"
    )


# -- one loader per flavor: the file inside, read by the package's own loaders ----------

Loader = Callable[..., Any]


def _as_file(path: Path, data: str, tmp: str, suffix: str) -> Path:
    """The flavor's data file under a name whose suffix picks our loader for it: a file
    inside the model's own folder (:func:`_inside`)."""
    src = _inside(path, data, "file")
    if not src.is_file():
        raise ModelFileError(f"MLflow model file {str(src)!r} is missing: the model is damaged")
    dst = Path(tmp) / f"model{suffix}"
    shutil.copyfile(src, dst)
    return dst


def _inside(path: Path, data: str, what: str) -> Path:
    """``path / data``, inside the model's own folder whatever the MLmodel says (an
    absolute path, ``..``, a URL or a link leading out of it is refused)."""
    src = path / data
    inside = src.resolve().is_relative_to(path.resolve())
    if "://" in data or Path(data).is_absolute() or not inside:
        raise ModelFileError(
            f"MLflow model {str(path)!r}: its MLmodel names the {what} {data!r}, outside the "
            "model's folder; an MLmodel names its files relative to its own folder"
        )
    return src


def _pickled(conf: dict[str, Any], ref: str, *, trusted: bool) -> None:
    fmt = conf.get("serialization_format", "cloudpickle")
    if fmt != "skops" and not trusted:
        raise UntrustedModelError(
            f"MLflow model {ref!r} is a {fmt} file: loading it runs arbitrary code. Log it "
            "with serialization_format='skops' (or the framework's own format), or pass "
            "trusted=True (--trusted) if you trust its author"
        )


def _load(path: Path, *, trusted: bool) -> Any:
    from . import load_model_file  # the package's loaders, by suffix

    return load_model_file(path, trusted=trusted)


def _xgboost(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    import xgboost

    data = str(conf.get("data", "model.xgb"))
    fmt = str(conf.get("model_format", Path(data).suffix.lstrip(".")))
    if fmt not in ("json", "ubj"):
        raise ModelFileError(
            f"MLflow model {ref!r} holds XGBoost's legacy binary format ({data}); log it "
            "again with model_format='ubj' or 'json'"
        )
    file = _as_file(path, data, tmp, f".{fmt}")
    kind = str(conf.get("model_class", "xgboost.core.Booster")).rsplit(".", 1)[-1]
    if kind not in _XGBOOST_CLASSES:
        raise ModelFileError(f"MLflow model {ref!r} names an unknown XGBoost class {kind!r}")
    model = getattr(xgboost, kind)()
    from ..errors import cause_line, translated

    with translated("model file", f"cannot read MLflow model {ref!r}", first_line=True):
        try:
            model.load_model(str(file))
        except TypeError as exc:  # XGBoost: the file is of another estimator type
            raise ModelFileError(
                f"MLflow model {ref!r}: its MLmodel names the class {kind}, but the file "
                f"holds another kind of model ({cause_line(exc, first_line=True)})"
            ) from exc
    return model


def _lightgbm(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    data = str(conf.get("data", "model.lgb"))
    if data.endswith(".lgb"):  # a Booster, saved as LightGBM's model text
        return _load(_as_file(path, data, tmp, ".txt"), trusted=trusted)
    _pickled(conf, ref, trusted=trusted)
    return _load(_as_file(path, data, tmp, Path(data).suffix), trusted=trusted)


def _sklearn(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    _pickled(conf, ref, trusted=trusted)
    data = str(conf.get("pickled_model", "model.pkl"))
    return _load(_as_file(path, data, tmp, Path(data).suffix), trusted=trusted)


def _catboost(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    suffix = ".json" if conf.get("save_format") == "json" else ".cbm"
    return _load(_as_file(path, str(conf.get("data", "model.cb")), tmp, suffix), trusted=trusted)


def _onnx(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    return _load(_as_file(path, str(conf.get("data", "model.onnx")), tmp, ".onnx"), trusted=trusted)


def _spark(path: Path, conf: dict[str, Any], tmp: str, *, trusted: bool, ref: str) -> Any:
    """The flavor's saved PipelineModel folder, read from its files (no SparkSession)."""
    folder = _inside(path, str(conf.get("model_data", "sparkml")), "folder")
    if not folder.is_dir():
        raise ModelFileError(
            f"MLflow model folder {str(folder)!r} is missing: the model is damaged"
        )
    return _load(folder, trusted=trusted)


_LOADERS: dict[str, Loader] = {
    "xgboost": _xgboost, "lightgbm": _lightgbm, "catboost": _catboost, "sklearn": _sklearn,
    "onnx": _onnx, "spark": _spark,
}  # fmt: skip


# -- the signature's feature names ---------------------------------------------------


def _signature_names(meta: Any) -> list[str] | None:
    """The column names of a column-based input signature (a tensor one has none)."""
    inputs = getattr(meta.signature, "inputs", None)
    if inputs is None or not inputs.has_input_names():
        return None
    return [str(n) for n in inputs.input_names()]


def _named(model: Any, names: list[str], ref: str) -> Any:
    """The model, its features named as the signature names them when it was trained on
    unnamed data; a model with other names of its own is refused (which would MLflow's
    ``predict`` take?)."""
    from .._inputs import feature_names
    from . import import_model

    forest = import_model(model)
    own = feature_names(forest)
    if own is not None:
        if own != names:
            raise ModelFileError(
                f"MLflow model {ref!r}: its signature names the features {names[:5]}... but "
                f"the model was trained on {own[:5]}...; log it again with a matching signature"
            )
        return model
    if len(names) != forest.n_features:
        raise ModelFileError(
            f"MLflow model {ref!r}: its signature has {len(names)} columns, the model "
            f"{forest.n_features} features; log it again with a matching signature"
        )
    return _rename(model, names, ref)


def _rename(model: Any, names: list[str], ref: str) -> Any:
    """The same model with ``names`` as its recorded feature names, in its own format
    (what the registry stores); refused by name where that cannot be done, so that a
    model is never read by position against a signature that names its columns."""
    from .._inputs import feature_names
    from . import framework_of, import_model

    renamed = framework_of(model).named(model, names)
    if renamed is None or feature_names(import_model(renamed)) != names:
        raise ModelFileError(
            f"MLflow model {ref!r}: its signature names the features {names[:5]}, but a "
            f"{type(model).__name__} trained on unnamed data cannot be given those names, so "
            "its columns would be read by position; train it on a DataFrame with those "
            "column names and log it again"
        )
    return renamed
