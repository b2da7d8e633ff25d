"""Whether a finished case trained, read off its metrics: the one check behind the live line's
"ok(not trained)", the pytest outcome, the report's ranking and the tuner's pick, so no case one of
them calls untrained is another's best. A case that did not train runs a broken program; its speed
answers no one's question."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdp_bench.results.metrics import M

PARAMETERS_UNCHANGED = "parameters never changed"
LOSS_NOT_FINITE = "the loss became NaN or inf: training diverged"
LOSS_FLAT = "the loss never moved"


def untrained_reason(values: Mapping[str, Any]) -> str | None:
    """Why a finished case did not train, or None when its metrics show it did (or cannot say).
    `values`: a case result's metrics or a comparison-table row, which name them alike."""
    if values.get(M.params_changed) is False:
        return PARAMETERS_UNCHANGED
    if values.get(M.loss_finite) is False:  # NaN gradients still change the parameters
        return LOSS_NOT_FINITE
    first, last = values.get(M.loss_first), values.get(M.loss_last)
    if (
        isinstance(first, float)
        and isinstance(last, float)
        and first == last
        and (values.get(M.steps_measured) or 0) > 1
    ):
        return LOSS_FLAT  # the optimizer never touched what the model uses
    return None
