"""scripts/measure_fidelity.py: a finished report reads back as the reference tables read it; one
stopped mid-measurement (as `timeout` stopped it on an H100 lease) gives one line and exit 130,
no traceback, no torchrun left behind."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.sweep_helpers import child_env

ROOT = Path(__file__).resolve().parents[2]


def test_report_names_its_bare_loop_version_and_reads_back(tmp_path):
    """The report says which bare loop it compared against, whatever its file is named; the
    reference tables read the version from that line."""
    from fsdp_bench.report.reference import fidelity_lines

    args = ["--model", "gpt_tiny", "--nproc", "1", "--batch-size", "1", "--seq-len", "32", "--steps", "2"]
    args += ["--warmup", "0", "--repeats", "1", "--no-overhead"]
    run = [sys.executable, str(ROOT / "scripts" / "measure_fidelity.py"), *args]
    done = subprocess.run(run, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    version = re.search(r"^BARE_LOOP_VERSION = (\d+)$", (ROOT / "scripts" / "bare_loop.py").read_text(), re.M)[1]
    assert f"\nbare loop version: {version}\n" in done.stdout
    (tmp_path / "part4_fidelity").mkdir()
    (tmp_path / "part4_fidelity" / "fidelity-fsdp2-fp32-bs1.txt").write_text(done.stdout)  # no -bN
    [line] = fidelity_lines(tmp_path).splitlines()
    assert line.startswith(f"- fsdp2-gpt_tiny-ws1-bs1-ga1-opt_after-sl32 (bare loop {version}): suite median")


def test_sigterm_gives_one_line_and_no_traceback():
    args = ["--model", "gpt_tiny", "--nproc", "2", "--batch-size", "1", "--seq-len", "32", "--steps", "200"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "measure_fidelity.py"), *args],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(8)  # inside the first case's torchrun
    started = psutil.Process(proc.pid).children(recursive=True)
    assert started, "no torchrun was running yet"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("measure_fidelity.py: interrupted (SIGTERM received)"), err
    time.sleep(2)
    assert [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
