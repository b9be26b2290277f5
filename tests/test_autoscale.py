"""``[autoscale]`` on a real autoscaling Ray cluster on this machine: Ray's fake
multi-node provider (``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...``),
whose autoscaler starts each node as a raylet of its own with one CPU when asked.

The head is started here with a configuration of our own, its own temporary folder and
port, and ended by signal (not ``ray.cluster_utils.AutoscalingCluster``, whose start and
shutdown run ``ray stop --force``, ending every Ray on the machine, and which reads an
example configuration the wheel does not ship).  Each node the autoscaler starts is put
in a cgroup of its own capped at :data:`NODE_CPU` of a CPU, and ``scoring`` in one capped
the same, all of them and the head's daemons under one parent weighted at the kernel's
maximum: a node's pace is then the same whether one or three run, on two cores, busy or
not, and the planner's rate per worker (measured by ``scoring plan``) is a node's.

The jobs are sized from the product's own plan (``scoring plan`` of the same job): a
window that one worker cannot meet and three can; one that even the maximum cannot;
and a worker shape no node offers, so that no node ever arrives within the wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import scoring

from .test_ray_cluster import _end_sessions, _members, _ray
from .test_score_parquet import write_input

pytest.importorskip("ray")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
SCORING = str(Path(sys.executable).parent / "scoring")
CGROUPS = Path("/sys/fs/cgroup/cpu")
#: A node's share of a CPU: three nodes and ``scoring run`` fit in two cores.
NODE_CPU = 0.45
NODE_TYPE_MAX = 3
MAX_SHARES = 262144  # cgroup v1's largest cpu.shares


def _cgroups_writable() -> bool:
    probe = CGROUPS / f"scoring-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


needs_cgroups = pytest.mark.skipif(
    not CGROUPS.is_dir() or not _cgroups_writable(),
    reason="capping each fake node's CPU needs a writable cgroup v1 cpu controller",
)


class _Caps:
    """A cgroup per fake node (and one for the driver), each capped at NODE_CPU: a
    thread moves each node's raylet and everything under it into its node's group as
    the autoscaler starts them (what a raylet starts later starts inside it)."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()
        # The weight that counts is the parent's: it competes with every busy thread
        # outside it (the suite's other process, CPU hogs), each weighted 1024.  At the
        # kernel's maximum it gets what its groups ask for, which is less than the two
        # cores (their caps), so that a cap is also what a node gets on a busy machine.
        (root / "cpu.shares").write_text(str(MAX_SHARES))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def group(self, name: str, *, capped: bool = True) -> Path:
        """The group ``name`` under the parent, capped at NODE_CPU unless not
        ``capped`` (the head's daemons: little work, but the nodes wait on it)."""
        folder = self.root / name
        if not folder.exists():
            folder.mkdir()
            if capped:
                (folder / "cpu.cfs_period_us").write_text("100000")
                (folder / "cpu.cfs_quota_us").write_text(str(int(NODE_CPU * 100000)))
        return folder

    def adopt(self, name: str, pids: list[int], *, capped: bool = False) -> None:
        """Move the processes ``pids`` into group ``name``: through cgroup.procs, not
        tasks, so that every thread of each moves, not one."""
        procs = self.group(name, capped=capped) / "cgroup.procs"
        for pid in pids:
            with contextlib.suppress(OSError):  # ended meanwhile
                procs.write_text(str(pid))

    def _watch(self) -> None:
        while not self.stop.wait(0.1):
            children: dict[int, list[int]] = {}
            nodes: dict[int, str] = {}
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    children.setdefault(parent, []).append(int(proc.name))
                    if (proc / "comm").read_text().strip() == "raylet":
                        env = (proc / "environ").read_bytes().split(b"\0")
                        found = [e for e in env if e.startswith(b"RAY_CLOUD_INSTANCE_ID=")]
                        if found:
                            nodes[int(proc.name)] = found[0].split(b"=", 1)[1].decode()
                except (OSError, IndexError, ValueError):
                    continue
            for pid, node in nodes.items():
                self.adopt(f"node-{node[-5:]}", _tree(pid, children), capped=True)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for group in sorted(g for g in self.root.iterdir() if g.is_dir()):
            with contextlib.suppress(OSError):  # processes end first (the cluster's)
                for pid in (group / "cgroup.procs").read_text().split():
                    (self.root.parent / "cgroup.procs").write_text(pid)
                group.rmdir()
        with contextlib.suppress(OSError):
            self.root.rmdir()


