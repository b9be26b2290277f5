"""Model files written by other writers and damaged ones: the product refuses exactly
what the framework itself cannot load.

LightGBM's parser kills the process on most damaged files, so its verdict on each file
is asked in a forked child (a signal there is a refusal, not a crash of the suite).
Variants: the file cut at every line end and inside every line of one tree, older
writers' headers (v2/v3, no ``tree_sizes``, no ``end of trees``, no parameters),
Windows line ends, no newline at the end, a ``tree_sizes`` that misplaces a tree.
Files of older releases: XGBoost 1.7's JSON and UBJ and LightGBM 3.3's text
(``tests/data``, made by ``tests/data/make_legacy_models.py``); damaged XGBoost files
are refused with XGBoost's own reason.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scoring
from scoring._frameworks.lightgbm import complete_model_text
from scoring.errors import ModelFileError

from .conftest import built

DATA = Path(__file__).parent / "data"

#: A child per file, forked after LightGBM is imported: 0 loaded (the tree count on
#: stdout), 3 refused with an exception, anything else killed by LightGBM's parser.
_VERDICTS = r"""
import json, os, sys
import lightgbm
verdicts = {}
for path in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1); os.dup2(devnull, 2)
        try:
            trees = lightgbm.Booster(model_file=path).num_trees()
        except Exception:
            os._exit(3)
        os.write(write, str(trees).encode()); os._exit(0)
    os.close(write)
    trees = os.read(read, 64).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    verdicts[path] = [os.waitstatus_to_exitcode(status), trees]
