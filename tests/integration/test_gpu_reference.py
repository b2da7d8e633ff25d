"""scripts/gpu_reference.sh and its parts, on a machine without a GPU.

The dry run is the real script asking the project's own estimate (pytest --collect-only with
--bench-device cuda); the robustness tests run real parts with FSDP_BENCH_REFERENCE_STANDIN=cpu,
which swaps every case for a tiny CPU one, and stop them as a user or a GPU lease would (SIGINT,
`timeout`): whatever ends a part, it leaves one archive of its run folders and its log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from fsdp_bench.analysis.duration import SESSION_S, case_seconds, gpu_names
from fsdp_bench.plan.options import parse_sweep
from tests.sweep_helpers import PROJECT_ROOT, child_env, processes_of

SCRIPT = PROJECT_ROOT / "scripts" / "gpu_reference.sh"
PARTS_DIR = PROJECT_ROOT / "scripts" / "gpu_reference"
PARTS = [
    "part1_smoke",
    "part2_mfu",
    "part3_gpt2_sweep",
    "part4_fidelity",
    "part5_eager_vs_compiled",
    "part6_fidelity_gpu_bound",
    "part7_tune",
    "part8_memory_out_of_sample",
    "part9_smoke_changed",
    "part10_mfu_chunked_loss",
]
QUEUE = [
    "part9_smoke_changed",
    "part3_gpt2_sweep",
    "part7_tune",
    "part10_mfu_chunked_loss",
    "part4_fidelity",
    "part6_fidelity_gpu_bound",
    "part5_eager_vs_compiled",
    "part8_memory_out_of_sample",
]
ARCHIVE_LIMIT = 16 * 2**20


def script_env(**extra: str) -> dict[str, str]:
    """The scripts call `python3` (the GPU machine has no venv): this interpreter's comes first.
    No GPU is visible, so estimates use the default GPU's figures on any machine."""
    env = child_env(CUDA_VISIBLE_DEVICES="", **extra)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def bash(*args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", *args], cwd=PROJECT_ROOT, env=script_env(**extra), capture_output=True, text=True, timeout=timeout
    )


# --- the dry run ---------------------------------------------------------------------------------

TABLE_ROW = re.compile(r"^(part\d+_\S+|total|queue \([\d ]+\))\s+(\d+)?\s+(\d+\.\d)(\s+over .*|\s+done)?$")


