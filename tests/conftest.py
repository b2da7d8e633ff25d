import os
import signal
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Every JSON file the suite's runs write is checked against its declared record type
# (results.io.write_json_atomic); inherited by the sweeps and workers the tests launch.
os.environ["FSDP_BENCH_CHECK_WRITES"] = "1"

# A shell starts a background command (`pytest tests &`, nohup) with SIGINT ignored, and an ignored
# signal stays ignored in every child it execs: the tests that press Ctrl-C on a sweep would then
# press it on a process that cannot hear it. A handler of our own is reset to the default on exec,
# so every child starts with Python's usual KeyboardInterrupt, however this run was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _checkout_on_pythonpath(monkeypatch):
    """Subprocess pytest runs (pytester, sweeps) import this checkout's fsdp_bench, installed or not,
    and are sessions of their own."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])))
    # Under `pytest tests -n N` this process is an xdist worker; the sweeps a test starts are
    # sessions of their own, not workers (pytest-benchmark turns itself off in a worker).
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="session", autouse=True)
def _a_share_of_the_cores_per_xdist_worker(request):
    """Under `-n N`, the in-process tests' torch gets cores // N threads instead of every core: two
    workers' OpenMP threads outnumbered the 2 cores and spun while waiting for one (an in-process
    peak-model test beside a .ci/run: 27-31 s of CPU on one thread, 44-52 s on two). The sweeps'
    ranks set their own (launch.processes)."""
    workers = getattr(request.config, "workerinput", {}).get("workercount")
    if workers:
        try:
            import torch
        except ImportError:  # the no-torch tests run without it
            return
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(scope="module", autouse=True)
def _run_alone_under_xdist(request, tmp_path_factory):
    """Under pytest-xdist, a module marked `run_alone` runs while no other worker runs a module
    (tests/run_alone.py); a serial run takes no lock."""
    if not hasattr(request.config, "workerinput"):
        yield
        return
    from tests.run_alone import module_lock

    alone = request.node.get_closest_marker("run_alone") is not None
    # each xdist worker's base temporary folder is a subfolder of the run's: the run's is shared
    with module_lock(tmp_path_factory.getbasetemp().parent, alone=alone):
        yield
