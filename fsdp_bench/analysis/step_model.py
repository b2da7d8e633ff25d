"""The tuner's step-time model (analysis.tune's docstring says how it is used): per case and rank,

    step_s = c_flop x FLOPs + c_byte x wire bytes + c_micro x micro-steps

its prediction per case (time, memory, tokens), the priors it starts from and the ridge fit that
refits it on the cases measured so far. Pure: no torch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fsdp_bench.analysis.comm_model import CommVolume, comm_volume, model_units
from fsdp_bench.analysis.duration import MICRO_STEP_OVERHEAD_S, RECOMPUTE, case_flops_per_token, rank_flops
from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case, parse_mesh
from fsdp_bench.plan.catalog import precision as catalog_precision
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import flavor_for

PRIOR_BYTES_PER_S = {"cpu": 1e9, "cuda": 100e9}  # gloo over loopback / NVLink-class, before the probe
PRIOR_WEIGHT = 0.05  # ridge toward the priors, in units of one measurement's squared relative error
MIN_MODEL_ERROR = 0.10  # the model's error band is never taken narrower than this
STRATEGY_SHRINK = 1.0  # a strategy factor counts this many pseudo-measurements at 1 (no correction)
BACKFIT_ROUNDS = 4  # coefficients and strategy factors refitted alternately this many times


@dataclass(frozen=True)
class Prediction:
    """What is known about a case before it runs, per rank and optimizer step."""

    case: Case
    peak_bytes: float
    flops: float
    wire_bytes: float
    micro_steps: int

    @property
    def tokens(self) -> int:
        return self.case.batch_size * self.case.grad_accum * self.case.seq_len

    def features(self) -> tuple[float, float, float]:
        return (self.flops, self.wire_bytes, float(self.micro_steps))


def wire_bytes(volume: CommVolume) -> float:
    """Bytes one rank moves over the wire per step: ring all-gather and reduce-scatter send
    (g-1)/g of their buffer, a ring all-reduce twice that."""

    def ring(group: int) -> float:
        return (group - 1) / group if group > 1 else 0.0

    return (volume.all_gather_bytes + volume.reduce_scatter_bytes) * ring(
        volume.shard_group
    ) + 2 * volume.all_reduce_bytes * ring(volume.all_reduce_group)


def predict_case(case: Case) -> Prediction:
    """The case's peak and step features. The grid axes beyond strategy x batch x accumulation
    (issue 40 item 2): activation checkpointing in the peak (analysis.fit) and in the FLOPs
    (forward twice, analysis.duration.RECOMPUTE); reshard-after-forward is a strategy row (its
    regathers in the wire bytes, its gathered units in the peak); forward prefetch in the peak
    (`prefetch_bytes`), its time effect measured, not predicted (NEIGHBOUR_AXES). Under `grad_sync`
    "last" the reductions count once per step (comm_volume)."""
    flavor = flavor_for(case.model)
    mesh = parse_mesh(case.mesh) if case.mesh and catalog_strategy(case.strategy).hybrid else None
    peak = predict_case_peak(case, mesh=mesh)["peak_bytes"] + prefetch_bytes(case)
    tokens = case.batch_size * case.grad_accum * case.seq_len
    volume = comm_volume(
        case.strategy,
        model_units(flavor),
        world_size=case.nproc,
        grad_accum=case.grad_accum,
        grad_sync=case.grad_sync,
        mesh=mesh,
    )
    return Prediction(
        case=case,
        peak_bytes=peak,
        flops=case_flops_per_token(case) * tokens * (RECOMPUTE if case.act_ckpt else 1.0),
        wire_bytes=wire_bytes(volume),
        micro_steps=case.grad_accum,
    )


def prefetch_bytes(case: Case) -> int:
    """Forward prefetch N on a strategy that reshards after forward: N more blocks gathered in
    forward beside the one computing (FSDP2's set_modules_to_forward_prefetch depth; FSDP1's
    forward_prefetch, one), at the largest block's unsharded size in the compute dtype."""
    row = catalog_strategy(case.strategy)
    if not (case.forward_prefetch > 0 and row.uses_fsdp_knobs and row.reshard_after_forward):
        return 0
    depth = 1 if row.chooses_backward_prefetch else case.forward_prefetch
    blocks = [u.numel for u in model_units(flavor_for(case.model)) if not u.is_root]
    return depth * max(blocks, default=0) * catalog_precision(case.precision).bytes


