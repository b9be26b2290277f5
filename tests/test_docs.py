"""The README's and the documentation site's examples, run as written against local data.

Every fenced block of ``README.md`` and of the pages under ``docs/`` is placed: a
``python`` or ``sh`` block is run here (:data:`RUN`) or listed in :data:`LEFT_OUT` with
the reason (a cluster, an object store or a database the example names, each exercised
by its own test module on local servers); every ``toml`` block is a job file, or a part
of one, validated against the job file's schema.  A block is known by its first lines,
so an edited example is run as edited, and a new one fails
:func:`test_every_example_is_run_or_left_out_with_a_reason` until it is placed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import scoring

from . import zygote

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
SCORING = str(Path(sys.executable).with_name("scoring"))

#: Blocks not run here, by first line, and why.
LEFT_OUT = {
    "make demo": "the two make targets themselves: CI runs `make test`, and `make demo` is "
    "timed on a fresh clone (docs/performance.md)",
    "pip install '.[delta,s3,mlflow]'": "an install: `make install` installs the same "
    "package with every extra",
    "30 0 * * *": "a crontab line: test_readme_job_quickstart runs its command",
    "pip install -e '.[postgres,s3]'": "a PostgreSQL database and an S3 bucket: "
    "test_registry.py and test_object_store.py run the same commands on local servers",
    "scoring score --model churn@production --input s3://": "the synopsis of every "
    "option (square brackets); its calls run in test_score_parquet.py",
    "scoring score --input features/ --output scores/ --keep customer_id \\\n    --model "
    "churn=churn_eu": "models scored WHERE a condition holds: test_many_models.py",
    "# an existing cluster": "a Ray cluster at head-node: test_ray_cluster.py",
    "import ray, scoring.ray": "an S3 bucket: test_ray.py runs score_dataset on local files",
    "spark-submit --master spark://head:7077": "a Spark cluster with GPUs",
    "pip install -e '.[ray,spark,postgres,s3]'": "a cluster's nodes and their object store: "
    "test_ray_cluster.py",
    "export RAY_AUTH_MODE=token": "a two-node Ray: test_ray_cluster.py starts it so",
    "spark-class org.apache.spark.deploy.master.Master": "a Spark standalone cluster: "
    "test_spark_cluster.py starts it so",
    "pip install -e '.[mlflow]'": "an MLflow tracking server: test_mlflow.py runs it "
    "against the one it starts",
    "import mlflow\nimport scoring\n\ncm = scoring.compile(": "an MLflow tracking "
    "server: test_mlflow.py runs it against the one it starts",
    "catalog:\n  lake:": "pyiceberg's own configuration file: the tests configure the same "
    "catalog through the environment, as the next block does (test_iceberg_example)",
    "from pyiceberg.catalog import load_catalog": "run by test_iceberg.py's test of the "
    "page's job file, on the table that job writes",
    'registry.register("churn", pipeline_model)': "a Spark ML pipeline fitted in a "
    "session: test_sparkml.py registers such models (objects, folders, s3://) and scores "
    "them through the SQL function",
    "make image": "podman: `make image` was run and its result recorded "
    "(benchmarks/results/image_cpu.md); test_deploy.py validates the Containerfile",
    "kubectl kustomize deploy/kubernetes/overlays/gpu": "a Kubernetes cluster: "
    "test_deploy.py renders every overlay and one per job file, and validates them",
}


def blocks(kind: str | None = None) -> list[str]:
    """The fenced blocks of the README and the docs, of language ``kind`` (every block
    when None), in order."""
    found = []
    for page in PAGES:
        for lang, code in re.findall(r"^```([a-z]*)\n(.*?)^```", page.read_text(),
                                     flags=re.S | re.M):  # fmt: skip
            if kind is None or lang == kind:
                found.append(code)
    return found


def block(first_line: str) -> str:
    (found,) = [b for b in blocks() if b.startswith(first_line)]
    return found


RUN = [
    "import scoring\n\ncm = scoring.compile(model",
    "export SCORING_HOME=/srv/scoring",
    "reg = scoring.Registry()",
    "report = scoring.score_parquet(input, output",
    "scoring score --input features/ --output scores/ --keep customer_id \\\n    --model "
    "churn@production",
    'report = scoring.score_parquet("features/", "scores/", [',
    "from scoring.spark import local_session",
    "import deltalake\nimport pandas as pd",
    "scoring score --model churn@production --input features_delta/",
    "events = pd.read_parquet(",
    "scoring score --model churn@production --input iceberg:lake.sales.features",
    "export PYICEBERG_CATALOG__LAKE__TYPE=sql",
    "scoring models register churn.ubj --name churn --sample sample.parquet   # churn@1",
    'import scoring\n\ncm = scoring.Registry().load("churn@production")',
    "export RUN_DATE=2026-11-21",
    "from pyspark.ml.functions import predict_batch_udf",
    "RUN_DATE=2026-10-01 scoring run jobs/nightly.toml --deadline 2h",
]


def test_every_example_is_run_or_left_out_with_a_reason() -> None:
    tomls = blocks("toml")  # each checked by test_every_toml_block_is_a_job_file
    for code in blocks():
        placed = [k for k in [*RUN, *LEFT_OUT] if code.startswith(k)]
        assert code in tomls or len(placed) == 1, f"example not placed: {code[:80]!r}"


def test_the_output_formats_table_is_the_registrys() -> None:
    """docs/batch.md's table of output formats states what the format registry says of
    each: every registered format has its row, and each row its capabilities."""
    from scoring._formats import FORMATS

    text = (ROOT / "docs" / "batch.md").read_text()
    section = text.split("## Output formats", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| `")]  # fmt: skip
    followed = {"files": "new input files", "feed": "the change data feed",
                "appends": "appended snapshots"}  # fmt: skip
    yes = {True: "yes", False: "no"}
    documented = {row[0].strip("`"): row[1:] for row in rows}
    assert sorted(documented) == sorted(FORMATS)
    for name, kind in FORMATS.items():
        output, modes, partitions, merges, versions, follows = documented[name]
        assert ("folder" in output) is not kind.table, name
        assert modes.split(", ") == list(kind.modes), name
        assert [partitions, merges, versions] == [
            yes[kind.partitions],
            yes[kind.merges],
            yes[kind.time_travel],
        ], name
        assert follows == followed[kind.changes], name


def test_every_toml_block_is_a_job_file() -> None:
    """A block with a name, input and output is a whole job file and loads as one; any
    other is a part of one (keys, tables), valid with the keys it leaves out filled."""
    from scoring.jobs._spec import JobSpec

    tomls = blocks("toml")
    assert len(tomls) >= 7  # the README's, and one each on 6 pages: none went unseen
    for code in tomls:
        text = re.sub(r"\$\{([A-Z_]+)\}", "2026-11-21", code)
        keys = tomllib.loads(text)
        whole = {"name", "input", "output"} <= set(keys)
        filled = keys if whole else {"name": "part", "input": "in/", "output": "out/", **keys}
        if "models" not in filled and "model" not in filled:
            filled["model"] = "churn@production"
        JobSpec.model_validate(filled)


FEATURES = ["tenure", "plan", "spend"]


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(rows, 3)).astype(np.float32), columns=FEATURES)
    return X


def _model(seed: int, trees: int = 5) -> xgb.XGBClassifier:
    X = _frame(2000, seed)
    return xgb.XGBClassifier(n_estimators=trees, max_depth=3).fit(X, X.tenure > X.spend)


@pytest.fixture()
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The examples' world, in a temporary folder that is also the working directory:
    a default registry ($SCORING_HOME) holding churn (versions 1 to 7, production on
    the last), upsell, and ``features/``, ``churn.ubj`` and ``sample.parquet`` beside."""
    monkeypatch.setenv("SCORING_HOME", str(tmp_path / "registry"))
    monkeypatch.chdir(tmp_path)
    reg = scoring.Registry()
    for version in range(1, 8):
        reg.register("churn", _model(version, trees=3 + version))
    reg.set_alias("churn", "production", 7)
    reg.register("upsell", _model(11))
    reg.set_alias("upsell", "production", 1)
    (tmp_path / "features").mkdir()
    for i in range(2):
        part = _frame(1500, 20 + i).assign(customer_id=np.arange(i * 1500, (i + 1) * 1500))
        part.to_parquet(tmp_path / "features" / f"part-{i}.parquet")
    _model(30).save_model(tmp_path / "churn.ubj")
    _frame(500, 31).to_parquet(tmp_path / "sample.parquet")
    return tmp_path


