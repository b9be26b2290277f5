"""The prepared GPU call rehearsed on the GPU machine's image, or as near as this machine
gets: a venv of only the image's packages at its Triton 3.6 (.venv-gpu, built by make
test), the carried wheels installed as call.sh installs them, the kernel under that
Triton's interpreter and built by its compiler."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import RECIPES
from .triton_parity import THROUGH_COMPILE, run_interpreted

SUITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "suite.py"


def _probe_wheel(folder: Path, log: Path) -> Path:
    """A wheel holding only a ``sitecustomize`` that records each Python process that
    starts with the wheels' folder on its path, as the GPU machine's carried packages
    are found: by ``PYTHONPATH`` alone."""
    import zipfile

    name = "scoring_rehearsal_probe-1.0"
    line = "f'{os.getpid()} {sys.argv[:1]}\\n'"  # one line per process: its id
    code = f"import os, sys\nopen({str(log)!r}, 'a').write({line})\n"
    meta = "Metadata-Version: 2.1\nName: scoring-rehearsal-probe\nVersion: 1.0\n"
    wheel = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    path = folder / f"{name}-py3-none-any.whl"
    info = "scoring_rehearsal_probe-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sitecustomize.py", code)
        archive.writestr(f"{info}/METADATA", meta)
        archive.writestr(f"{info}/WHEEL", wheel)
        archive.writestr(f"{info}/RECORD", "")
    return path


#: The rehearsal's stand-in for the GPU machine's image (built by make test: Makefile).
GPU_VENV = SUITE.parents[2] / ".venv-gpu"


def _gpu_venv() -> Path:
    if not (GPU_VENV / ".installed").exists():
        pytest.fail(f"no {GPU_VENV.name}: build it with `make {GPU_VENV.name}/.installed`")
    return GPU_VENV


#: The machine-code proofs of tests/test_triton_walk.py that run again under the image's
#: Triton, for its card (an H200: sm_90).
_BUILD_PROOFS = (
    "test_every_variant_builds_without_spills_or_fma[90]",
    "test_a_node_visit_of_xgboost_s_variant_takes_14_instructions_and_2_loads[90]",
    "test_the_machine_code_check_finds_a_fused_multiply_add",
    "test_every_top_and_category_rule_builds[90]",
    "test_a_split_batch_s_two_launches_build[90]",
    "test_every_integer_argument_equal_to_1_compiles",
    "test_the_build_reports_spills",
)


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The whole environment of a process on the image's stand-in: the carried wheels
    installed as call.sh installs them, CatBoost beside them (too big to carry; the
    parity recipes use it), a cold Triton cache."""
    venv, home = _gpu_venv(), tmp_path_factory.mktemp("image")
    wheels = [str(w) for w in (venv / "wheels").glob("*.whl")]
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    "--no-deps", "--no-compile", "--target", str(home / "site"), *wheels],
                   check=True, capture_output=True)  # fmt: skip
    path = os.pathsep.join(map(str, (SUITE.parents[2], home / "site", venv / "catboost")))
    return {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": path,
            "TRITON_CACHE_DIR": str(home / "triton"), "TMPDIR": str(home)}  # fmt: skip


def test_every_variant_builds_the_same_under_the_images_triton(image_env: dict[str, str]) -> None:
    """No spills, no FMA or FTZ, no divergent-branch barriers, XGBoost's 14 instructions
    and 2 loads per node visit: the same proofs with the kernel built by Triton 3.6, the
    image's, from a cold cache."""
    ids = [f"tests/test_triton_walk.py::{name}" for name in _BUILD_PROOFS]
    python = str(_gpu_venv() / "bin" / "python")
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                           "ignore::pytest.PytestUnknownMarkWarning", *ids], capture_output=True,
                          text=True, env=image_env, cwd=SUITE.parents[2])  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{len(ids)} passed" in done.stdout, done.stdout[-2000:]


def test_the_kernel_equals_walk_cpp_under_the_images_triton(image_env: dict[str, str]) -> None:
    """Interpreter parity, every recipe, bit for bit (tests/triton_parity.py), with the
    image's Triton 3.6: its interpreter, not the kernel, could differ from 3.9's."""
    python = str(_gpu_venv() / "bin" / "python")
    found = run_interpreted(*RECIPES, python=python, env=image_env)
    assert set(found) == set(RECIPES)  # none left out for a missing framework
    assert {name: d for name, d in found.items() if d} == {}
    found = run_interpreted("--compile", *THROUGH_COMPILE, python=python, env=image_env)
    assert set(found) == set(THROUGH_COMPILE) and not any(found.values()), found


