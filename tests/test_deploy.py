"""deploy/kubernetes: every overlay renders with kustomize (``kubectl kustomize``) and
validates strictly against three Kubernetes versions' schemas (kubernetes-validate,
offline); every exit status the CLI documents has the failure policy it should; and
``scoring deploy render`` writes an overlay per job file in jobs/ that does the same."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tomllib
import yaml
from typer.testing import CliRunner

from scoring._deploy import active_deadline, window_seconds
from scoring.cli import HELP, app

from .kuberay_schema import RAY_JOB, bounds_hold

ROOT = Path(__file__).parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
VERSIONS = ("1.29", "1.33", "1.37")
runner = CliRunner()
needs_kubectl = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kustomize renders through kubectl, not installed"
)


def _rendered(folder: Path) -> list[dict[str, Any]]:
    done = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _validate(resources: list[dict[str, Any]], tmp_path: Path) -> None:
    """Each built-in resource against each version's schema, strictly; a RayJob (a
    CRD, whose schema Kubernetes does not bundle) as :func:`_validate_ray_job` says."""
    pytest.importorskip("kubernetes_validate")
    _strictly([r for r in resources if r["apiVersion"] != "ray.io/v1"], tmp_path / "built.yaml")
    for ray_job in (r for r in resources if r["kind"] == "RayJob"):
        _validate_ray_job(ray_job, tmp_path)
        spec = ray_job["spec"]
        assert "scoring run --run-date today /etc/scoring/job.toml" in spec["entrypoint"]
        assert spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
        for group in spec["rayClusterSpec"]["workerGroupSpecs"]:
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == "1" and group["rayStartParams"]["num-gpus"] == "1"


def _validate_ray_job(ray_job: dict[str, Any], tmp_path: Path) -> None:
    """A RayJob against the schema of the KubeRay fields it may use (no other field), its
    workers groups' bounds, and its pod templates strictly against Kubernetes' own
    PodTemplate schema."""
    jsonschema.validate(ray_job, RAY_JOB)
    cluster = ray_job["spec"]["rayClusterSpec"]
    assert all(bounds_hold(group) for group in cluster["workerGroupSpecs"])
    templates = [cluster["headGroupSpec"]["template"],
                 *(g["template"] for g in cluster["workerGroupSpecs"])]  # fmt: skip
    pods = [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"pod-{i}"},
             "template": t} for i, t in enumerate(templates)]  # fmt: skip
    _strictly(pods, tmp_path / "ray_pods.yaml")


def _strictly(resources: list[dict[str, Any]], path: Path) -> None:
    """``resources`` (written to ``path``) against each version's schema, strictly."""
    path.write_text(yaml.safe_dump_all(resources))
    for version in VERSIONS:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("kubernetes-validate")), "--strict", "-k",
             version, str(path)], capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "ERROR" not in done.stdout, done.stdout + done.stderr
        assert done.stdout.count(" passed ") == len(resources), done.stdout


def _cronjob(resources: list[dict[str, Any]]) -> dict[str, Any]:
    (cronjob,) = [r for r in resources if r["kind"] == "CronJob"]
    return cronjob


@needs_kubectl
@pytest.mark.parametrize("overlay", ["cpu", "gpu", "ray"])
def test_every_overlay_renders_and_validates_strictly(overlay: str, tmp_path: Path) -> None:
    resources = _rendered(DEPLOY / "overlays" / overlay)
    _validate(resources, tmp_path)
    kinds = sorted(r["kind"] for r in resources)
    assert kinds == sorted(["ServiceAccount", "ConfigMap",
                            "RayJob" if overlay == "ray" else "CronJob"])  # fmt: skip
    (config,) = [r for r in resources if r["kind"] == "ConfigMap"]
    job = (DEPLOY / ("overlays/ray" if overlay == "ray" else "base") / "job.toml").read_text()
    assert config["data"]["job.toml"] == job
    if overlay == "ray":  # its workers group bounded by its job's [autoscale]
        bounds = tomllib.loads(job)["autoscale"]
        (ray_job,) = [r for r in resources if r["kind"] == "RayJob"]
        assert ray_job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True
        (group,) = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (
            bounds["min_workers"], bounds["min_workers"], bounds["max_workers"])  # fmt: skip
        return
    cronjob = _cronjob(resources)
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["restartPolicy"] == "Never"
    limits = pod["containers"][0]["resources"]["limits"]
    if overlay == "gpu":
        assert limits["nvidia.com/gpu"] == "1"
        assert {"key": "sku", "operator": "Equal", "value": "gpu",
                "effect": "NoSchedule"} in pod["tolerations"]  # fmt: skip
        assert pod["containers"][0]["image"].endswith("-cuda")
    else:
        assert "nvidia.com/gpu" not in limits and "tolerations" not in pod


