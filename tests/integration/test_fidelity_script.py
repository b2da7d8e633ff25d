"""scripts/measure_fidelity.py stopped mid-measurement (as `timeout` stopped it on an H100 lease):
one line and exit 130, no traceback, no torchrun left behind."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.sweep_helpers import child_env

ROOT = Path(__file__).resolve().parents[2]


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