def test_the_rehearsal_venv_holds_only_the_images_packages() -> None:
    """What the rehearsal proves holds only if the venv has nothing the GPU machine's
    image lacks: a package found there but missing from the carried wheels would pass."""
    venv = _gpu_venv()
    listed = (SUITE.parent / "image_packages.txt").read_text().splitlines()
    image = {line.strip() for line in listed if line.strip() and not line.startswith("#")}
    python = str(venv / "bin" / "python")
    code = "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          cwd=venv)  # not the repository: its egg-info is no package  # fmt: skip
    names = {re.sub(r"[-_.]+", "-", n).lower() for n in done.stdout.split()}
    assert names - image == set()
    assert {"torch", "triton", "numpy", "pandas", "pyarrow", "scikit-learn"} <= names
    code = "import triton; print(triton.__version__)"
    triton = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert triton.stdout.strip() == "3.6.0"  # the image's


def test_the_prepared_call_as_the_gpu_machine_runs_it(tmp_path: Path) -> None:
    """The README's command, call.sh, as the GPU machine runs it: ``python3`` the image's
    (here the stand-in venv's, first on PATH), the carried wheels installed into a folder
    that only PYTHONPATH finds, $OUT set; tiny sizes, and the kernel itself under
    Triton's interpreter (the image's Triton 3.6).  Every section's table lands under
    $OUT with numbers; the walk equals walk.cpp; every Python process the suite starts
    (a new model's first rows, a variant built for sm_90) still finds the wheels."""
    venv = _gpu_venv()
    wheels, out, log = tmp_path / "wheels", tmp_path / "out", tmp_path / "started.log"
    wheels.mkdir()
    out.mkdir()
    for wheel in (venv / "wheels").glob("*.whl"):
        (wheels / wheel.name).symlink_to(wheel)
    _probe_wheel(wheels, log)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(out),
           "WHEELS": str(wheels), "SITE": str(tmp_path / "site"), "TMPDIR": str(tmp_path),
           "TRITON_INTERPRET": "1"}  # fmt: skip
    done = subprocess.run([str(SUITE.parent / "call.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = {p.name for p in out.iterdir()}
    tables = {f"gpu_{name}.md" for name in ("walk", "job", "throughput", "e2e")}
    assert written == tables | {"gpu_job.html", "gpu_job.json", "gpu_log.txt"}
    log_text = (out / "gpu_log.txt").read_text()
    assert "crashed" not in log_text and "Traceback" not in log_text, log_text[-3000:]
    for table in tables:
        text = (out / table).read_text()
        assert "Error" not in text and "failed" not in text and "Stopped" not in text, text
    walk = (out / "gpu_walk.md").read_text()
    assert "Triton 3.6.0." in walk
    rows = [line.split(" | ") for line in walk.splitlines()
            if line.startswith("| ") and "| model" not in line]  # fmt: skip
    assert len(rows) == 4, walk  # a tiny XGBoost, categories, float64, splits at 0
    for row in rows:
        assert row[1] == "0" and row[2] in ("0", "-"), row  # margins, leaves: as walk.cpp's
        assert row[5].startswith("interpreter; registers for sm_90"), row  # the kernel ran
        registers, stack = row[6].split(" / ")
        assert 0 < int(registers) <= 128 and stack == "0", row  # built by Triton 3.6: no spills
        assert "compile" in row[9], row  # a new model's first rows, timed
        split, whole = row[10].removesuffix(" |").split(" / ")  # 1,000-row calls, both ways
        assert float(split.replace(",", "")) > 0 and float(whole.replace(",", "")) > 0, row
    throughput = (out / "gpu_throughput.md").read_text()
    assert throughput.count("| tensor fused (top 0 levels") == 3, throughput  # interpreted
    started = log.read_text().splitlines()
    # The suite, each recipe's first-rows child and each sm_90 build: all found the wheels.
    assert len({line.split()[0] for line in started}) >= 1 + 2 * len(rows), started
