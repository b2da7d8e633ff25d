"""env.json's torch half is read by a subprocess started when the session is configured, so its
`import torch` overlaps pytest's collection instead of delaying the first case."""

from __future__ import annotations

import json

from fsdp_bench.launch.environment import TorchEnvironment
from fsdp_bench.launch.session import SweepSession
from fsdp_bench.plan.options import parse_sweep


def _session(tmp_path) -> SweepSession:
    return SweepSession(parse_sweep({"device": "cpu", "results-dir": str(tmp_path)}))


def test_environment_started_early_lands_in_env_json_and_leaves_nothing_behind(tmp_path):
    session = _session(tmp_path)
    session.start_environment()
    probe = session._torch_env
    run = session.ensure_run_dir()
    session.close()
    env = json.loads((run / "env.json").read_text())
    assert env["torch"].startswith("2.") and "torch_info_error" not in env and env["git_sha"]
    assert probe.proc.returncode == 0 and not probe.path.exists()
    assert sorted(p.name for p in run.iterdir()) == [".lock", "cases", "env.json", "sweep.json"]


def test_a_session_that_runs_no_case_stops_the_reader(tmp_path):
    session = _session(tmp_path)
    session.start_environment()
    probe = session._torch_env
    session.close()
    assert probe.proc.poll() is not None and not probe.path.exists()
    assert list(tmp_path.iterdir()) == []  # no run folder either


def test_a_reader_that_hangs_is_one_field_not_a_crash():
    probe = TorchEnvironment()
    data = probe.result(timeout_s=0.01)  # far shorter than its import of torch
    assert list(data) == ["torch_info_error"] and data["torch_info_error"].startswith("TimeoutExpired")
    assert probe.proc.poll() is not None and not probe.path.exists()