def _documented_exit_statuses() -> list[int]:
    said = HELP.split("Exit status:", 1)[1].split("\n\n", 1)[0]
    return sorted({int(n) for n in re.findall(r"\b(\d+)\b", said)})


#: What the Job should do on each exit status of `scoring run`.
EXPECTED = {
    0: "succeeds",
    1: "retry, counted",  # may pass on a retry (a store's hiccup, an unreadable file)
    2: "FailJob",  # a bad option or job file
    3: "FailJob",  # the plan cannot meet the deadline
    4: "FailJob",  # finished after the deadline: complete, but the window was missed
    5: "FailJob",  # a [checks] breach: nothing published
    6: "FailJob",  # the input does not fit the model: a retry reads the same rows
    130: "Ignore",  # SIGINT: stopped, resumed by the next pod
    143: "Ignore",  # SIGTERM: drained or evicted
}


@needs_kubectl
def test_each_exit_status_has_its_failure_policy() -> None:
    statuses = _documented_exit_statuses()
    assert statuses == sorted(EXPECTED), "a new exit status needs its policy here"
    policy = _cronjob(_rendered(DEPLOY / "overlays" / "cpu"))["spec"]["jobTemplate"]["spec"]
    rules = policy["podFailurePolicy"]["rules"]

    def action(status: int) -> str:
        if status == 0:
            return "succeeds"
        for rule in rules:
            codes = rule.get("onExitCodes")
            if codes and codes["operator"] == "In" and status in codes["values"]:
                assert codes["containerName"] == "scoring"
                return str(rule["action"])
        return "retry, counted"  # no rule: the Job's backoffLimit counts it

    assert {s: action(s) for s in statuses} == EXPECTED
    assert policy["backoffLimit"] >= 1
    assert {"type": "DisruptionTarget", "status": "True"} in [
        c for r in rules if r["action"] == "Ignore" for c in r.get("onPodConditions", [])
    ]


@needs_kubectl
@pytest.mark.parametrize("job", sorted(p.stem for p in (ROOT / "jobs").glob("*.toml")))
def test_deploy_render_writes_an_overlay_for_each_example_job(job: str, tmp_path: Path) -> None:
    path = ROOT / "jobs" / f"{job}.toml"
    out = tmp_path / "overlay"
    for gpu in ([] if job == "ray" else ["--gpu"], []):
        said = runner.invoke(app, ["deploy", "render", str(path), "--out", str(out),
                                   "--schedule", "30 0 * * *", "--base", str(DEPLOY),
                                   *gpu])  # fmt: skip
        assert said.exit_code == 0, said.output
        resources = _rendered(out)
        _validate(resources, tmp_path)
        suffix = said.stdout.strip().removeprefix("scoring")  # -<the job's name>
        assert all(suffix in r["metadata"]["name"] for r in resources)
        (config,) = [r for r in resources if r["kind"] == "ConfigMap"]
        assert config["data"]["job.toml"] == path.read_text()
        text = path.read_text()
        deadline = re.search(r'^deadline = "([^"]+)"', text, flags=re.M)
        assert deadline is not None
        zone_name = re.search(r'^timezone = "([^"]+)"', text, flags=re.M)
        seconds = active_deadline(window_seconds(
            deadline.group(1), schedule="30 0 * * *",
            timezone=zone_name.group(1) if zone_name else "UTC"))  # fmt: skip
        if job == "ray":
            (ray_job,) = [r for r in resources if r["kind"] == "RayJob"]
            assert ray_job["spec"]["activeDeadlineSeconds"] == seconds
            continue
        cronjob = _cronjob(resources)
        assert cronjob["spec"]["schedule"] == "30 0 * * *"
        assert cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == seconds
        zone = re.search(r'^timezone = "([^"]+)"', text, flags=re.M)
        assert cronjob["spec"].get("timeZone") == (zone.group(1) if zone else "UTC")
        pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert ("nvidia.com/gpu" in pod["containers"][0]["resources"]["limits"]) == bool(gpu)