print(json.dumps(verdicts))
"""


def lightgbm_verdicts(paths: list[Path]) -> dict[str, tuple[int, str]]:
    done = subprocess.run(
        [sys.executable, "-c", _VERDICTS, *map(str, paths)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {k: (v[0], v[1]) for k, v in json.loads(done.stdout).items()}


def _lightgbm_variants(text: str) -> dict[str, str]:
    """Damaged and older-writer versions of one model file, by name."""
    lines = text.splitlines(keepends=True)
    variants = {f"cut after line {i}": "".join(lines[:i]) for i in range(1, len(lines))}
    start = text.index("Tree=1")
    tree = text[start : text.index("Tree=2")]
    for at in range(1, len(tree), max(1, len(tree) // 40)):
        variants[f"cut inside tree 1 at {at}"] = text[: start + at]
    body, _, _ = text.partition("end of trees")
    no_sizes = re.sub(r"^tree_sizes=.*\n", "", text, flags=re.MULTILINE)
    old_body = re.sub(r"^tree_sizes=.*\n", "", body, flags=re.MULTILINE)
    sizes = re.search(r"^tree_sizes=(.*)$", text, flags=re.MULTILINE)
    assert sizes is not None
    first, *others = sizes.group(1).split()
    variants |= {
        "as written": text,
        "no newline at the end": text.rstrip("\n"),
        "windows line ends": text.replace("\n", "\r\n"),
        "windows line ends, no tree_sizes": no_sizes.replace("\n", "\r\n"),
        "version v3": text.replace("version=v4", "version=v3"),
        "version v2, no tree_sizes, ends after the trees": old_body.replace("version=v4", "v2"),
        "no tree_sizes": no_sizes,
        "ends at end of trees": body + "end of trees\n",
        "ends before end of trees": body,
        "tree_sizes misplacing tree 1": text.replace(
            sizes.group(0), f"tree_sizes={int(first) + 7} {' '.join(others)}"
        ),
        "tree_sizes with the last size wrong": text.replace(
            sizes.group(0), f"tree_sizes={' '.join([first, *others[:-1], '5'])}"
        ),
    }
    return variants | _constant_last_tree(text)


#: A one-leaf tree's fields as writers leave them: LightGBM reads its leaf_value alone.
_CONSTANT = {
    "empty arrays": "split_feature=\nsplit_gain=\nthreshold=\ndecision_type=\nleft_child=\n"
    "right_child=\nleaf_value={v}\nleaf_weight=\nleaf_count=\ninternal_value=\n"
    "internal_weight=\ninternal_count=\n",
    "leaf_value alone": "leaf_value={v}\n",
    "stray leaf_weight values": "leaf_value={v}\nleaf_weight=1 2 3\nleaf_count=4\n",
    "two leaf values": "leaf_value={v} 0.25\n",
    "no leaf value": "leaf_weight=\n",
}


def _constant_last_tree(text: str) -> dict[str, str]:
    """The last tree made a one-leaf tree by hand (treelite's test model of that kind),
    the header's tree_sizes left as they were (its last size now wrong)."""
    body, end, tail = text.partition("end of trees")
    start = body.rindex("Tree=")
    number = body[start:].split("\n", 1)[0]
    variants = {}
    for name, fields in _CONSTANT.items():
        tree = f"{number}\nnum_leaves=1\nnum_cat=0\n{fields.format(v='0.125')}shrinkage=1\n\n\n"
        variants[f"constant last tree, {name}"] = body[:start] + tree + end + tail
    return variants


def test_lightgbm_files_are_refused_exactly_where_lightgbm_cannot_load_them(
    tmp_path: Path,
) -> None:
    model, _, _ = built("lgb_cat")
    text = model.booster_.model_to_string()
    variants = _lightgbm_variants(text)
    paths, accepted = {}, {}
    for i, (name, variant) in enumerate(variants.items()):
        paths[name] = tmp_path / f"v{i}.txt"
        paths[name].write_bytes(variant.encode())
        with contextlib.suppress(ModelFileError):
            accepted[name] = complete_model_text(variant.encode(), name=name)
    # What the product passes on to LightGBM must never be what kills it.
    passed_on = {name: tmp_path / f"passed{i}.txt" for i, name in enumerate(accepted)}
    for name, path in passed_on.items():
        path.write_bytes(accepted[name].encode())
    verdicts = lightgbm_verdicts([*paths.values(), *passed_on.values()])
    loads = {name for name, path in paths.items() if verdicts[str(path)][0] == 0}
    assert loads <= set(accepted), f"refused what LightGBM loads: {sorted(loads - set(accepted))}"
    # Loaded, or refused with an exception (which the product reports as a ModelFileError).
    killed = [n for n, p in passed_on.items() if verdicts[str(p)][0] not in (0, 3)]
    assert not killed, f"accepted what LightGBM cannot load: {killed}"
    # Both directions have cases: the sweep is not vacuous.
    assert len(accepted) < len(variants) and {"no tree_sizes", "version v3"} <= loads
    assert {"constant last tree, empty arrays", "constant last tree, leaf_value alone"} <= loads
    assert "windows line ends" in set(accepted) - loads  # normalised, where LightGBM fails


@pytest.mark.parametrize(
    "variant",
    ["no newline at the end", "windows line ends", "version v2, no tree_sizes, "
     "ends after the trees", "tree_sizes with the last size wrong",
     "constant last tree, empty arrays", "constant last tree, stray leaf_weight values"],
)  # fmt: skip
def test_an_older_or_looser_lightgbm_file_scores_as_lightgbm_scores_it(
    tmp_path: Path, variant: str
) -> None:
    import lightgbm

    model, _, _ = built("lgb_cat")
    path = tmp_path / "model.txt"
    path.write_bytes(_lightgbm_variants(model.booster_.model_to_string())[variant].encode())
    X = np.random.default_rng(1).normal(size=(200, 6))
    X[:, 0] = np.random.default_rng(2).integers(-1, 14, 200)
    # LightGBM itself for a tree it reads differently; the model as written for variants
    # only the product reads (Windows line ends kill LightGBM's reader).
    source = (
        path.read_text() if variant.startswith("constant") else model.booster_.model_to_string()
    )
    reference = lightgbm.Booster(model_str=source).predict(X)
    for backend in ("tensor", "native"):
        cm = scoring.compile(path, backend=backend, device="cpu")
        np.testing.assert_allclose(cm.predict(X), reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "file",
    ["xgb17_binary.json", "xgb17_binary.ubj", "xgb17_multi.json", "lgb33_categorical.txt"],
)
def test_files_of_older_releases_score_as_their_writers_scored_them(file: str) -> None:
    """Margins recorded by XGBoost 1.7 and LightGBM 3.3 when they wrote the file, on
    rows with NaN (and, for LightGBM, a categorical column)."""
    name = file.split(".")[0]
    rows, margin = np.load(DATA / f"{name}.rows.npy"), np.load(DATA / f"{name}.margin.npy")
    for backend in ("tensor", "native"):
        cm = scoring.compile(DATA / file, backend=backend, device="cpu")
        np.testing.assert_allclose(cm.predict_raw(rows).reshape(margin.shape), margin, atol=1e-5)


@pytest.mark.parametrize("keep", [0.0, 0.02, 0.5, 0.98])
@pytest.mark.parametrize("suffix", [".json", ".ubj"])
def test_a_damaged_xgboost_file_is_refused_with_xgboost_s_own_reason(
    tmp_path: Path, suffix: str, keep: float
) -> None:
    import xgboost

    model, _, _ = built("xgb_clf")
    whole = tmp_path / f"whole{suffix}"
    model.save_model(whole)
    data = whole.read_bytes()
    path = tmp_path / f"model{suffix}"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(xgboost.core.XGBoostError) as native:
        xgboost.Booster(model_file=str(path))
    with pytest.raises(ModelFileError) as ours:
        scoring.compile(path, backend="tensor", device="cpu")
    message = str(ours.value)
    assert "\n" not in message and str(path) in message
    assert "Stack trace" not in message and "dmlc" not in message
    reason = str(native.value).splitlines()[0]
    assert re.sub(r"^\[[\d:]+\] \S+: ", "", reason)[:40] in message
