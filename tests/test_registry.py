"""The registry on a local root and on a ``memory://`` root, with the same tests."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

import scoring
from scoring import Bundle
from scoring._parity import TOLERANCE, max_error, probe_frame
from scoring.errors import (
    ConfigError,
    IntegrityError,
    ModelNotFoundError,
    RegistryAccessError,
    RegistryError,
    UnsupportedModelError,
    UntrustedModelError,
    VerificationError,
)

from .conftest import built


@pytest.fixture(params=["local", "memory", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> scoring.Registry:
    if request.param == "local":
        return scoring.Registry(tmp_path / "registry")
    if request.param == "postgresql":  # a real server: metadata there, artifacts local
        url = request.getfixturevalue("postgres_url")
        return scoring.Registry(tmp_path / "registry", db_url=url)
    return scoring.Registry(f"memory://registry-{uuid.uuid4().hex}")


def _artifact_files(reg: scoring.Registry) -> list[str]:
    root = f"{reg.store.root}/artifacts"
    if not reg.store.fs.exists(root):
        return []
    return [p for p in reg.store.fs.find(root) if not p.endswith("/")]


def test_versions_and_aliases(registry: scoring.Registry) -> None:
    model, _, _ = built("xgb_clf")
    v1 = registry.register("churn", model, tags={"team": "risk"}, description="first")
    v2 = registry.register("churn", built("lgb_clf")[0])
    assert (v1.version, v2.version) == (1, 2)
    assert v1.verified and v1.tags == {"team": "risk"} and v1.description == "first"
    assert v1.schema.framework == "xgboost" and v2.schema.model_kind == "LGBMClassifier"
    assert registry.get("churn").version == 2  # a bare name is the latest version
    assert registry.get("churn@1").sha256 == v1.sha256
    assert registry.get("churn", version=2).sha256 == v2.sha256

    registry.set_alias("churn", "production", 1)
    assert registry.get("churn@production").version == 1
    registry.set_alias("churn", "production", 2)  # aliases move
    assert registry.get("churn@production").version == 2
    assert registry.get("churn@2").aliases == ["production"]
    registry.set_tag("churn@1", "owner", "ana")
    assert registry.get("churn@1").tags == {"team": "risk", "owner": "ana"}

    assert [mv.version for mv in registry.versions("churn")] == [1, 2]
    assert [mv.ref for mv in registry.list()] == ["churn@2"]

    with pytest.raises(RegistryError, match="production"):
        registry.delete_version("churn", 2)  # an alias points to it
    registry.delete_version("churn", 1)
    assert [mv.version for mv in registry.versions("churn")] == [2]
    assert registry.register("churn", model).version == 3  # numbers are never reused
    registry.delete_alias("churn", "production")
    with pytest.raises(ModelNotFoundError, match="production"):
        registry.get("churn@production")


def test_unknown_names_and_aliases_are_typed(registry: scoring.Registry) -> None:
    with pytest.raises(ModelNotFoundError, match="'nope'"):
        registry.get("nope@production")
    registry.register("known", built("xgb_reg")[0])
    with pytest.raises(ModelNotFoundError, match="'staging'"):
        registry.get("known@staging")
    with pytest.raises(ModelNotFoundError, match="version 7"):
        registry.get("known@7")
    with pytest.raises(ModelNotFoundError, match=r"'known'.*'gone'"):
        registry.delete_alias("known", "gone")
    with pytest.raises(RegistryError, match="not valid"):
        registry.register("bad/name", built("xgb_reg")[0])
    with pytest.raises(RegistryError, match="reserved"):
        registry.set_alias("known", "12", 1)


def test_a_near_miss_is_named_as_what_is_missing_with_the_nearest_name(
    registry: scoring.Registry,
) -> None:
    """A typo in the model's name says the model does not exist (not that it has no
    such alias) and names the nearest; a wrong alias or version says what there is."""
    registry.register("churn", built("xgb_reg")[0])
    registry.set_alias("churn", "production", 1)
    with pytest.raises(ModelNotFoundError, match=r"no model named 'chrun'.*did you mean 'churn'"):
        registry.get("chrun@production")
    with pytest.raises(
        ModelNotFoundError, match=r"no alias 'prodution'.*did you mean 'production'"
    ):
        registry.get("churn@prodution")
    with pytest.raises(ModelNotFoundError, match=r"no alias 'nightly'.*holds: production"):
        registry.get("churn@nightly")
    with pytest.raises(ModelNotFoundError, match=r"no version 7 .*\(versions: 1\)"):
        registry.get("churn@7")
    with pytest.raises(ModelNotFoundError, match=r"no model named 'upsell'.*holds: churn"):
        registry.versions("upsell")


@pytest.mark.parametrize("name", ["xgb_multi", "xgb_booster_cat", "lgb_cat_frame", "sk_hgb_frame"])
def test_parity_after_load(registry: scoring.Registry, name: str) -> None:
    model, forest, native = built(name)
    registry.register(name, model)
    X = probe_frame(forest)
    for backend in ("tensor", "native"):
        cm = registry.load(f"{name}@1", backend=backend, device="cpu")
        assert cm.origin["version"] == 1 and cm.forest.model_kind == forest.model_kind
        if forest.task in ("binary", "multiclass"):
            np.testing.assert_allclose(cm.predict_proba(X), native.predict_proba(X), atol=1e-5)
        if forest.predict_returns == "label":
            np.testing.assert_array_equal(cm.predict(X), native.predict(X))
        else:
            np.testing.assert_allclose(cm.predict(X), native.predict(X), rtol=1e-5, atol=1e-5)


def test_flipped_byte_is_refused(registry: scoring.Registry) -> None:
    mv = registry.register("m", built("lgb_reg")[0])
    (artifact,) = [p for p in _artifact_files(registry) if "/model." in p]
    data = bytearray(registry.store.fs.cat_file(artifact))
    data[len(data) // 2] ^= 0x01
    registry.store.fs.pipe_file(artifact, bytes(data))
    with pytest.raises(IntegrityError, match=mv.sha256):
        registry.load("m@1")
    with pytest.raises(IntegrityError):
        registry.bundle("m@1")


def test_unsupported_or_untrusted_models_store_nothing(
    registry: scoring.Registry, tmp_path: Path
) -> None:
    with pytest.raises(UnsupportedModelError):
        registry.register("lin", LinearRegression().fit(np.eye(3), [1.0, 2.0, 3.0]))
    path = tmp_path / "model.pkl"
    joblib.dump(built("sk_rf_clf")[0], path)
    with pytest.raises(UntrustedModelError, match="pickle"):
        registry.register("pickled", path)
    assert _artifact_files(registry) == []
    with pytest.raises(ModelNotFoundError):
        registry.versions("pickled")
    mv = registry.register("pickled", path, trusted=True)
    assert mv.version == 1 and mv.artifact_uri.endswith("model.skops")


def test_failed_verification_blocks_promotion(
    registry: scoring.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scoring._parity.TOLERANCE", -1.0)  # nothing can pass
    mv = registry.register("m", built("xgb_reg")[0])
    assert not mv.verified and not mv.verification["cpu"].passed
    with pytest.raises(VerificationError, match="m@1"):
        registry.set_alias("m", "production", 1)
    registry.set_alias("m", "production", 1, force=True)
    assert registry.get("m@production").version == 1


def test_bundle_compiles_without_the_registry(registry: scoring.Registry) -> None:
    model, forest, native = built("lgb_cat_frame")
    registry.register("b", model)
    payload = registry.bundle("b@1").to_bytes()
    registry.engine.dispose()
    bundle = Bundle.from_bytes(payload)
    assert bundle.ref == "b@1" and bundle.manifest["format_version"] == 1
    X = probe_frame(forest)
    cm = scoring.compile(bundle, backend="tensor", device="cpu")
    np.testing.assert_array_equal(cm.predict(X), native.predict(X))
    broken = bytearray(payload)
    broken[payload.index(b"tree\n") + 20] ^= 0x01  # a byte inside the model text
    with pytest.raises(IntegrityError, match="corrupted"):
        Bundle.from_bytes(bytes(broken))
    swapped = Bundle(
        manifest=bundle.manifest, model_bytes=bundle.model_bytes.replace(b"tree\n", b"tree \n", 1)
    )
    with pytest.raises(IntegrityError, match="b@1"):
        scoring.compile(swapped)


def test_sample_is_verified_and_kept(registry: scoring.Registry) -> None:
    model, forest, _ = built("sk_hgb_frame")
    X = probe_frame(forest, n_rows=300)
    mv = registry.register("s", model, sample=X)
    assert mv.verification["cpu"].rows == 2048 + 300
    again = registry.verify("s@1")
    assert again.verified and again.verification["cpu"].rows == 2048 + 300


def test_registry_root_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(RegistryAccessError, match="not writable"):
        scoring.Registry(blocker / "registry")


def test_a_registry_that_is_not_a_path_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for wrong in ({"root": "models"}, 7):
        named = f"registry: expected a folder, a URL or a Registry, got {type(wrong).__name__}"
        with pytest.raises(ConfigError, match=named):
            scoring.Registry(wrong)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=named):
            scoring.score_parquet("in", "out", "m@1", registry=wrong)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # no folder named after the object


def test_scoring_home_is_the_default_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORING_HOME", str(tmp_path / "home"))
    scoring.Registry().register("m", built("xgb_reg")[0])
    assert (tmp_path / "home" / "registry.db").is_file()
    assert scoring.Registry(tmp_path / "home").get("m").version == 1


def _register_from(args: tuple[str, str | None, str | None, Any]) -> int:
    """Open the registry (and register ``path``) when every process is ready."""
    root, db_url, path, barrier = args
    barrier.wait()
    registry = scoring.Registry(root, db_url=db_url)
    return 0 if path is None else registry.register("shared", path).version


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_concurrent_registrations_take_distinct_numbers(
    tmp_path: Path, request: pytest.FixtureRequest, database: str
) -> None:
    """Eight processes open a registry no one has created yet (its tables too) at the
    same moment, on three fresh databases; then register one name at once: versions
    1..8, none lost or taken twice.  (PostgreSQL: two of eight opens failed in two of
    three rounds, on its catalog's unique key, before the tables were created under a
    lock.)"""
    model, _, _ = built("xgb_reg")
    path = tmp_path / "model.json"
    model.save_model(path)
    fresh = request.getfixturevalue("new_postgres_database") if database == "postgresql" else None
    # Each process forked from one that has imported this module (and with it scoring):
    # not eight fresh interpreters importing torch at once, which the race does not need.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    with ctx.Manager() as manager, ctx.Pool(8) as pool:
        for round_ in range(4):
            root = str(tmp_path / f"registry-{round_}")  # created by whoever comes first
            db_url = fresh() if fresh else None
            model_path = str(path) if round_ == 3 else None
            barrier = manager.Barrier(8)
            got: list[Any] = pool.map(_register_from, [(root, db_url, model_path, barrier)] * 8)
    assert sorted(got) == list(range(1, 9))
    versions = scoring.Registry(root, db_url=db_url).versions("shared")
    assert [mv.version for mv in versions] == list(range(1, 9))


@pytest.mark.parametrize("name", ["xgb_clf", "lgb_reg", "sk_rf_clf", "sk_pipe_onehot"])
def test_identical_bytes_registered_again_stand_alone(
    registry: scoring.Registry, name: str
) -> None:
    model, forest, native = built(name)
    X = probe_frame(forest, n_rows=200)
    first = registry.register("churn", model, sample=X)
    again = registry.register("churn", model, sample=X)  # same bytes, same sample
    other = registry.register("upsell", model)  # same bytes under another name
    assert first.sha256 == again.sha256 == other.sha256  # one model: one identity
    assert len(_artifact_files(registry)) == 2  # one model file and one sample, shared
    for ref in ("churn@2", "upsell@1"):
        assert max_error(registry.load(ref, backend="tensor").predict(X), native.predict(X)) <= (
            TOLERANCE
        )
    assert registry.verify("churn@2").verified
    registry.delete_version("churn", 1)  # the bytes stay: churn@2 and upsell@1 hold them
    assert registry.verify("churn@2").verified and registry.load("upsell@1") is not None
    registry.delete_version("churn", 2)  # upsell@1 still holds the model, nobody the sample
    assert len(_artifact_files(registry)) == 1
    np.testing.assert_array_equal(
        registry.load("upsell@1", backend="native").predict(X), native.predict(X)
    )
    registry.delete_version("upsell", 1)
    assert _artifact_files(registry) == []


def test_run_history_and_reference_profiles_on_every_database(
    registry: scoring.Registry,
) -> None:
    """The job history (the latest runs, oldest first) and a version's drift reference:
    stored with it, absent without a sample, deleted with it (PostgreSQL enforces the
    foreign key)."""
    from datetime import datetime, timedelta, timezone

    from scoring._catalog import reference_profile
    from scoring._frameworks import import_model
    from scoring._registry import RunRecord

    job = f"job-{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is shared
    start = datetime(2026, 11, 1, 1, 0, tzinfo=timezone.utc)
    for day, (outcome, code) in enumerate([("ok", 0), ("late", 4), ("failed", 1)]):
        registry.runs.add(RunRecord(
            job=job, started_at=start + timedelta(days=day), outcome=outcome, exit_code=code,
            finished_at=start + timedelta(days=day, seconds=60 + day), stages={"plan": 1.5},
        ))  # fmt: skip
    found = registry.runs.list(job, limit=2)
    assert [(r.outcome, r.exit_code, r.seconds) for r in found] == [
        ("late", 4, 61),
        ("failed", 1, 62),
    ]
    assert found[0].started_at == start + timedelta(days=1) and found[0].stages == {"plan": 1.5}
    assert registry.runs.list("no-such-job") == []

    model, _, _ = built("lgb_cat_frame")
    X = probe_frame(import_model(model), n_rows=300)
    plain = registry.register("profiled", model)
    sampled = registry.register("profiled", model, sample=X)
    assert registry.reference(plain) is None
    stored = registry.reference(sampled)
    assert stored == reference_profile(model, import_model(model), X) and stored.rows == 300
    registry.delete_version("profiled", sampled.version)
    assert [mv.version for mv in registry.versions("profiled")] == [plain.version]