def _tree(pid: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


@pytest.fixture(scope="module")
def autoscaling_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A head of no CPUs whose autoscaler adds nodes of one CPU (at most three): its
    address, and the cgroups capping its nodes."""
    import ray

    ray.shutdown()
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths have a limit
    config = tmp_path_factory.mktemp("autoscaler") / "cluster.json"
    config.write_text(json.dumps(_config(port)))
    caps = _Caps(CGROUPS / f"scoring-test-{os.getpid()}")
    caps.thread.start()
    env = {"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    sessions: list[int] = []
    try:
        sessions.append(_ray("start", "--head", f"--port={port}", "--num-cpus=0",
                             "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                             f"--temp-dir={temp}", f"--autoscaling-config={config}",
                             "--disable-usage-stats", env=env))  # fmt: skip
        # The head's daemons (and the autoscaler's nodes, until the watcher moves them)
        # in the weighted parent too: the nodes' scheduling waits on them.
        caps.adopt("head", _members(set(sessions)))
        yield {"address": f"127.0.0.1:{port}", "caps": caps}
    finally:
        ray.shutdown()
        _end_sessions(sessions)
        caps.close()


def _config(port: int) -> dict[str, Any]:
    """The fake provider's cluster: a head of no CPUs, nodes of one CPU added at once."""
    commands = ["initialization_commands", "setup_commands", "head_setup_commands",
                "worker_setup_commands", "head_start_ray_commands",
                "worker_start_ray_commands"]  # fmt: skip
    return {
        "cluster_name": f"scoring-{port}",
        "max_workers": NODE_TYPE_MAX,
        "upscaling_speed": 10.0,
        "idle_timeout_minutes": 1,
        # The fake provider's nodes are read-only: no updater may set their tags (a
        # failed update ends the node, and the autoscaler starts another, forever).
        "provider": {
            "type": "fake_multinode",
            "gcs_address": f"127.0.0.1:{port}",
            "launch_multiple": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "auth": {"ssh_user": "ubuntu"},
        "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "one_cpu": {
                "resources": {"CPU": 1},
                "node_config": {},
                "min_workers": 0,
                "max_workers": NODE_TYPE_MAX,
            },
        },
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        **{c: [] for c in commands},
    }


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A registered XGBoost model deep enough that its contributions (the job's
    outputs) score about a thousand rows/s per node, and an input of ROWS rows in 24
    files: a few minutes of one node's work, so that three nodes' start and join fit in
    the time a third node saves."""
    import xgboost as xgb

    root = tmp_path_factory.mktemp("job")
    rng = np.random.default_rng(7)
    X = pd.DataFrame(rng.normal(size=(8000, 8)), columns=[f"f{i}" for i in range(8)])
    y = (X["f0"] + X["f1"] * X["f2"] + rng.normal(size=len(X)) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=120, max_depth=7, n_jobs=1).fit(X, y)
    scoring.Registry(root / "registry").register("churn", model)
    frame = write_input(pd.DataFrame(rng.normal(size=(ROWS, 8)), columns=X.columns),
                        root / "in", files=24)  # fmt: skip
    return {"root": root, "frame": frame}


ROWS = 180_000


def _job(
    nightly: dict[str, Any], cluster: dict[str, Any], *, name: str, out: str,
    cpus: float = 1.0, max_workers: int = NODE_TYPE_MAX, wait: str = "2m",
) -> Path:  # fmt: skip
    root = nightly["root"]
    job = root / f"{name}.toml"
    job.write_text(f"""
name = "{name}"
model = "churn@1"
registry = "{root / "registry"}"
input = "{root / "in"}"
output = "{root / out}"
engine = "ray"
device = "cpu"
keep = ["id"]
outputs = "contributions"                # TreeSHAP: a slow model, for a window of seconds

[resources]
cpus = {cpus}

[autoscale]
min_workers = 1
max_workers = {max_workers}
wait = "{wait}"

[ray]
address = "{cluster["address"]}"
""")
    return job


def _scoring(caps: _Caps, *args: str) -> subprocess.CompletedProcess[str]:
    """``scoring ARGS`` in the driver's cgroup (capped as a node is)."""
    tasks = caps.group("driver") / "cgroup.procs"
    env = {**os.environ, "RAY_worker_niceness": "0"}
    return subprocess.run([SCORING, *args], capture_output=True, text=True, env=env,
                          preexec_fn=lambda: tasks.write_text(str(os.getpid())),
                          check=False, timeout=600)  # fmt: skip


def _planned(caps: _Caps, job: Path) -> dict[str, Any]:
    """The job's plan with no deadline, as JSON-able numbers (its rate is cached)."""
    from scoring.jobs import load_job, make_plan

    said = _scoring(caps, "plan", str(job))  # measures, in a capped process, and caches
    assert said.returncode == 0, said.stdout + said.stderr
    return make_plan(load_job(job)).to_dict()  # the cached rate, the same fixed costs