@needs_kubectl
def test_render_bounds_the_ray_workers_by_the_job_s_autoscale(tmp_path: Path) -> None:
    """``scoring deploy render`` of the KubeRay overlay's own job file writes the same
    workers group as the overlay; other bounds are written as given, and validate."""
    path = DEPLOY / "overlays" / "ray" / "job.toml"
    groups = []
    for text in (path.read_text(), re.sub(r"max_workers = \d+", "max_workers = 3",
                 path.read_text().replace("min_workers = 1", "min_workers = 2"))):  # fmt: skip
        job = tmp_path / f"job{len(groups)}.toml"
        job.write_text(text)
        out = tmp_path / f"overlay{len(groups)}"
        said = runner.invoke(app, ["deploy", "render", str(job), "--out", str(out),
                                   "--base", str(DEPLOY)])  # fmt: skip
        assert said.exit_code == 0, said.output
        resources = _rendered(out)
        _validate(resources, tmp_path)
        (ray_job,) = [r for r in resources if r["kind"] == "RayJob"]
        (group,) = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        groups.append((group["minReplicas"], group["replicas"], group["maxReplicas"]))
    (shipped,) = [r for r in _rendered(DEPLOY / "overlays" / "ray") if r["kind"] == "RayJob"]
    assert groups[0] == tuple(shipped["spec"]["rayClusterSpec"]["workerGroupSpecs"][0][k]
                              for k in ("minReplicas", "replicas", "maxReplicas"))  # fmt: skip
    assert groups == [(1, 1, 8), (2, 2, 3)]


def test_render_refuses_bad_autoscale_bounds_in_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    for table, said_ in [
        ("min_workers = 4\nmax_workers = 2", "more than max_workers 2"),
        ("max_workers = 0", "autoscale.max_workers"),
        ("max_workers = 2\nwait = 'soon'", "autoscale.wait"),
        ("max_workers = 2\nmax_worker = 3", "autoscale.max_worker"),
    ]:
        job.write_text(f'name = "j"\nengine = "ray"\ndeadline = "1h"\n[autoscale]\n{table}\n')
        said = runner.invoke(app, ["deploy", "render", str(job), "--out", str(tmp_path / "o"),
                                   "--base", str(DEPLOY)])  # fmt: skip
        assert said.exit_code == 2 and said_ in said.stderr, said.output
        assert len(said.stderr.strip().splitlines()) == 1, said.stderr


def test_the_window_and_the_pod_s_deadline() -> None:
    assert window_seconds("45m", schedule=None) == 2700
    assert window_seconds("1h30m", schedule=None) == 5400
    assert window_seconds("01:45", schedule="30 0 * * *") == 75 * 60
    assert window_seconds("00:15", schedule="30 23 * * *") == 45 * 60  # past midnight
    with pytest.raises(Exception, match="needs a daily schedule"):
        window_seconds("01:45", schedule="*/5 * * * *")
    # Dated from the run's date, which the pod sets to the day it starts.
    assert window_seconds("${RUN_DATE}+1d 01:45", schedule="30 0 * * *") == (24 * 60 + 75) * 60
    assert window_seconds("$RUN_DATE 01:45", schedule="30 0 * * *") == 75 * 60
    with pytest.raises(Exception, match="comes before the schedule's start"):
        window_seconds("${RUN_DATE} 00:15", schedule="30 0 * * *")
    with pytest.raises(Exception, match="needs a daily schedule"):
        window_seconds("${RUN_DATE}+1d 01:45", schedule=None)
    with pytest.raises(Exception, match="is one day's: a CronJob runs every day"):
        window_seconds("2026-11-28 01:45", schedule="30 0 * * *")  # one day only: no CronJob
    assert active_deadline(2700) == 2700 + 675  # a quarter more
    assert active_deadline(600) == 600 + 600  # at least ten minutes more


