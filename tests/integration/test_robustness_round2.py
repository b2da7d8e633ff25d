"""Issue 23, "nothing lost, nobody hurt, round two": what a hostile run, an unlucky disk or a second
sweep did to round one. One section per item of the issue; each test failed before the fix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp_bench.launch.session import SessionError, SweepSession
from fsdp_bench.plan.case import CaseError
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.results.layout import CaseDir, RunLayout, create_run_dir
from fsdp_bench.results.load import load_case_result
from fsdp_bench.results.schema import ResultError
from tests.sweep_helpers import PROJECT_ROOT, SMALL, child_env, pytest_cmd, write_sweep_project

GOLDEN_CASE = next((PROJECT_ROOT / "tests" / "data" / "golden" / "base" / "cases").glob("ddp-*.json"))
SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def _session(tmp_path, **raw):
    return SweepSession(parse_sweep({"device": "cpu", "results-dir": str(tmp_path), **raw}))


def _spawn(*argv, **kw):
    return subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw
    )


def _argv_bytes(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _alive_naming(folder: Path) -> list[int]:
    """Live, non-zombie processes with an argument inside `folder` (this test's own scan)."""
    prefix = os.fsencode(str(folder.resolve())) + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z" and any(a.startswith(prefix) for a in _argv_bytes(int(entry.name))):
                found.append(int(entry.name))
    return found


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def _one_line_usage_error(proc: subprocess.CompletedProcess, text: str) -> None:
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR:") and text in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "INTERNALERROR" not in proc.stdout + proc.stderr


def _collect(tmp_path, *args, env=None, co=True):
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        write_sweep_project(project)
    return subprocess.run(
        pytest_cmd("test_sweep.py", *(["--co"] if co else []), "-q", *args),
        cwd=project,
        env=child_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=180,
    )


# 1. A SIGKILLed pytest leaves nothing running: torchrun dies with it, its ranks with torchrun.
# tests/integration/test_kill_deadline.py runs it, with rank 1 stuck and ignoring SIGTERM, under
# the longest grace (the stop does not wait for it).


# 2. A resume is refused while an earlier attempt's torchrun lives, pid files or not.


def test_resume_is_refused_while_an_orphaned_torchrun_lives(tmp_path):
    run = RunLayout(create_run_dir(tmp_path))
    work = run.case_dir("ddp-gpt_tiny-ws2-bs1-ga1-opt_after-sl32")
    work.path.mkdir()
    work.case_file.write_text("{}")
    torchrun = _spawn(
        sys.executable,
        "-c",
        SLEEPER,
        "-m",
        "fsdp_bench.worker.torchrun",
        "--standalone",
        "-m",
        "fsdp_bench.worker",
        "--case",
        str(work.case_file),
        "--out",
        str(work.path),
    )
    try:
        assert _wait(lambda: os.fsencode(str(work.case_file)) in _argv_bytes(torchrun.pid), 10)
        with pytest.raises(SessionError, match=f"still has ranks running from an earlier attempt.*{torchrun.pid}"):
            _session(tmp_path).check_no_live_ranks(run.root)
    finally:
        torchrun.kill()
        torchrun.wait()
    _session(tmp_path).check_no_live_ranks(run.root)  # gone: allowed again


# 3. Cleanup matches the case file exactly: another sweep's path that ends with ours is left
#    alone, and a path with a non-UTF-8 byte is still found.


def test_cleanup_leaves_a_sweep_whose_path_ends_with_ours_alone(tmp_path):
    from fsdp_bench.launch.processes import kill_case_processes

    ours = CaseDir(tmp_path / "home" / "u" / "results" / "R" / "cases" / "x")
    ours.path.mkdir(parents=True)
    theirs = CaseDir(Path(str(tmp_path / "scratch") + str(ours.path)))
    other = _spawn(sys.executable, "-c", SLEEPER, "-m", "fsdp_bench.worker", "--case", str(theirs.case_file))
    try:
        assert _wait(lambda: os.fsencode(str(theirs.case_file)) in _argv_bytes(other.pid), 10)
        assert kill_case_processes(ours.path) == []
        time.sleep(0.2)
        assert other.poll() is None, "another sweep's rank was killed"
    finally:
        other.kill()
        other.wait()


def test_a_stuck_rank_under_a_non_utf8_path_is_found_and_stopped(tmp_path):
    from fsdp_bench.launch.processes import wait_until_gone

    work = CaseDir(tmp_path / os.fsdecode(b"r\xffun") / "cases" / "x")
    work.path.mkdir(parents=True)
    rank = _spawn(sys.executable, "-c", SLEEPER, "-m", "fsdp_bench.worker", "--case", str(work.case_file))
    try:
        assert _wait(lambda: os.fsencode(str(work.case_file)) in _argv_bytes(rank.pid), 10)
        assert wait_until_gone(work.path, timeout_s=5) == []
        assert rank.wait(timeout=5) == -signal.SIGKILL
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()


# 4. The lock file is our own plain file or refused: never a hard link, FIFO or other node.


def test_hard_linked_lock_is_refused_and_its_target_kept(tmp_path):
    run_dir = create_run_dir(tmp_path / "results")
    victim = tmp_path / "victim.txt"
    victim.write_text("twenty-one bytes here")
    os.link(victim, RunLayout(run_dir).lock_file)
    with pytest.raises(SessionError, match="hard-linked"):
        _session(tmp_path).lock_run_dir(run_dir)
    assert victim.read_text() == "twenty-one bytes here"


def test_fifo_lock_is_refused_without_blocking(tmp_path):
    run_dir = create_run_dir(tmp_path / "results")
    os.mkfifo(RunLayout(run_dir).lock_file)
    with pytest.raises(SessionError, match="not a regular file"):
        _session(tmp_path).lock_run_dir(run_dir)


# 5. --bench-run-id never adopts a folder with files in it.


@pytest.mark.parametrize(
    "files",
    [{"report.md": "mine", "comparison.csv": "a,b\n", "sweep.json": "{}"}, {"env.json": "{stale"}, {".lock": ""}],
)
def test_run_id_of_an_existing_folder_with_files_is_refused_untouched(tmp_path, files):
    named = tmp_path / "results" / "mine"
    named.mkdir(parents=True)
    for name, text in files.items():
        (named / name).write_text(text)
    out = _collect(tmp_path, *SMALL, "--bench-results-dir", str(tmp_path / "results"), "--bench-run-id", "mine")
    _one_line_usage_error(out, "already exists and holds")
    assert {p.name: p.read_text() for p in named.iterdir()} == files


# 6. A run folder deleted or replaced mid-sweep stops the sweep; it is never silently re-created.


@pytest.mark.parametrize("replace", [False, True], ids=["deleted", "replaced"])
def test_a_run_folder_gone_mid_sweep_stops_before_the_next_case(tmp_path, replace):
    session = _session(tmp_path, **{"batch-sizes": "1", "nproc": "2", "model": "gpt_tiny", "steps": "1"})
    run_dir = session.ensure_run_dir()
    case = session.sweep.cases()[0]
    try:
        shutil.rmtree(run_dir)
        if replace:
            (run_dir / "cases").mkdir(parents=True)
        with pytest.raises(SessionError, match="removed or replaced"):
            session.run(case)
    finally:
        session.close()
    assert run_dir.exists() == replace
    assert not replace or list(run_dir.rglob("*")) == [run_dir / "cases"]


# 7. A case that cannot fit in the host's memory is skipped, never launched; the sweep goes on (#37:
# a refused case is data, like any case that cannot run here).


def test_cases_predicted_over_the_machines_memory_are_skipped_in_one_line(tmp_path):
    out = _collect(
        tmp_path,
        *SMALL,
        "--bench-batch-sizes",
        "1,100000",
        "--bench-allow-slow-cpu",
        "--bench-timeout",
        "60",
        "-rs",
        "--bench-results-dir",
        str(tmp_path / "results"),
        co=False,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "1 passed, 1 skipped" in text and "Traceback" not in text, text
    plan = [ln for ln in text.splitlines() if "will be skipped, not launched" in ln]
    assert len(plan) == 1 and "1 case(s) need more host memory" in plan[0], text
    reason = next(ln for ln in text.splitlines() if ln.startswith("SKIPPED"))
    assert "needs about" in reason and "GiB is available; not launched" in reason, text
    assert "--bench-allow-memory-overcommit" in reason
    run = next((tmp_path / "results").iterdir())
    skipped = json.loads(next((run / "cases").glob("*bs100000*.json")).read_text())
    assert skipped["status"] == "skipped" and "needs about" in skipped["reason"] and skipped["ranks"] == []
    assert not (run / "cases" / skipped["case_id"]).exists()  # no case folder: nothing launched


def test_memory_plan_is_shown_by_collect_only_and_lifted_by_the_option(tmp_path):
    planned = _collect(
        tmp_path, *SMALL, "--bench-model", "linear_odsc", "--bench-batch-sizes", "1", "--bench-allow-slow-cpu"
    )
    assert planned.returncode == 0 and "need more host memory" in planned.stdout, planned.stdout
    allowed = _collect(
        tmp_path,
        *SMALL,
        "--bench-model",
        "linear_odsc",
        "--bench-batch-sizes",
        "1",
        "--bench-allow-slow-cpu",
        "--bench-allow-memory-overcommit",
    )
    assert allowed.returncode == 0 and "host memory" not in allowed.stdout


# 8. A Hugging Face config that cannot be built is one line at collection, never a launched case.

GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 64}


@pytest.mark.parametrize(
    "config, problem",
    [
        ({**GPT2, "n_embd": "big"}, "n_embd must be a positive integer"),
        ({k: v for k, v in GPT2.items() if k != "vocab_size"}, "vocab_size is missing"),
        ({**GPT2, "n_layer": -2}, "n_layer must be a positive integer"),
        ({**GPT2, "model_type": "no_such_model"}, "model_type 'no_such_model' is not supported"),
    ],
    ids=["string-size", "missing-vocab", "negative", "unknown-type"],
)
def test_bad_hf_config_is_one_line_before_any_case(tmp_path, config, problem):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CaseError, match=problem):
        parse_sweep({"device": "cpu", "model": f"hf:{folder}"})
    _one_line_usage_error(_collect(tmp_path, "--bench-device", "cpu", "--bench-model", f"hf:{folder}"), problem)