@dataclass(frozen=True)
class StepModel:
    """step_s = s_per_flop x FLOPs + s_per_byte x bytes + s_per_micro_step x micro-steps."""

    s_per_flop: float
    s_per_byte: float
    s_per_micro_step: float
    error: float = 0.5  # relative error band used when deciding what could still win
    fitted_on: int = 0  # measured cases the coefficients were fitted to
    # Per strategy: measured / modelled step time, geometric mean over its measured cases shrunk
    # toward 1 (STRATEGY_SHRINK); what the three shared coefficients cannot price (fsdp2's
    # per-parameter DTensor work on CPU, FSDP1's flat-parameter copies).
    strategy_factors: tuple[tuple[str, float], ...] = ()

    def coefficients(self) -> tuple[float, float, float]:
        return (self.s_per_flop, self.s_per_byte, self.s_per_micro_step)

    def base_step_s(self, p: Prediction) -> float:
        return sum(c * x for c, x in zip(self.coefficients(), p.features()))

    def step_s(self, p: Prediction) -> float:
        return self.base_step_s(p) * dict(self.strategy_factors).get(p.case.strategy, 1.0)

    def tokens_per_s(self, p: Prediction) -> float:
        step = self.step_s(p)
        return p.tokens / step if step > 0 else math.inf

    def optimistic_tokens_per_s(self, p: Prediction) -> float:
        """The prediction at the top of the model's error band: the fastest the case could measure
        if the model were off by its whole error (the tuner explores a case that could reach the leader)."""
        return self.tokens_per_s(p) * (1 + self.error)

    def describe(self) -> dict[str, float]:
        return {
            "device_flops_per_s": 1 / self.s_per_flop,
            "wire_bytes_per_s": 1 / self.s_per_byte,
            "micro_step_overhead_s": self.s_per_micro_step,
            "model_error_pct": 100 * self.error,
            "fitted_on_cases": self.fitted_on,
        }


def prior_model(case: Case) -> StepModel:
    """The uncalibrated model: analysis.duration's device rate and overhead, a prior bandwidth."""
    device = case.device if case.device in PRIOR_BYTES_PER_S else "cpu"
    return StepModel(1 / rank_flops(case), 1 / PRIOR_BYTES_PER_S[device], MICRO_STEP_OVERHEAD_S[device])


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (3x3 here; no numpy in analysis)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[col][col]:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] if m[i][i] else 0.0 for i in range(n)]


def _fit_coefficients(prior: StepModel, pairs: Sequence[tuple[Prediction, float]], weight: float) -> StepModel:
    """The three shared coefficients: minimise the squared relative errors plus `weight` x the
    squared relative departures from the prior; each stays at least 1% of its prior."""
    base = prior.coefficients()
    rows = [[x * c / y for x, c in zip(p.features(), base)] for p, y in pairs]
    ata = [[sum(r[i] * r[j] for r in rows) + (weight if i == j else 0.0) for j in range(3)] for i in range(3)]
    atb = [sum(r[i] for r in rows) + weight for i in range(3)]
    scale = [max(0.01, u) for u in _solve(ata, atb)]
    return StepModel(*(c * u for c, u in zip(base, scale)))


def _strategy_logs(model: StepModel, pairs: Sequence[tuple[Prediction, float]]) -> dict[str, list[float]]:
    """Each strategy's log residuals from the shared coefficients, less their mean over every
    case: the coefficients own the common scale, the factors only what differs between strategies."""
    logs: dict[str, list[float]] = {}
    for p, y in pairs:
        logs.setdefault(p.case.strategy, []).append(math.log(y / model.base_step_s(p)))
    mean = sum(x for v in logs.values() for x in v) / len(pairs)
    return {s: [x - mean for x in v] for s, v in logs.items()}


def _factor(logs: Sequence[float]) -> float:
    return math.exp(sum(logs) / (len(logs) + STRATEGY_SHRINK))


def fit_step_model(
    prior: StepModel, measured: Sequence[tuple[Prediction, float]], weight: float = PRIOR_WEIGHT
) -> StepModel:
    """Refit the model to measured (prediction, step seconds): the shared coefficients
    (`_fit_coefficients`) and the strategy factors, alternately (BACKFIT_ROUNDS), so one slow
    strategy does not drag every strategy's coefficients toward it. The error is each case's with
    its own strategy's factor fitted without it (leave-one-out): a factor fitted on one case
    would otherwise explain that case exactly."""
    pairs = [(p, y) for p, y in measured if y > 0]
    if not pairs:
        return prior
    factors: dict[str, float] = {}
    for _ in range(BACKFIT_ROUNDS):  # unshrunk while backfitting: shrinking here biases the coefficients
        fitted = _fit_coefficients(prior, [(p, y / factors.get(p.case.strategy, 1.0)) for p, y in pairs], weight)
        logs = _strategy_logs(fitted, pairs)
        factors = {s: math.exp(sum(v) / len(v)) for s, v in logs.items()}
    factors = {s: _factor(v) for s, v in logs.items()}
    errors, seen = [], {s: 0 for s in logs}
    for p, y in pairs:
        rest = list(logs[p.case.strategy])
        del rest[seen[p.case.strategy]]  # this case's own residual (logs keep the pairs' order)
        seen[p.case.strategy] += 1
        errors.append(abs(fitted.base_step_s(p) * _factor(rest) - y) / y)
    # With few points the fit passes close to them: its own residuals understate the error.
    error = max(MIN_MODEL_ERROR, max(errors), 0.5 if len(pairs) < 3 else 0.0)
    return StepModel(
        *fitted.coefficients(), error=error, fitted_on=len(pairs), strategy_factors=tuple(sorted(factors.items()))
    )
