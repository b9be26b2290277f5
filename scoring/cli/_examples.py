"""``scoring examples``: the registry and the input that the job files in ``jobs/`` read.

Each job file names its registry, input and output relative to itself
(``../examples/...``), so that every one of them can be planned or run from a clone:
``make examples`` (this command, into ``examples/``), then ``RUN_DATE=<the date it
printed> scoring plan jobs/nightly.toml``.  What it writes, under its folder:

- ``models/``: small XGBoost classifiers as model files (``churn-1.json``, ...), each
  with a sample of its training rows, and a model file per model declaring them
  (``churn.toml``: its versions and aliases, as the repository's top-level ``models/``
  declares them, see :mod:`scoring._declared`);
- ``registry/``: those declarations applied: ``churn`` (version 1 aliased
  ``production``, version 2 ``challenger``), ``upsell`` and ``credit_risk``
  (``production``), each verified on its sample and profiled for the jobs' drift checks;
- ``features/date=<DATE>/``: customers' features with ``customer_id``;
- ``applications/date=<DATE>/``: credit applications with ``application_id``.

Those four are written afresh on every call, each marked as this command's (a
``.scoring-owner`` file): a folder of one of those names that this command did not write
is refused by name, never removed.  The jobs' outputs (``scores/``) are left.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ._common import messages, reported

if TYPE_CHECKING:  # imported where the command runs: ``--help`` loads none of them
    import pandas as pd

__all__ = ["examples", "write_examples"]

OWNER = "scoring examples"

CUSTOMER = ["tenure", "monthly_spend", "support_calls", "days_since_login", "plan_tier"]
APPLICATION = ["income", "debt_ratio", "age", "open_accounts", "late_payments"]
#: Each registered version and the features it is trained on (in this order: a version
#: number is the order of registration).
MODELS = {
    ("churn", 1): CUSTOMER,
    ("churn", 2): CUSTOMER,
    ("upsell", 1): CUSTOMER,
    ("credit_risk", 1): APPLICATION,
}
ALIASES = {("churn", "production"): 1, ("churn", "challenger"): 2,
           ("upsell", "production"): 1, ("credit_risk", "production"): 1}  # fmt: skip


def examples(
    folder: Path = typer.Argument(Path("examples"), help="where to write them"),
    date: str | None = typer.Option(
        None, help="the RUN_DATE partition to write (default: today, UTC)", show_default=False
    ),
    rows: int = typer.Option(20_000, help="rows per dataset"),
) -> None:
    """Write the registry and the input the job files in jobs/ read (see jobs/*.toml).

    FOLDER/registry, FOLDER/features and FOLDER/applications are written afresh; an
    earlier call's are replaced, and a folder of those names this command did not write
    is refused, never removed."""
    with reported("examples"):
        run_date = date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        write_examples(folder, run_date=run_date, rows=rows)
        said = (f"wrote {folder}/ (models, registry, features, applications) for "
                f"RUN_DATE={run_date}")  # fmt: skip
        # The hint only where it holds: the job files read the examples/ beside jobs/.
        if (Path("jobs") / "nightly.toml").is_file() and folder.resolve() == Path(
            "examples"
        ).resolve():
            said += f"; try: RUN_DATE={run_date} scoring plan jobs/nightly.toml"
        messages.print(said)


def write_examples(folder: Path, *, run_date: str, rows: int = 20_000) -> None:
    """The example registry and inputs under ``folder`` (see the module docstring)."""
    import numpy as np
    import xgboost as xgb

    from .._catalog import Registry
    from .._declared import apply, declared
    from .._journal.owned import check_replaceable, fresh_folder

    parts = ("registry", "models", "features", "applications")
    for part in parts:  # checked all before any is replaced
        check_replaceable(folder / part, owner=OWNER)
    for part in parts:
        fresh_folder(folder / part, owner=OWNER)
    models = folder / "models"
    for (name, version), features in MODELS.items():
        X = _frame(features, 4_000, seed=version + len(name))
        target = (
            X[features[0]]
            - X[features[1]]
            + np.random.default_rng(version).normal(scale=0.5, size=len(X))
        )
        model = xgb.XGBClassifier(n_estimators=20 + 10 * version, max_depth=4)
        model.fit(X, target > 0).save_model(models / f"{name}-{version}.json")
        X.iloc[:2_000].to_parquet(models / f"{name}-{version}-sample.parquet", index=False)
    for name in dict.fromkeys(name for name, _ in MODELS):
        (models / f"{name}.toml").write_text(declaration(name, folder=""))
    apply(Registry(folder / "registry"), declared(models))
    _write(folder / "features" / f"date={run_date}", CUSTOMER, "customer_id", rows)
    _write(folder / "applications" / f"date={run_date}", APPLICATION, "application_id", rows)


def declaration(name: str, *, folder: str) -> str:
    """The model file declaring example model ``name``: its versions' files (in
    ``folder``, relative to the declaration) and their aliases."""
    lines = [f'name = "{name}"']
    for (model, version), _ in MODELS.items():
        if model != name:
            continue
        aliases = [a for (m, a), v in ALIASES.items() if m == name and v == version]
        lines += ["", "[[versions]]", f'source = "{folder}{name}-{version}.json"',
                  f'sample = "{folder}{name}-{version}-sample.parquet"',
                  "aliases = [" + ", ".join(f'"{a}"' for a in aliases) + "]"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _frame(features: list[str], rows: int, *, seed: int) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    values = np.random.default_rng(seed).normal(size=(rows, len(features)))
    return pd.DataFrame(values.astype(np.float32), columns=features)


def _write(path: Path, features: list[str], key: str, rows: int, *, files: int = 2) -> None:
    import numpy as np

    path.mkdir(parents=True, exist_ok=True)
    frame = _frame(features, rows, seed=99)
    frame.insert(0, key, np.arange(rows, dtype=np.int64))
    for i, part in enumerate(np.array_split(np.arange(rows), files)):
        frame.iloc[part].to_parquet(path / f"part-{i}.parquet", index=False)
