"""A run with no finished case (every case skipped by the host-memory guard, say) is summarised
quietly."""

import warnings

import pandas as pd

from fsdp_bench.report.summary import loss_agreement
from fsdp_bench.results.metrics import M


def test_a_run_whose_cases_were_all_skipped_is_summarised_without_a_warning():
    """The guard can now leave a run with no finished case; its summary used to warn (pandas 4:
    '&' over the empty, object-typed column), and under pytest that is a warnings block."""
    skipped = pd.DataFrame({"status": ["skipped"], "strategy": ["ddp"], M.loss_max_abs_dev_vs_ddp: [None]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loss_agreement(skipped) == []