def test_hf_folder_with_bogus_weights_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT2))
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(CaseError, match="is not a safetensors file"):
        parse_sweep({"device": "cpu", "model": f"hf:{folder}"})


# 9. Odd case files are one note each, for visualize.py and for --bench-resume alike.


def _odd_case_files(cases: Path) -> dict[str, Path]:
    good = json.loads(GOLDEN_CASE.read_text())

    def variant(name: str, edit) -> Path:
        data = json.loads(json.dumps(good))
        edit(data)
        path = cases / f"{name}.json"
        path.write_text(json.dumps(data))
        return path

    made = {
        "string-metric": variant("string-metric", lambda d: d["metrics"].update(step_time_s_median="fast")),
        "rank-field": variant("rank-field", lambda d: d["ranks"][0].update(step_times_s="slow")),
        "rank-list": variant("rank-list", lambda d: d["ranks"][0].update(losses=["x"])),
        "timing": variant("timing", lambda d: d.update(launched_unix="yesterday")),
    }
    made["utf8"] = cases / "utf8.json"
    made["utf8"].write_bytes(GOLDEN_CASE.read_bytes().replace(b'"ok"', b'"\xff\xfe"', 1))
    made["deep"] = cases / "deep.json"
    made["deep"].write_text("[" * 200_000 + "]" * 200_000)
    made["bigint"] = cases / "bigint.json"
    made["bigint"].write_text(
        GOLDEN_CASE.read_text().replace('"schema_version": 2', '"schema_version": ' + "9" * 5000, 1)
    )
    made["dir"] = cases / "dir.json"
    made["dir"].mkdir()
    made["fifo"] = cases / "fifo.json"
    os.mkfifo(made["fifo"])
    made["huge"] = cases / "huge.json"
    with open(made["huge"], "wb") as fh:  # sparse: 65 MiB on paper, nothing on disk
        fh.truncate(65 * 2**20)
    return made