def test_render_refuses_a_cronjob_without_a_schedule_in_one_line(tmp_path: Path) -> None:
    said = runner.invoke(app, ["deploy", "render", str(ROOT / "jobs" / "nightly.toml"),
                               "--out", str(tmp_path / "o"), "--base", str(DEPLOY)])  # fmt: skip
    assert said.exit_code == 2 and "needs a schedule" in said.stderr, said.output
    said = runner.invoke(app, ["deploy", "render", str(ROOT / "jobs" / "nightly.toml"),
                               "--out", str(tmp_path / "o"), "--schedule", "0 1 * * *",
                               "--base", str(tmp_path)])  # fmt: skip
    assert said.exit_code == 2 and "holds no kustomization.yaml" in said.stderr, said.output


def test_the_containerfile_builds_what_the_docs_say() -> None:
    """The image's contract, read from the Containerfile (``make image`` builds it): a
    non-root user, ``scoring`` as the entrypoint, extras that pyproject.toml defines,
    torch pinned as the Makefile pins it, and the CPU kernel built into the image."""
    import tomllib

    text = (ROOT / "Containerfile").read_text()
    assert re.search(r"^USER 10001:10001$", text, flags=re.M)
    assert re.search(r'^ENTRYPOINT \["scoring"\]$', text, flags=re.M)
    extras = re.search(r"^ARG EXTRAS=(.+)$", text, flags=re.M)
    assert extras is not None
    defined = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras.group(1).split(",")) <= set(defined)
    cuda = re.search(r"^ARG CUDA_EXTRAS=(.+)$", text, flags=re.M)
    assert cuda is not None and set(cuda.group(1).split(",")) <= set(defined)
    # The GPU kernels' cache: warmed where the build sees a GPU, writable by the user.
    assert "TRITON_CACHE_DIR=/opt/scoring/cache/triton" in text
    assert "chown -R 10001:10001 /opt/scoring/cache/triton" in text
    torch = re.search(r"^ARG TORCH_VERSION=(.+)$", text, flags=re.M)
    pinned = re.search(r"^TORCH_VERSION \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert torch is not None and pinned is not None and torch.group(1) == pinned.group(1)
    assert "kernel_library()" in text and "SCORING_COMPILE_CACHE=/opt/scoring/cache" in text
    ignored = (ROOT / ".containerignore").read_text().split()
    assert ignored[ignored.index("*") + 1 :][:3] == ["!pyproject.toml", "!README.md", "!scoring/"]


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles", "UTC"])
def test_the_pod_s_run_date_and_the_render_s_window_agree_in_every_zone(zone: str) -> None:
    """Found from outside: east of UTC the pod dated its run by the UTC day, so a job's
    own ``${RUN_DATE} 01:45`` fell 22.75 h before its 00:30 start.  Now the pod's
    ``scoring run --run-date today`` dates the run in the job's zone, which the render
    counts from: at every start of a year of nights (clock changes included) the job's
    deadline is after its start and within the CronJob's window, which is met exactly on
    a night without a clock change."""
    from datetime import datetime, timedelta
    from datetime import timezone as tz
    from zoneinfo import ZoneInfo

    from scoring._when import run_date
    from scoring.jobs import JobSpec

    for deadline in ("${RUN_DATE} 01:45", "${RUN_DATE}+1d 00:15", "01:45", "02:30"):
        window = window_seconds(deadline, schedule="30 0 * * *", timezone=zone)
        elapsed = []
        for day in range(365):
            start = datetime(2026, 1, 1, 0, 30, tzinfo=ZoneInfo(zone)) + timedelta(days=day)
            start = start.astimezone(tz.utc)  # what the CronJob starts at, in its zone
            dated = deadline.replace("${RUN_DATE}", run_date(zone, now=start).isoformat())
            spec = JobSpec.model_validate({"name": "j", "model": "m", "input": "i",
                                           "output": "o", "deadline": dated,
                                           "timezone": zone})  # fmt: skip
            at = spec.deadline_at(start)
            assert at is not None and at > start, (zone, deadline, start)
            elapsed.append((at - start).total_seconds())
        assert max(elapsed) == window, (zone, deadline)
        assert elapsed[10] in (window, window - 3600)  # a January night: an hour less at most
        if zone in ("UTC", "Asia/Tokyo"):  # no clock changes: every night the same
            assert set(elapsed) == {window}


@pytest.mark.parametrize(("given", "says"), [
    ({"deadline": "25:99"}, "deadline '25:99': hour must be in 0..23"),
    ({"deadline": "24:00"}, "deadline '24:00': hour must be in 0..23"),
    ({"schedule": "every night"}, "is not a cron schedule"),
    ({"schedule": "99 99 * * *"}, "minute '99' is not a value from 0 to 59"),
    ({"schedule": "30 0 * * MON-XYZ"}, "day of week 'MON-XYZ'"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"flag": "America/New_York"}, "is not the job's timezone 'Europe/Berlin'"),
])  # fmt: skip
def test_render_refuses_what_the_job_would_refuse_in_one_line(
    tmp_path: Path, given: dict[str, str], says: str
) -> None:
    """Found from outside: a deadline of 25:99 (which the job refuses), a schedule that
    is no cron expression and an unknown time zone were rendered."""
    job = tmp_path / "job.toml"
    job.write_text(
        'name = "j"\nmodel = "m"\ninput = "i/"\noutput = "o/"\n'
        f'deadline = "{given.get("deadline", "${RUN_DATE} 01:45")}"\n'
        f'timezone = "{given.get("timezone", "Europe/Berlin")}"\n'
    )
    flag = ["--timezone", given["flag"]] if "flag" in given else []
    said = runner.invoke(app, ["deploy", "render", str(job), "--out", str(tmp_path / "o"),
                               "--schedule", given.get("schedule", "30 0 * * *"),
                               "--base", str(DEPLOY), *flag])  # fmt: skip
    assert said.exit_code == 2 and says in said.stderr, said.output
    assert len(said.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "kustomization.yaml").exists()
    for cron in ("30 0 * * *", "*/15 1-5 * * MON-FRI", "0 0 1 JAN,JUL ?", "@daily"):
        from scoring._when import check_schedule

        assert check_schedule(cron) == cron


def test_run_date_today_is_the_job_s_day_and_a_given_one_is_checked(tmp_path: Path) -> None:
    """``scoring run --run-date today`` (the rendered pod's command) dates the run in the
    job's zone; the environment's RUN_DATE wins; a day that does not exist is refused."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from scoring.errors import JobFileError
    from scoring.jobs._spec import job_run_date

    job = tmp_path / "job.toml"
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):  # UTC+14 and UTC-11
        job.write_text(f'name = "j"\ntimezone = "{zone}"\n')
        before = datetime.now(ZoneInfo(zone)).date().isoformat()
        said = job_run_date(job, "today")
        assert said in (before, datetime.now(ZoneInfo(zone)).date().isoformat())
    assert job_run_date(job, "2026-11-21") == "2026-11-21"
    with pytest.raises(JobFileError, match="--run-date '2026-02-30'"):
        job_run_date(job, "2026-02-30")
    done = runner.invoke(app, ["plan", str(job), "--run-date", "2026-02-30"])
    assert done.exit_code == 2 and "--run-date '2026-02-30'" in done.output
