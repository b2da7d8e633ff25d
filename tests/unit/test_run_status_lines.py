"""The terminal's words about the run itself, without running one: the resume command is the one
the user ran, a resumed run's kept cases neither look run nor bend the ETA, a partial run says so
before its answer, a tuning counts against its own bound, and an all-skipped selection is one
line (the end-to-end checks are tests/integration/test_partial_run_terminal.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from fsdp_bench.launch.progress import BenchState, Progress, invocation_words, resume_command
from fsdp_bench.launch.session import SweepSession
from fsdp_bench.launch.tune import TuneCounter
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.report.terminal import no_case_line, summary_body_lines, with_run_status

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "base"
OK = {"status": "ok", "metrics": {"step_time_s_median": 0.1, "tokens_per_s_per_device": 1000.0}}


def test_the_resume_command_is_the_one_run_with_its_selection_and_the_run_folder():
    args = ["benchmarks", "-k", "bs2 and (ddp or fsdp2)", "--bench-steps", "3", "test_x.py::test_case[ddp-a]"]
    command = resume_command(("pytest", *args), "results/run 1")
    assert shlex.split(command) == ["pytest", *args, "--bench-resume", "results/run 1"]
    assert "'bs2 and (ddp or fsdp2)'" in command and "'test_x.py::test_case[ddp-a]'" in command


def test_an_earlier_resume_or_run_id_is_replaced_in_either_spelling():
    for old in (["--bench-resume", "results/old"], ["--bench-resume=results/old"], ["--bench-run-id", "mine"]):
        words = ("pytest", "benchmarks", *old, "-q", "--bench-run-id=x")
        assert resume_command(words, "results/new") == "pytest benchmarks -q --bench-resume results/new"


def test_the_program_is_said_as_the_user_started_it():
    assert invocation_words("/venv/bin/pytest", ["-q"]) == ("pytest", "-q")
    assert invocation_words("/venv/lib/python3.11/site-packages/pytest/__main__.py", ["-q"])[:3] == (
        "python",
        "-m",
        "pytest",
    )
    assert resume_command(None, "results/r") == "pytest benchmarks --bench-resume results/r"


def test_a_kept_case_says_so_and_the_eta_counts_only_cases_run_now():
    progress = Progress(total=4)
    progress.start()
    kept = progress.finish_case("n1", "case-a", OK, kept=True)
    assert kept.startswith("[1/4] case-a  kept from the resumed run (ok)  step 0.100 s")
    assert "elapsed" not in kept and "ETA" not in kept
    progress.started -= 20.0  # the first case run in this session took 20 s
    line = progress.finish_case("n2", "case-b", OK)
    assert line.startswith("[2/4] case-b  ok") and "elapsed 0m20s  ETA 0m40s" in line, line  # 2 left x 20 s


def test_a_tuning_counts_its_cases_against_its_bound():
    counter = TuneCounter()
    counter.plan(24)
    assert [counter.label(c) for c in "abca"] == [
        "tune 1 of at most 24",
        "tune 2 of at most 24",
        "tune 3 of at most 24",
        "tune 1 of at most 24, again",
    ]
    progress = Progress()
    progress.start()
    line = progress.finish_case("n", "case-a", OK, counter="tune 1 of at most 24")
    assert line.startswith("[tune 1 of at most 24] case-a  ok") and "ETA" not in line


def _state(tmp_path, **options) -> BenchState:
    sweep = parse_sweep({"device": "cpu", "results-dir": str(tmp_path), **options}, no_report=True)
    state = BenchState(sweep, SweepSession(sweep))
    state.session.run_dir = tmp_path / "run"
    state.invocation = ("pytest", "benchmarks", "-k", "bs2")
    return state


def test_an_interrupted_run_is_partial_and_ends_with_its_resume_command(tmp_path):
    state = _state(tmp_path)
    state.progress.total, state.interrupted = 4, True
    state.session.results = [{"case_id": "a", "status": "ok"}, {"case_id": "b", "status": "ok"}]
    state.session.kept = {"a"}
    partial, resume = state.run_status()
    assert partial == "partial run: 2 of 4 case(s) done (1 kept from the resumed run), interrupted"
    assert resume.endswith(f": pytest benchmarks -k bs2 --bench-resume {tmp_path / 'run'}")
    closing = with_run_status(["Recommendation (m): x", "results: r"], partial, resume)
    assert closing[0] == partial + "; the recommendation below is from those only"
    assert closing[1:3] == ["Recommendation (m): x", "results: r"] and closing[-1] == resume
    assert with_run_status(["results: r"], partial, resume)[0] == partial  # no answer to qualify


def test_a_complete_run_says_nothing_more_and_one_not_ok_is_named(tmp_path):
    state = _state(tmp_path)
    state.progress.total = 2
    state.session.results = [{"case_id": "a", "status": "ok"}, {"case_id": "b", "status": "ok"}]
    assert state.run_status() == (None, None)
    assert with_run_status(["results: r"], None, None) == ["results: r"]
    state.session.results[1]["status"] = "failed"
    partial, resume = state.run_status()
    assert partial is None and resume.startswith("1 case(s) not ok; to finish this run")


def test_a_session_stopped_early_is_partial(tmp_path):
    state = _state(tmp_path)  # pytest -x after a failure: not interrupted, yet cases never ran
    state.progress.total = 3
    state.session.results = [{"case_id": "a", "status": "failed"}]
    assert state.run_status()[0] == "partial run: 1 of 3 case(s) ran, stopped early"
    tuning = _state(tmp_path, tune="on")
    tuning.interrupted, tuning.session.results = True, [{"case_id": "a", "status": "ok"}]
    assert tuning.run_status()[0] == "partial run: the tuning was interrupted after 1 case(s) measured"


def test_every_case_skipped_is_one_line_with_the_reasons_counted():
    line = no_case_line(["x needs CUDA", "x needs CUDA", "y needs CUDA"])
    assert (
        line
        == "fsdp-bench: no case ran: all 3 selected cases were skipped before launch: 2 x x needs CUDA; y needs CUDA"
    )
    assert no_case_line(["z"]) == "fsdp-bench: no case ran: the selected case was skipped before launch: z"


def test_the_summary_counts_kept_cases_but_not_their_time():
    """A resumed run's kept cases ran in an earlier session: counted in the statuses, but their
    time made "time in cases" exceed the session's own wall time (newcomer audit, 50.4 against
    43.9 s)."""
    from fsdp_bench.results.load import load_run

    results, _ = load_run(GOLDEN)
    every = summary_body_lines(results)
    kept = {r["case_id"] for r in results[:2]}
    resumed = summary_body_lines(results, kept)
    assert resumed[0] == every[0] + " (2 kept from the resumed run)"
    total = {line.split(" s (")[0] for line in every if line.startswith("time in cases: ")}
    (now,) = [line for line in resumed if line.startswith("time in cases: ")]
    assert now.endswith("; 2 case(s) kept from the resumed run not counted")
    assert float(now.split(" s (")[0].split()[-1]) < float(total.pop().split()[-1])
    everything_kept = summary_body_lines(results, {r["case_id"] for r in results})
    assert everything_kept[-1] == (
        f"time in cases: none run in this session ({len(results)} case(s) kept from the resumed run not counted)"
    )
    assert summary_body_lines([], ()) == ["cases: none finished"]