def test_odd_case_files_are_each_a_result_error(tmp_path):
    for path in _odd_case_files(tmp_path).values():
        with pytest.raises(ResultError):
            load_case_result(path)


def test_visualize_notes_each_odd_file_and_writes_the_rest(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_CASE.parent.parent, run)
    odd = _odd_case_files(run / "cases")
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "visualize.py"), str(run)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for path in odd.values():
        assert path.name in proc.stderr
    assert (run / "report.md").exists() and (run / "comparison.csv").exists()


def test_resume_sets_an_odd_case_file_aside_instead_of_failing(tmp_path):
    from fsdp_bench.launch.attempts import load_or_none

    for name, path in _odd_case_files(tmp_path).items():
        assert load_or_none(path) == {"status": "failed"}, name


# 10. Tracebacks that became one line: over-long paths and ids, and a race (a full disk and a
#     folder made read-only mid-sweep, on real filesystems: test_robustness_disk.py).


@pytest.mark.parametrize(
    "make, text",
    [
        (lambda t: t / ("n" * 300), "a folder name in the path is 300 bytes"),
        (lambda t: t.joinpath(*["d" * 200] * 22), "at most 4095 are allowed"),
    ],
    ids=["name-over-255", "path-over-4096"],
)
def test_over_long_results_paths_are_one_line(tmp_path, make, text):
    _one_line_usage_error(_collect(tmp_path, *SMALL, "--bench-results-dir", str(make(tmp_path))), text)


