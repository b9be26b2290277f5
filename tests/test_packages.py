"""Ahead-of-time packages of the ``compiled`` walk (``fused`` on CUDA): left by the first
process, loaded by the next without compiling, never stale, never half written.

The suite runs with packages off (conftest); these tests turn them on in a folder of
their own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import scoring
from scoring._compiler import compile_forest
from scoring._compiler.native_cache import build_lock, publishing
from scoring._compiler.packages import PackageStore, default_store
from scoring._parity import probe_rows

from .conftest import built

#: A second process: compile the model file, score the rows, say whether Dynamo loaded.
_SECOND = """
import json, sys
import numpy as np
import scoring
cm = scoring.compile(sys.argv[1], backend="tensor", device="cpu", strategy="compiled")
raw = cm.predict_raw(np.load(sys.argv[2]))
print(json.dumps({"raw": raw.ravel().tolist(), "dynamo": "torch._dynamo" in sys.modules}))
"""


def _second_process(model_file: Path, rows_file: Path, store: Path) -> dict[str, object]:
    env = {**os.environ, "SCORING_COMPILE_CACHE": str(store)}
    args = [sys.executable, "-c", _SECOND, str(model_file), str(rows_file)]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_second_process_loads_the_package_without_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "packages"
    monkeypatch.setenv("SCORING_COMPILE_CACHE", str(store))
    model, forest, native = built("xgb_reg")
    model_file, rows_file = tmp_path / "model.json", tmp_path / "rows.npy"
    model.save_model(model_file)
    rows = probe_rows(forest, n_rows=300, seed=4).astype(np.float32)
    np.save(rows_file, rows)

    cm = scoring.compile(str(model_file), backend="tensor", device="cpu", strategy="compiled")
    first = cm.predict_raw(rows)
    blocks = cm.implementation.module.kernel.blocks
    assert blocks.store is not None and blocks.store.wait() == [0]  # the builder succeeded
    # no log or partial left; the build locks stay in their folder (deleting a lock file
    # another process has open would let two builders in)
    built_files = [p.suffix for p in store.iterdir() if p.name != "locks"]
    assert built_files == [".pt2"] and (store / "locks").is_dir()

    second = _second_process(model_file, rows_file, store)
    assert second["dynamo"] is False  # loaded, not traced or compiled
    np.testing.assert_array_equal(np.asarray(second["raw"]).reshape(first.shape), first)
    np.testing.assert_allclose(first, native.predict_raw(rows), rtol=1e-6, atol=1e-6)


def _walk_digest(forest: object, store: PackageStore, rows: torch.Tensor) -> str:
    module, _ = compile_forest(forest, device=torch.device("cpu"), strategy="compiled")  # type: ignore[arg-type]
    blocks = module.kernel.blocks  # type: ignore[union-attr]
    return store.digest(blocks.walk, rows)


def test_the_digest_follows_the_tables_not_the_name(tmp_path: Path) -> None:
    """A retrained model (here: one threshold moved) or another dtype never meets the
    package of the old one; the same model built twice does."""
    _, forest, _ = built("lgb_reg")
    store = PackageStore(tmp_path)
    rows = torch.zeros((4096, forest.n_features), dtype=torch.float32)
    digest = _walk_digest(forest, store, rows)
    assert _walk_digest(forest, store, rows) == digest
    assert _walk_digest(forest, store, rows.double()) != digest
    tree = forest.trees[3]
    inner = int(np.flatnonzero(~tree.is_leaf)[-1])
    moved = tree.threshold.copy()
    moved[inner] = np.nextafter(moved[inner], np.inf)
    retrained = dataclasses.replace(
        forest, trees=[*forest.trees[:3], dataclasses.replace(tree, threshold=moved),
                       *forest.trees[4:]],
    )  # fmt: skip
    assert _walk_digest(retrained, store, rows) != digest


def test_an_unreadable_package_is_dropped_and_the_model_compiles(tmp_path: Path) -> None:
    store = PackageStore(tmp_path)
    (tmp_path / "abc.pt2").write_bytes(b"PK\x03\x04 cut short by a crash")
    with pytest.raises(KeyError):
        store.load("abc", torch.device("cpu"))
    assert not (tmp_path / "abc.pt2").exists()


#: A process that holds a package's build lock until it is killed.
_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_one_builder_per_package_and_a_dead_builders_lock_is_gone(tmp_path: Path) -> None:
    module = torch.nn.Softplus()  # any module: the tiniest package to build
    store = PackageStore(tmp_path)
    rows = torch.zeros((8, 3))
    (tmp_path / "locks").mkdir()
    lock = tmp_path / "locks" / "d1.pt2.lock"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        store.build_later(module, rows, "d1")  # another process is building d1
        assert store.pending == []
    finally:
        holder.kill()  # the builder dies: its lock goes with it
        holder.wait()
    store.build_later(module, rows, "d1")
    assert len(store.pending) == 1
    assert store.wait() == [0] and (tmp_path / "d1.pt2").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d1.pt2", "locks"]  # nothing half done


def test_a_folder_others_can_write_to_is_never_loaded_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # past the umask
    monkeypatch.setenv("SCORING_COMPILE_CACHE", str(shared))
    with pytest.warns(RuntimeWarning, match="chmod 700"):
        assert default_store() is None
    shared.chmod(0o700)
    assert default_store() is not None
    monkeypatch.setenv("SCORING_COMPILE_CACHE", "off")
    assert default_store() is None


def test_the_wheel_holds_the_scoring_package_alone() -> None:
    """Nothing but ``scoring`` goes into site-packages: a top-level ``models`` (the
    recipes' old home) would shadow a user's own module of that name."""
    import tomllib
    from setuptools import find_packages

    root = Path(__file__).parent.parent
    found = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(root), include=found["packages"]["find"]["include"])
    assert packages and all(p == "scoring" or p.startswith("scoring.") for p in packages)
    assert "scoring.recipes" not in packages  # a module of the package, not a package
    import scoring.recipes

    assert scoring.recipes.DEMO_RECIPE.name == "xgb_500x8"


def test_a_child_given_the_build_lock_keeps_it_after_its_parent_lets_go(tmp_path: Path) -> None:
    with build_lock(tmp_path, "x") as fd:
        assert fd is not None
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE, pass_fds=(fd,))  # fmt: skip
    try:
        with build_lock(tmp_path, "x", wait=False) as held:
            assert held is None  # the child has it
    finally:
        child.kill()
        child.wait()
    with build_lock(tmp_path, "x", wait=False) as held:
        assert held is not None


def test_a_failed_build_leaves_nothing_and_the_old_file_stands(tmp_path: Path) -> None:
    target = tmp_path / "a.so"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), publishing(target) as partial:
        partial.write_bytes(b"half")
        raise RuntimeError("the compiler died")
    assert sorted(tmp_path.iterdir()) == [target] and target.read_bytes() == b"old"
    with publishing(target) as partial:
        partial.write_bytes(b"new")
    assert sorted(tmp_path.iterdir()) == [target] and target.read_bytes() == b"new"