def table(stdout: str) -> dict[str, tuple[int, float, str]]:
    """The dry run's closing table: name -> (cases, minutes, "over ..."/"done"/"")."""
    rows = map(TABLE_ROW.match, stdout.splitlines())
    return {m[1]: (int(m[2] or 0), float(m[3]), (m[4] or "").strip()) for m in rows if m}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole plan: against an empty results folder nothing is done yet."""
    return bash(str(SCRIPT), "--dry-run", "--results", str(tmp_path_factory.mktemp("none")), timeout=600)


def test_dry_run_gives_every_part_in_order_within_its_limits(dry_run):
    assert dry_run.returncode == 0, dry_run.stdout + dry_run.stderr
    rows = table(dry_run.stdout)
    queue = "queue (9 3 7 10 4 6 5 8)"
    assert list(rows) == [*PARTS, "total", queue]
    for part in PARTS:
        cases, minutes, mark = rows[part]
        assert cases > 0 and 0 < minutes <= 8 and mark == "", (part, rows[part])
    assert rows["total"][0] == sum(rows[p][0] for p in PARTS)
    assert rows["total"][1] == pytest.approx(sum(rows[p][1] for p in PARTS), abs=0.2)
    # the queue, from nothing measured, in three slots of 9 minutes
    assert rows[queue][1] == pytest.approx(sum(rows[p][1] for p in QUEUE), abs=0.2) and rows[queue][1] <= 27
    assert "limits: 8 min per part, 27 min for what the queue still has to do" in dry_run.stdout
    assert "H100 SXM's published peak" in dry_run.stdout  # the default GPU's figures, no GPU here


def test_a_slots_dry_run_counts_only_what_the_committed_results_lack():
    """Against results/reference/NVIDIA-H100-80GB-HBM3 (the default without a GPU): part 5's
    eager run is committed at this measurement version (done); part 4's bf16 batch-8 pairs were
    measured against version 1 of the bare loop, so they are measured again against version 2;
    part 3 re-runs only the six cases the first loop measured, and the next slot of 9 minutes is
    at most 8 of them (a minute kept for the last part's stop)."""
    proc = bash(str(SCRIPT), "--dry-run", "--budget-min", "9", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table(proc.stdout)
    assert list(rows)[: len(QUEUE)] == QUEUE  # the queue's value order
    assert re.search(r"^  eager-vs-compiled-llama3_1b done \(2 case\(s\) ok", proc.stdout, re.M)
    assert rows["part4_fidelity"][0] == 8 and rows["part4_fidelity"][2] == ""
    assert re.search(r"^  fidelity-fsdp2-bf16-bs8-m\d+-b2 ", proc.stdout, re.M), proc.stdout
    assert rows["part3_gpt2_sweep"][0] == 6 and "(6 kept)" in proc.stdout
    slot = re.search(r"^next slot \(--budget-min 9\.0, 60 s kept for the last stop\): (.+)$", proc.stdout, re.M)
    planned = re.search(r"^  (\d+\.\d) min by the estimate; after it: (.+)$", proc.stdout, re.M)
    assert slot and planned, proc.stdout[-2000:]
    assert slot[1].split()[:2] == ["part9_smoke_changed", "part3_gpt2_sweep"]
    assert float(planned[1]) <= 8.0
    assert float(planned[1]) == pytest.approx(sum(rows[p][1] for p in slot[1].split()), abs=0.2)


def test_dry_run_schedules_no_case_that_would_be_skipped(dry_run):
    assert "would be skipped" not in dry_run.stdout + dry_run.stderr


def test_dry_run_minutes_are_the_projects_estimate():
    """Part 2's seconds are exactly what analysis.duration gives its cases: not typed by hand."""
    proc = bash(str(PARTS_DIR / "part2_mfu.sh"), "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seconds = int(re.search(r"^part2_mfu: 3 case\(s\), [\d.]+ min \((\d+) s\)$", proc.stdout, re.M)[1])
    sweep = parse_sweep(
        {
            "device": "cuda",
            "nproc": "1",
            "model": "llama3_1b",
            "seq-len": "2048",
            "strategies": "fsdp2",
            "precision": "bf16",
            "compile": "on",
            "optimizer-impl": "fused",
            "batch-sizes": "2,4,8",
            "grad-accum": "1",
            "steps": "20",
            "warmup": "5",
        },
        plan_only=True,
    )
    expected = SESSION_S["cuda"] + sum(case_seconds(case) for case in sweep.cases())
    assert abs(seconds - expected) <= 1, (seconds, expected)


def test_dry_run_says_when_a_gpu_breaks_the_limits():
    proc = bash(str(SCRIPT), "--dry-run", "--gpu-name", "T4", "2", timeout=120)  # fp32 rate for bf16: far too slow
    assert proc.returncode == 1
    assert table(proc.stdout)["part2_mfu"][2] == "over 8 min" and "over 8 min" in proc.stdout
    assert "T4's published peak" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["99"], "no part '99'"),
        (["--dry-run", "--bogus"], "unknown option '--bogus'"),
        (["1"], "--out DIR is required"),
        (["--out"], "--out needs a value"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    proc = bash(str(SCRIPT), *args, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def with_nvidia_smi(tmp_path: Path, listed: str) -> dict[str, str]:
    """script_env with an `nvidia-smi` first on PATH that lists `listed` as the GPU's name (none
    when empty, as on a machine without a GPU or its driver): the same answer on any machine."""
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    body = f"echo '{listed}'" if listed else "echo 'No devices were found' >&2; exit 6"
    (stub / "nvidia-smi").write_text(f"#!/usr/bin/env bash\n{body}\n")
    (stub / "nvidia-smi").chmod(0o755)
    env = script_env()
    env["PATH"] = os.pathsep.join([str(stub), env["PATH"]])
    return env


def run_plan(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_before_any_part(proc: subprocess.CompletedProcess, *said: str) -> None:
    """Exit 2 with one line on stderr, and no part started (each would print its `== partN` lines)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("gpu_reference.sh: ") and all(s in proc.stderr for s in said), proc.stderr


def test_no_gpu_is_one_line_before_any_part(tmp_path):
    """Once every part said it and wrote an empty archive (50 lines); now nothing is written."""
    out = tmp_path / "out"
    proc = run_plan(["--out", str(out)], with_nvidia_smi(tmp_path, ""))
    assert_one_line_before_any_part(proc, "no NVIDIA GPU listed by nvidia-smi", "--dry-run", "--results DIR")
    assert not out.exists()


# The next tests give --results: were the check gone, a part would otherwise put its run folders
# in the checkout's results/reference/<GPU> (the committed results).


@pytest.mark.parametrize("where", ["under-proc", "a-file", "under-a-file"])
def test_an_out_that_cannot_be_written_is_one_line_before_any_part(tmp_path, where):
    """Once each part failed on it twice (70 lines)."""
    (tmp_path / "file").write_text("")
    out = {"under-proc": "/proc/gpu-reference-out", "a-file": tmp_path / "file", "under-a-file": tmp_path / "file/out"}
    results = tmp_path / "results"
    proc = run_plan(
        ["--out", str(out[where]), "--results", str(results)], with_nvidia_smi(tmp_path, "NVIDIA H100 80GB HBM3")
    )
    assert_one_line_before_any_part(proc, f"--out {out[where]}: cannot create that folder (")
    assert not results.exists()


@pytest.mark.parametrize("mode", ["--dry-run", "--out"])
def test_an_unknown_gpu_name_is_one_line_naming_the_known_ones(tmp_path, mode):
    """The names are the project's peak-FLOPs table's; once every run of every part said it (66
    lines) and the dry run printed a table of zeros."""
    out, results = tmp_path / "out", tmp_path / "results"
    args = [mode, str(out)] if mode == "--out" else [mode]
    proc = run_plan(
        [*args, "--results", str(results), "--gpu-name", "Z9000"], with_nvidia_smi(tmp_path, "NVIDIA H100 80GB HBM3")
    )
    assert_one_line_before_any_part(proc, "--gpu-name: 'Z9000' is not in the peak-FLOPs table", *gpu_names())
    assert not out.exists() and not results.exists()


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--dry-run", "--budget-min", "9", "-h"]])
def test_help_prints_the_usage_and_exits_0(args):
    proc = bash(str(SCRIPT), *args, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    for said in ("bash scripts/gpu_reference.sh --out DIR", "--dry-run", "-h, --help", "queue"):
        assert said in proc.stdout, said
    for option in ("--out DIR", "--results DIR", "--gpu-name NAME", "--budget-min M"):
        assert re.search(rf"^  {re.escape(option)} +\S", proc.stdout, re.M), option  # each option is explained
    assert not re.search(r"^part\d+_\S+: \d+ case", proc.stdout, re.M)  # no part's dry run


def test_a_part_without_out_is_one_line_and_exit_2(tmp_path):
    proc = bash(str(PARTS_DIR / "part1_smoke.sh"), timeout=60)
    assert proc.returncode == 2 and "--out DIR is required" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_every_part_uses_common_and_hides_no_failure():
    parts = sorted(PARTS_DIR.glob("part*.sh"), key=lambda p: int(re.match(r"part(\d+)_", p.name)[1]))
    assert [p.stem for p in parts] == PARTS
    assert "--bench-resume" in (PARTS_DIR / "common.sh").read_text()
    for script in [*parts, PARTS_DIR / "common.sh", PARTS_DIR / "steps.sh", SCRIPT]:
        text = script.read_text()
        # no failure hidden, and none that ends a part before its archive (set -e)
        assert "|| true" not in text and not re.search(r"^set -[a-z]*e", text, re.M), script
    for part in parts:
        text = part.read_text()
        assert 'source "$(dirname "$0")/common.sh"' in text and "\nstart_part " in text, part
        assert text.rstrip().endswith("finish"), part


@pytest.mark.parametrize("part", ["part4_fidelity", "part7_tune"])
def test_an_unreadable_measurement_version_stops_the_item_instead_of_naming_it(tmp_path, part):
    """Fidelity reports and tune folders are named by the worker's measurement version, which the
    part asks `python3` for; one that cannot import fsdp_bench once gave the name '-m', which would
    read as done for every later version. Now the item stops with one line and the part exits 2."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(
        "#!/usr/bin/env bash\n"
        'if [[ "$*" == *MEASUREMENT_VERSION* ]]; then echo "ModuleNotFoundError: fsdp_bench" >&2; exit 1; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    (stub / "python3").chmod(0o755)
    env = script_env()
    env["PATH"] = os.pathsep.join([str(stub), env["PATH"]])
    proc = subprocess.run(
        ["bash", str(PARTS_DIR / f"{part}.sh"), "--dry-run", "--results", str(tmp_path / "results")],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot read fsdp_bench.results.schema's MEASUREMENT_VERSION" in proc.stderr
    assert not re.search(r"-m(-|\s|$)", proc.stdout, re.M), proc.stdout


# --- robustness on CPU (stand-in cases) ----------------------------------------------------------


def archive_members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def archive_text(path: Path, member: str) -> str:
    with tarfile.open(path) as tar:
        return tar.extractfile(member).read().decode()


def start_part(part: str, tmp_path: Path, *wrapper: str) -> subprocess.Popen:
    """The part as a user starts it: its own process group, SIGINT not ignored (a shell started
    in the background would otherwise pass its ignored SIGINT on)."""
    return subprocess.Popen(
        [
            *wrapper,
            "bash",
            str(PARTS_DIR / f"{part}.sh"),
            "--out",
            str(tmp_path / "out"),
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=PROJECT_ROOT,
        env=script_env(FSDP_BENCH_REFERENCE_STANDIN="cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_first_case(tmp_path: Path, part: str, timeout_s: float = 180) -> None:
    """Until the part's first run has a finished case (so the stop lands inside a pytest run)."""
    deadline = time.monotonic() + timeout_s
    while not list((tmp_path / "results" / part).glob("*/cases/*.json")):
        if time.monotonic() > deadline:
            raise AssertionError("no case finished in time")
        time.sleep(0.2)


RESULT = r"{part}/{run}/cases/[^/]+\.json"  # a case's merged result in the archive


def check_archive(tmp_path: Path, part: str) -> list[str]:
    archive = tmp_path / "out" / f"{part}.tar.gz"
    assert archive.is_file()
    assert archive.stat().st_size < ARCHIVE_LIMIT
    members = archive_members(archive)
    assert f"{part}.log" in members
    assert not any(m.endswith((".pid", ".lock")) for m in members)
    return members


def processes_left(results: Path, settle_s: float = 5.0) -> list[int]:
    """The run's processes still alive once they had `settle_s` to finish exiting: a rank killed
    at the stop can be in its kernel exit for a moment on a loaded machine (not yet a zombie);
    an orphan the stop missed lives on until its own deadline, minutes later, so it still shows."""
    deadline = time.monotonic() + settle_s
    while (left := processes_of(results)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


BUDGET_MIN = 4  # holds the stand-in sweep's estimate (part 3), perhaps not part 4's after it


def budgeted_plan(tmp_path: Path, *parts: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--budget-min", str(BUDGET_MIN), "--out", str(tmp_path / "out")]
        + ["--results", str(tmp_path / "results"), *parts],
        cwd=PROJECT_ROOT,
        env=script_env(FSDP_BENCH_REFERENCE_STANDIN="cpu"),
        capture_output=True,
        text=True,
        timeout=BUDGET_MIN * 60 + 100,
    )


def check_budgeted_plan(tmp_path: Path, out: str, returncode: int, took_s: float) -> None:
    """--budget-min as a 15-minute GPU slot uses it: each part starts only when its estimate fits
    in what is left (less the reserve for the last stop), runs under `timeout` with that, and
    leaves its archive; the whole call ends within the budget. (A part cut by `timeout`:
    test_timeout_leaves_the_archive.) Run by the SIGINT test, as the rerun of parts 3 and 4 after
    part 3 was stopped: part 3 resumes its remaining cases."""
    assert returncode in (0, 124), out[-3000:]
    assert took_s <= BUDGET_MIN * 60 + 5, took_s  # the budget counts from the script's start
    ran = re.findall(r"^== part (\d): estimated (\d+) s, (\d+) s left of the budget$", out, re.M)
    skipped = re.findall(
        r"^== part (\d): not started, (?:estimated (\d+) s with (-?\d+) s left|(-?\d+) s left)", out, re.M
    )
    assert sorted([n for n, *_ in ran] + [n for n, *_ in skipped]) == ["3", "4"], out[-3000:]
    assert ran and ran[0][0] == "3", out[-3000:]
    for part, estimate, left in ran:
        assert int(estimate) <= int(left)
        name = {"3": "part3_gpt2_sweep", "4": "part4_fidelity"}[part]
        check_archive(tmp_path, name)
    for _part, estimate, left, short in skipped:
        assert (estimate and int(estimate) > int(left)) or int(short) < 60
    assert processes_left(tmp_path / "results") == []


@pytest.mark.slow
def test_sigint_leaves_the_archive_and_a_rerun_continues(tmp_path):
    proc = start_part("part3_gpt2_sweep", tmp_path)
    try:
        wait_for_first_case(tmp_path, "part3_gpt2_sweep")
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-3000:]
    members = check_archive(tmp_path, "part3_gpt2_sweep")
    assert any(re.fullmatch(RESULT.format(part="part3_gpt2_sweep", run="gpt2-124m-sweep"), m) for m in members)
    log = archive_text(tmp_path / "out" / "part3_gpt2_sweep.tar.gz", "part3_gpt2_sweep.log")
    assert "INT received" in log and "with status 130" in log
    assert processes_left(tmp_path / "results") == []

    # the rerun, as a GPU slot starts it: the plan under a budget (check_budgeted_plan)
    started = time.monotonic()
    proc = budgeted_plan(tmp_path, "3", "4")
    out = proc.stdout + proc.stderr
    check_budgeted_plan(tmp_path, out, proc.returncode, time.monotonic() - started)
    assert "--bench-resume" in out and "part3_gpt2_sweep: ended" in out and "with status 0" in out
    members = check_archive(tmp_path, "part3_gpt2_sweep")
    results = [m for m in members if re.fullmatch(RESULT.format(part="part3_gpt2_sweep", run="gpt2-124m-sweep"), m)]
    assert len(results) == 4  # ddp, fsdp1_no_shard, fsdp2, fsdp2_no_reshard (the others need CUDA)
    log = archive_text(tmp_path / "out" / "part3_gpt2_sweep.tar.gz", "part3_gpt2_sweep.log")
    assert log.count("== part3_gpt2_sweep: ended") == 2  # the log goes on across runs


@pytest.mark.slow
def test_timeout_leaves_the_archive(tmp_path):
    """`timeout` as a GPU lease uses it: SIGTERM to the part's whole process group, mid-part."""
    proc = start_part("part1_smoke", tmp_path, "timeout", "-s", "TERM", "15")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 124, out[-3000:]  # timeout's own status: it did stop the part
    check_archive(tmp_path, "part1_smoke")
    log = archive_text(tmp_path / "out" / "part1_smoke.tar.gz", "part1_smoke.log")
    assert "TERM received" in log and "with status 143" in log
    assert processes_left(tmp_path / "results") == []


FAKE_PART = """
source {common}
start_part "a failing step, then one that works, then traces and snapshots to trim"
run broken --bench-strategies=zero4
step after-the-failure echo still running
mkdir -p "$results/$part/profiled/cases/c/tb_profile"
for i in 1 2 3; do head -c $((6 * 2**20)) /dev/urandom >"$results/$part/profiled/cases/c/tb_profile/rank0.$i.pt.trace.json"; done
for i in 0 1; do head -c $((6 * 2**20)) /dev/urandom >"$results/$part/profiled/cases/c/memory_snapshot_rank$i.pickle"; done
echo 1234 >"$results/$part/profiled/cases/c/rank-0.pid"
finish
"""


def test_a_failing_step_is_reported_and_the_archive_is_trimmed_under_16_mib(tmp_path):
    part = tmp_path / "part9_fake.sh"
    part.write_text(FAKE_PART.format(common=PARTS_DIR / "common.sh"))
    proc = bash(
        str(part),
        "--out",
        str(tmp_path / "out"),
        "--results",
        str(tmp_path / "results"),
        timeout=120,
        FSDP_BENCH_REFERENCE_STANDIN="cpu",
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error, kept as the exit status
    assert "!! broken: exited 4" in proc.stderr + proc.stdout and "still running" in proc.stdout
    members = check_archive(tmp_path, "part9_fake")
    traces = [m for m in members if m.endswith(".pt.trace.json")]
    snapshots = [m for m in members if m.endswith(".pickle")]
    # 2 traces + 1 snapshot of incompressible 6 MiB each would be 18 MiB: one trace is dropped
    assert (len(traces), len(snapshots)) == (1, 1), members
    log = archive_text(tmp_path / "out" / "part9_fake.tar.gz", "part9_fake.log")
    assert "unknown value 'zero4'" in log and "still running" in log


KILLED_PART = """
source "$(dirname "$0")/common.sh"
start_part "a result, then SIGKILL before the EXIT trap can archive it"
mkdir -p "$results/$part/run/cases" && echo '{}' >"$results/$part/run/cases/c.json"
kill -KILL $$
"""


def test_a_part_killed_before_its_archive_still_leaves_one(tmp_path):
    """A part that outlives its stop reserve is KILLed by `timeout` and its EXIT trap never runs;
    gpu_reference.sh then archives its run folders and log (a copy of the scripts with a part
    that kills itself: the real parts take a minute to reach that point)."""
    import shutil

    tree = tmp_path / "tree"
    (tree / "scripts" / "gpu_reference").mkdir(parents=True)
    shutil.copy(SCRIPT, tree / "scripts")
    for name in ("common.sh", "steps.sh"):
        shutil.copy(PARTS_DIR / name, tree / "scripts" / "gpu_reference")
    (tree / "scripts" / "gpu_reference" / "part1_killed.sh").write_text(KILLED_PART)
    out, results = tmp_path / "out", tmp_path / "results"
    args = ["--out", str(out), "--results", str(results), "1"]
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / "gpu_reference.sh"), *args],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 137, said  # the kill stays in the exit status
    assert "!! part 1: ended without its archive; writing it from its run folders" in said
    members = check_archive(tmp_path, "part1_killed")
    assert "part1_killed/run/cases/c.json" in members, members
    log = archive_text(out / "part1_killed.tar.gz", "part1_killed.log")
    assert "a result, then SIGKILL" in log and "killed before its own archive; archived by" in log, log


@pytest.mark.slow
def test_a_stop_of_the_whole_plan_ends_after_the_running_parts_archive(tmp_path):
    """gpu_reference.sh passes the stop to the running part, which archives; no later part starts.
    The SIGTERM goes to the plan's whole process group once part 3 has a result, as `timeout` sends it."""
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "--out", str(tmp_path / "out"), "--results", str(tmp_path / "results"), "3", "1"],
        cwd=PROJECT_ROOT,
        env=script_env(FSDP_BENCH_REFERENCE_STANDIN="cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_first_case(tmp_path, "part3_gpt2_sweep")
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, out[-3000:]
    check_archive(tmp_path, "part3_gpt2_sweep")
    assert "part3_gpt2_sweep: ended" in out and "with status 143" in out
    assert "ended without its archive" not in out  # the part wrote its own
    assert not (tmp_path / "out" / "part1_smoke.tar.gz").exists() and "part1_smoke" not in out
    assert processes_left(tmp_path / "results") == []