def test_a_case_id_too_long_for_a_file_name_is_refused(tmp_path):
    folder = tmp_path.joinpath(*["m" * 60] * 4)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(GPT2))
    _one_line_usage_error(
        _collect(tmp_path, "--bench-device", "cpu", "--bench-model", f"hf:{folder}"), "a file name holds 200 at most"
    )


def test_two_named_sweeps_at_once_one_runs_the_other_is_one_line(tmp_path):
    write_sweep_project(tmp_path)
    cmd = pytest_cmd(
        "test_sweep.py",
        "-q",
        *SMALL,
        "--bench-batch-sizes",
        "1",
        "--bench-results-dir",
        str(tmp_path / "results"),
        "--bench-run-id",
        "same",
    )
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [(p.communicate(timeout=300)[0], p.returncode) for p in procs]
    assert sorted(code for _, code in outs) == [0, 4], outs
    loser = next(out for out, code in outs if code == 4)
    assert "Traceback" not in loser and "SessionError" not in loser, loser
    # refused at parse (the folder already existed) or at its first case (lost the lock race): one line
    assert (
        sum(
            ("ERROR: --bench-run-id" in ln or "fsdp-bench:" in ln) and ("in use" in ln or "already" in ln)
            for ln in loser.splitlines()
        )
        == 1
    ), loser


# 11. Small holes: report escaping, a nan free-space floor, an empty --bench-data, a data
#     folder without usable text.


def test_report_summary_lines_are_escaped():
    import pandas as pd

    from fsdp_bench.report.page import Page, render_markdown

    page = Page(
        run_name="r", env=None, df=pd.DataFrame(), summary=[("Fastest:", "case a*b[x](http://e) `c`")], charts=[]
    )
    text = render_markdown(page)
    assert "a\\*b\\[x\\](http://e) \\`c\\`" in text and "[x](http" not in text


@pytest.mark.parametrize(
    "args, env, text",
    [
        ([], {"FSDP_BENCH_MIN_FREE_MIB": "nan"}, "FSDP_BENCH_MIN_FREE_MIB: 'nan' is not a number"),
        (["--bench-data", ""], {}, "--bench-data: empty value"),
    ],
    ids=["min-free-nan", "data-empty"],
)
def test_bad_settings_are_one_line(tmp_path, args, env, text):
    _one_line_usage_error(_collect(tmp_path, *SMALL, *args, env=env), text)


def test_a_data_folder_without_usable_text_is_refused_before_launch(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text('{"title": "no text field"}\nnot json\n')
    _one_line_usage_error(_collect(tmp_path, *SMALL, "--bench-data", str(data)), "has no usable text")