def _window(plan: dict[str, Any], workers: float) -> int:
    """Seconds in which ``workers`` workers at the plan's rate just finish."""
    fixed = plan["startup_seconds"] + plan["compile_seconds"] + plan["commit_seconds"]
    return int(fixed + plan["rows"] / (plan["rows_per_second"] * workers))


def _pending() -> list[Any]:
    """The resource request the cluster's autoscaler holds now."""
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get

    found = _internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return json.loads(found) if found else []


@needs_cgroups
def test_the_deadline_sizes_the_cluster(
    autoscaling_cluster: dict[str, Any], nightly: dict[str, Any]
) -> None:
    """One worker cannot meet the window, three can: the run asks for three, runs on
    the three that joined, meets the deadline and publishes every row once; the report
    says needed, requested and granted, and the request is withdrawn."""
    import ray

    caps = autoscaling_cluster["caps"]
    job = _job(nightly, autoscaling_cluster, name="sized", out="out")
    plan = _planned(caps, job)
    window = _window(plan, 2.02)  # needs 3 workers (planning takes time), a sixth to spare

    said = _scoring(caps, "run", str(job), "--no-progress", "--deadline", f"{window}s")

    assert said.returncode == 0, said.stdout + said.stderr
    assert "workers: needed 3, requested 3, granted 3" in said.stderr, said.stderr
    report = json.loads((nightly["root"] / "out" / "_scoring_report.json").read_text())
    assert report["plan"]["workers_needed"] >= 2 and report["met_deadline"]
    scaling = report["plan"]["scaling"]
    assert (scaling["needed"], scaling["requested"], scaling["granted"]) == (3, 3, 3)
    assert scaling["timeline"][0]["granted"] < 3 <= scaling["timeline"][-1]["granted"]
    assert 0 < scaling["worker_seconds"] <= 3 * scaling["held_seconds"]
    assert len([w for w in report["workers"] if report["workers"][w]["rows"]]) == 3
    page = (nightly["root"] / "out" / "_scoring_report.html").read_text()
    assert "Autoscaling" in page and "worker-seconds held" in page
    out = pq.read_table(nightly["root"] / "out").to_pandas()
    np.testing.assert_array_equal(np.sort(out["id"]), nightly["frame"]["id"])  # each once
    manifest = json.loads((nightly["root"] / "out" / "_scoring_manifest.json").read_text())
    assert manifest["rows"] == ROWS
    ray.init(address=autoscaling_cluster["address"])
    assert _pending() == []  # the request withdrawn


@needs_cgroups
def test_a_window_the_maximum_cannot_meet_is_refused_before_scoring(
    autoscaling_cluster: dict[str, Any], nightly: dict[str, Any]
) -> None:
    caps = autoscaling_cluster["caps"]
    job = _job(nightly, autoscaling_cluster, name="impossible", out="never", max_workers=2)
    window = _window(_planned(caps, job), 2.6)
    said = _scoring(caps, "run", str(job), "--no-progress", "--deadline", f"{window}s")
    assert said.returncode == 3, said.stdout + said.stderr
    assert "more than [autoscale] max_workers 2" in said.stderr, said.stderr
    assert "needs 3 workers" in said.stderr, said.stderr
    assert not (nightly["root"] / "never" / "_SUCCESS").exists()
    report = json.loads((nightly["root"] / "never" / "_scoring_report.json").read_text())
    assert report["status"] == "refused" and report["plan"]["scaling"] is None  # never asked


@needs_cgroups
def test_workers_that_never_join_within_the_wait_are_refused(
    autoscaling_cluster: dict[str, Any], nightly: dict[str, Any]
) -> None:
    """Workers of 1.5 CPUs, which no node type offers (timed as the one-CPU workers
    are: the rate is cached): none joins within the wait, the run is refused (exit 3)
    naming it, and the request is withdrawn."""
    import ray

    caps = autoscaling_cluster["caps"]
    job = _job(nightly, autoscaling_cluster, name="stranded", out="stranded", cpus=1.5,
               wait="8s")  # fmt: skip
    window = _window(_planned(caps, job), 1.5)
    said = _scoring(caps, "run", str(job), "--no-progress", "--deadline", f"{window}s")
    assert said.returncode == 3, said.stdout + said.stderr
    assert re.search(r"0 of the \d workers it needs joined within 8 s", said.stderr), said.stderr
    assert not (nightly["root"] / "stranded" / "_SUCCESS").exists()
    report = json.loads((nightly["root"] / "stranded" / "_scoring_report.json").read_text())
    scaling = report["plan"]["scaling"]
    assert scaling["granted"] == 0 and scaling["requested"] >= 2
    assert scaling["shape"] == {"CPU": 1.5}
    ray.init(address=autoscaling_cluster["address"], ignore_reinit_error=True)
    assert _pending() == []
