"""Shared fixtures: every recipe in scoring.recipes.SMALL_RECIPES built once per session."""

from __future__ import annotations

import os

# OpenMP threads (torch's, LightGBM's, XGBoost's libgomp) sleep while they wait rather
# than spin: the suite runs two processes on two cores, and a spinning pool takes the
# core the other process needs (measured: half the time and CPU of the in-process
# files).  libgomp reads it once, when it loads: before anything imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring._backends.native import NativeBackend
from scoring._frameworks import import_model, model_object
from scoring._ir import Forest
from scoring._parity import as_frame
from scoring.recipes import EXCHANGE_RECIPES, SMALL_RECIPES, Recipe

warnings.filterwarnings("ignore", category=UserWarning)
# No background package builders (scoring/_compiler/packages.py) for every fused model
# the suite compiles: test_packages.py turns them on where it tests them.
os.environ["SCORING_COMPILE_CACHE"] = "off"
# One Ray authentication mode for the whole session, fixed before anything imports Ray: a
# driver reads it once per process, and a local ray.init() (test_ray.py) switches it to
# "token" in os.environ, so without this the mode depended on test order and on whether
# ~/.ray/auth_token existed.  A token-mode driver on a cluster without authentication
# (test_ray_cluster.py) sees every actor "cancelled before it started running".
os.environ.setdefault("RAY_AUTH_MODE", "token")
# The per-user default registry (platformdirs: $XDG_DATA_HOME/scoring) of a command run
# without --registry or SCORING_HOME lands here, not in the home directory.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="scoring-data-")
os.environ.pop("SCORING_HOME", None)

RECIPES = {r.name: r for r in SMALL_RECIPES}
#: Every recipe by name, the exchange formats' too (ONNX-ML, Spark ML): the parity suite's.
ALL_RECIPES = {**RECIPES, **{r.name: r for r in EXCHANGE_RECIPES}}


def pytest_configure(config: pytest.Config) -> None:
    """Before the suite's processes start (``make test`` runs two): Ray's token made once,
    so that no two of them make one each at the same time."""
    ray = Path(sys.executable).parent / "ray"
    token = Path.home() / ".ray" / "auth_token"
    if hasattr(config, "workerinput") or token.exists() or not ray.exists():
        return
    if os.environ["RAY_AUTH_MODE"] == "token":
        subprocess.run([str(ray), "get-auth-token", "--generate"], capture_output=True)


@contextlib.contextmanager
def as_a_script() -> Iterator[None]:
    """A block that imports ``pyspark.sql.connect`` (``mlflow.spark.save_model`` does):
    pyspark takes a ``__main__`` without ``__file__`` (pytest-xdist's workers) for a
    doctest run and exits the process; ``sys.ps1`` tells it otherwise."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "ps1", "", raising=False)
        yield


#: The slowest test files, the slowest first (from make test's durations; two processes,
#: a quiet 2-core machine).  make test hands out whole files in collection order
#: (``--dist loadfile --no-loadscope-reorder``): the long ones start first, so that the
#: two processes end together rather than one finishing a long file alone.  The two
#: cluster files are apart, as each alone loads both cores.  Files not named follow in
#: their usual order.
SLOWEST_FIRST = [
    "test_autoscale.py", "test_parity.py", "test_spark_cluster.py", "test_ray.py",
    "test_incremental.py",
    "test_docs.py", "test_incremental_keys.py", "test_publication.py", "test_spark.py",
    "test_sparkml.py",
    "test_ray_cluster.py", "test_error_sites.py", "test_filter_spark.py", "test_delta.py",
    "test_iceberg.py", "test_gpu_image.py", "test_triton_walk.py", "test_jobs.py",
    "test_registry.py", "test_gpu_suite.py", "test_mlflow.py", "test_packages.py",
    "test_model_files.py", "test_contributions.py", "test_compile.py", "test_generic.py",
    "test_report_page.py",
]  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`SLOWEST_FIRST` first, in its order (a stable sort: each file's
    tests keep theirs)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@cache
def built(name: str) -> tuple[Any, Forest, NativeBackend]:
    if not ALL_RECIPES[name].available:  # an optional extra (CatBoost) that is not installed
        pytest.skip(f"{ALL_RECIPES[name].framework} is not installed")
    model = ALL_RECIPES[name].build()  # a search or a Pipeline as fitted: the user's object
    forest = import_model(model)
    return model, forest, NativeBackend(model_object(model), forest)


def as_model_input(recipe: Recipe, rows: np.ndarray, forest: Forest) -> Any:
    """Rows as the model was trained: for frame recipes a frame with category columns
    (or an encoder's labels), an unknown code becoming a label never seen."""
    return as_frame(rows, forest) if recipe.frame else rows


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A real PostgreSQL server (pgserver's own binaries), on a Unix socket in a temporary
    directory of its own (pytest removes its older base directories, which another
    pytest run on the machine may do mid-session), stopped and removed after."""
    pgserver = pytest.importorskip("pgserver", reason="pgserver (PostgreSQL) is not installed")
    pytest.importorskip("psycopg", reason="psycopg (the PostgreSQL driver) is not installed")
    data = tempfile.mkdtemp(prefix="pg-")  # short: a Unix socket path has a limit
    server = pgserver.get_server(data, cleanup_mode="stop")
    yield server
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def new_postgres_database(postgres_server: Any) -> Callable[[], str]:
    """Makes a fresh, empty database on :func:`postgres_server`: its SQLAlchemy URL."""

    def create() -> str:
        name = f"registry_{uuid.uuid4().hex[:12]}"
        postgres_server.psql(f"CREATE DATABASE {name};")
        url = postgres_server.get_uri(name)
        return str(url).replace("postgresql://", "postgresql+psycopg://", 1)

    return create


@pytest.fixture
def postgres_url(new_postgres_database: Callable[[], str]) -> str:
    return new_postgres_database()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a server a test starts)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different such ports: each probe stays bound until all are, since one
    closed before the next is asked for may be handed out again (a Spark master once got
    its web UI's port for its own, and the test waited on the wrong one)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3 API (moto's server, its own process on 127.0.0.1), with the AWS
    settings every S3 client here reads from the environment pointing at it."""
    pytest.importorskip("moto.server", reason="moto[server] (an S3 API) is not installed")
    pytest.importorskip("s3fs", reason="s3fs (fsspec's S3 filesystem) is not installed")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    _wait_for_port(port, server)
    with pytest.MonkeyPatch.context() as env:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }.items():
            env.setenv(key, value)
        yield endpoint
    server.terminate()
    server.wait()


def _wait_for_port(port: int, server: subprocess.Popen[bytes]) -> None:
    """Until the server accepts connections (or has exited: then fail, saying so)."""
    while server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"the S3 server exited with {server.returncode} before accepting connections")


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A new, empty bucket: its ``s3://`` URL."""
    import fsspec

    name = f"bucket-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3").mkdir(name)
    return f"s3://{name}"


@pytest.fixture(params=sorted(RECIPES))
def recipe_name(request: pytest.FixtureRequest) -> str:
    return request.param


def sql_catalog(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Iceberg catalog ``name``: SQLite and a warehouse in ``folder``, configured as
    users do, in the environment (a child process a test starts sees it too), with the
    namespace ``sales``."""
    from pyiceberg.catalog import load_catalog

    settings = {"TYPE": "sql", "URI": f"sqlite:///{folder}/catalog.db",
                "WAREHOUSE": f"file://{folder}/warehouse"}  # fmt: skip
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{key}", value)
    catalog = load_catalog(name, **{k.lower(): v for k, v in settings.items()})
    catalog.create_namespace("sales")
    return catalog