def test_compile_example(lake: Path) -> None:
    model, X = _model(1), _frame(100, 2)
    exec(block(RUN[0]), {"model": model, "X": X})


def test_registry_examples(lake: Path) -> None:
    code = block(RUN[2])
    namespace: dict[str, Any] = {"scoring": scoring, "model": _model(3),
                                 "X_sample": _frame(300, 4)}  # fmt: skip
    exec(code, namespace)
    assert namespace["cm"].predict_proba(_frame(10, 5)).shape == (10, 2)


def test_batch_scoring_examples(lake: Path) -> None:
    namespace = {"scoring": scoring, "input": "features/", "output": "scores-one/"}
    exec(block(RUN[3]), namespace)
    assert namespace["report"].rows == 3000
    code = block(RUN[5])
    # Its last two lines are the same list on a Ray Dataset and a Spark DataFrame, lazy
    # calls test_ray.py and test_spark.py make on their own sessions.
    lines = code.splitlines()
    assert lines[-2].startswith("scoring.ray.") and lines[-1].startswith("scoring.spark.")
    exec("\n".join(lines[:-2]), namespace)
    columns = pd.read_parquet("scores/").columns
    assert {"churn__probability", "challenger__probability", "upsell__probability"} <= set(columns)


def _sh(code: str, lake: Path) -> str:
    """A shell block run as a bash script that stops at its first failure, ``scoring``
    this venv's (forked from the suite's zygote: tests/zygote.py); its standard output."""
    path = [str(zygote.cli_folder()), str(Path(SCORING).parent), os.environ["PATH"]]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    done = subprocess.run(["bash", "-e", "-c", code], cwd=lake, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_registry_commands(lake: Path) -> None:
    """Run with the registry root its first line exports pointed at the test's own."""
    said = _sh(block(RUN[1]).replace("/srv/scoring", str(lake / "registry-sh"), 1), lake)
    assert "churn@1" in said and '"production"' in said  # listed, then shown as JSON
    assert (lake / "registry-sh").is_dir()


def test_many_models_command(lake: Path) -> None:
    _sh(block(RUN[4]), lake)
    assert "upsell__probability" in pd.read_parquet(lake / "scores").columns


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_spark_example(lake: Path) -> None:
    pytest.importorskip("pyspark")
    namespace: dict[str, Any] = {}
    code = block(RUN[6]).replace("local_session()", 'local_session("local[1]")', 1)
    # Spark reads a relative path from its JVM's working directory, which the first
    # session of this process fixed (another test module's, elsewhere): the same folder
    # by its full path.
    code = code.replace('"features/"', repr(str(lake / "features")), 1)
    try:
        exec(code, namespace)
        assert namespace["scored"].count() == 3000
        rows = (
            namespace["spark"]
            .sql("SELECT customer_id, score_churn(struct(*)) AS p FROM features")
            .collect()
        )
        assert len(rows) == 3000 and all(0 <= r.p <= 1 for r in rows)
        exec(block(RUN[15]), namespace)  # predict_batch_udf, on the same session and view
        scores = namespace["scores"].select("customer_id", "p").orderBy("customer_id")
        assert [round(r.p, 5) for r in scores.collect()] == [
            round(r.p, 5) for r in sorted(rows, key=lambda r: r.customer_id)
        ]
    finally:
        if "spark" in namespace:
            namespace["spark"].stop()


def test_delta_examples(lake: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    exec(block(RUN[7]), {"scoring": scoring})
    assert deltalake.DeltaTable("scores_delta").version() == 1
    _sh(block(RUN[8]), lake)
    table = deltalake.DeltaTable("scores_delta")
    assert table.version() == 2 and len(table.to_pandas()) == 3000
    namespace = {"scoring": scoring, "deltalake": deltalake, "pd": pd}
    exec(block(RUN[9]), namespace)
    assert namespace["report"].changes["deleted"] == 100
    scores = deltalake.DeltaTable("scores_nightly").to_pandas()
    assert len(scores) == 2900 and scores.customer_id.min() == 100


def test_iceberg_example(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catalog ``lake`` configured by docs/iceberg.md's environment block (its SQLite
    file and warehouse this test's), holding ``sales.features`` (the examples'
    ``features/``); then the page's command, in the same shell."""
    pytest.importorskip("pyiceberg")
    import pyarrow.parquet as pq

    from .conftest import sql_catalog

    catalog = sql_catalog("lake", lake, monkeypatch)
    features = pq.read_table(lake / "features")
    catalog.create_table("sales.features", schema=features.schema).append(features)
    configure = block(RUN[11]).replace("/srv/iceberg", str(lake))
    assert configure.count(str(lake)) == 2
    _sh(configure + block(RUN[10]), lake)
    table = catalog.load_table("sales.scores")
    assert len(table.snapshots()) == 1 and len(table.scan().to_arrow()) == 3000


def test_readme_cli_quickstart(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a registry of its own: the model registered as churn@1, its dry run writes
    nothing, its run publishes every row."""
    monkeypatch.setenv("SCORING_HOME", str(lake / "quickstart"))
    said = _sh(block(RUN[12]), lake)
    assert said.splitlines()[0] == "churn@1"
    scores = pd.read_parquet(lake / "scores")
    assert len(scores) == 3000 and {"customer_id", "probability", "label"} <= set(scores)
    assert (lake / "scores" / "_SUCCESS").exists()


def test_readme_python_quickstart(lake: Path) -> None:
    namespace: dict[str, Any] = {"X": _frame(50, 6)}
    exec(block(RUN[13]), namespace)
    cm = namespace["cm"]
    assert cm.ref.startswith("churn@") and namespace["proba"].shape == (50, 2)
    assert namespace["report"].rows == 3000


def test_readme_job_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job files of jobs/ beside what `make examples` writes (for the day the block
    exports): the nightly job plans, runs (exit 0) and is listed."""
    from scoring.cli._examples import write_examples

    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    shutil.copytree(ROOT / "models", tmp_path / "models")
    write_examples(tmp_path / "examples", run_date="2026-11-21")
    monkeypatch.delenv("SCORING_HOME", raising=False)
    said = _sh(block(RUN[14]), tmp_path)
    assert "nightly-churn" in said and " ok " in f" {said} "
    assert (tmp_path / "examples/scores/churn/date=2026-11-21/_SUCCESS").exists()


def test_jobs_backfill_with_a_dated_deadline(tmp_path: Path) -> None:
    """docs/jobs.md's backfill: the nightly job given a deadline dated from its data, for
    an old date, is refused as late (exit 3, nothing published); the page's command,
    with a deadline from its start, runs it."""
    from scoring.cli._examples import write_examples

    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    write_examples(tmp_path / "examples", run_date="2026-10-01")
    job = tmp_path / "jobs" / "nightly.toml"
    job.write_text(re.sub(r'(?m)^deadline = .*$', 'deadline = "${RUN_DATE}+1d 01:45"',
                          job.read_text()))  # fmt: skip
    env = {**os.environ, "RUN_DATE": "2026-10-01"}
    late = subprocess.run([zygote.cli_folder() / "scoring", "run", "jobs/nightly.toml"],
                          cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert late.returncode == 3, late.stderr[-3000:]
    assert "deadline 2026-10-02T01:45:00+00:00 passed" in late.stdout + late.stderr
    scores = tmp_path / "examples/scores/churn/date=2026-10-01"
    assert not (scores / "_SUCCESS").exists()
    _sh(block(RUN[16]), tmp_path)
    assert (scores / "_SUCCESS").exists()


# The site: built strictly, its reference generated from the code.

HOOKS = ROOT / "docs" / "hooks"


def _reference() -> Any:
    sys.path.insert(0, str(HOOKS))
    try:
        import reference  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(HOOKS))
    return reference


def _options(command: Any) -> Iterator[str]:
    for param in command.params:  # an argument is shown by its name, as in usage lines
        argument = param.param_type_name == "argument"
        yield from [param.name.upper()] if argument else param.opts
    for sub in getattr(command, "commands", {}).values():
        yield from _options(sub)


def test_the_site_builds_strictly_with_every_option_key_and_error(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (a broken link or reference fails it); then its pages
    hold every CLI option, every job-file key and every error, as the code has them."""
    import typer

    from scoring.cli import app
    from scoring.errors import ScoringError
    from scoring.jobs._spec import JobSpec

    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                            "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    cli = (site / "reference/cli/index.html").read_text()
    options = set(_options(typer.main.get_command(app)))
    assert len(options) > 50 and not [o for o in options if f"<code>{o}</code>" not in cli]
    jobs = (site / "reference/job-file/index.html").read_text()
    assert not [k for k in _keys(JobSpec) if f"<code>{k}</code>" not in jobs]
    errors = (site / "reference/errors/index.html").read_text()
    names = [c.__name__ for c in [ScoringError, *_subclasses(ScoringError)]]
    assert not [n for n in names if f"<code>{n}</code>" not in errors]
    api = (site / "reference/api/index.html").read_text()
    import scoring.mlflow
    import scoring.ray
    import scoring.spark

    public = [f"{m.__name__}.{n}" for m in (scoring, scoring.ray, scoring.spark, scoring.mlflow)
              for n in m.__all__ if not n.startswith("_") and n != "errors"]  # fmt: skip
    assert len(public) > 20 and not [n for n in public if f'id="{n}"' not in api]


def _keys(spec: Any) -> Iterator[str]:
    """A job file's keys as its reference shows them: ``[table]`` and the table's keys."""
    for key, field in spec.model_fields.items():
        kinds = [k for k in typing.get_args(field.annotation) if k is not type(None)]
        table = getattr(kinds[0] if len(kinds) == 1 else field.annotation, "model_fields", None)
        yield f"[{key}]" if table is not None else key
        yield from table or ()


def _subclasses(cls: type) -> list[type]:
    return [s for sub in cls.__subclasses__() for s in [sub, *_subclasses(sub)]]


def test_a_new_option_key_or_error_reaches_the_reference_unedited() -> None:
    """The reference pages hold markers, not tables; what fills them follows the code: a
    command's new option, a new job-file key, a new error appear with nothing edited."""
    import typer
    from pydantic import Field, create_model

    from scoring.errors import InputError
    from scoring.jobs._spec import JobSpec

    for page in ("cli", "job-file"):
        source = (ROOT / "docs/reference" / f"{page}.md").read_text()
        assert f"<!-- generated: {page} -->" in source and "|---" not in source
    reference = _reference()
    app = typer.Typer()

    @app.command()
    def score(brand_new: int = typer.Option(3, help="an option added today")) -> None:
        """Score."""

    assert "| `--brand-new` | `3` | an option added today |" in reference.cli_reference(app)
    spec = create_model(
        "Later",
        __base__=JobSpec,
        brand_new_key=(int, Field(default=1, description="a key added today")),
    )
    assert "| `brand_new_key` | `1` | a key added today |" in reference.job_file_reference(spec)

    class BrandNewError(InputError):
        """An error added today."""

    assert "`BrandNewError` | 6 | An error added today. |" in reference.errors_reference()


def test_the_exit_statuses_page_names_every_status() -> None:
    from scoring.jobs import _runner

    page = (ROOT / "docs/reference/errors.md").read_text()
    codes = {getattr(_runner, n) for n in _runner.__all__ if n.startswith("EXIT_")}
    assert not [c for c in codes if f"\n| {c} |" not in page]
