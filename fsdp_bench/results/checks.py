"""The one check of every file the report reads (a case result with its ranks, a tune answer,
env.json) against its declaration in results.records: every field its type, every required one
present, every number finite and of a size a measurement can have. The first problem is one
line naming where it is (`ranks[0].stages[2].stage`), so a bad value becomes a note instead
of a traceback somewhere in the report."""

from __future__ import annotations

import functools
import math
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from fsdp_bench.results.metrics import M, registered
from fsdp_bench.results.records import RankRecord

# No measurement comes near this (the committed results' largest number is 1.4e14, a FLOP count);
# sums, squares and float conversions of numbers below it cannot overflow, so readers need no guard.
MAX_MAGNITUDE = 1e30
# Records whose every field may be null: a rank that died early wrote what it had.
_NULLABLE_FIELDS = (RankRecord,)


def record_problem(value: Any, hint: Any, where: str = "") -> str | None:
    """Why `value` is not a `hint` (a records annotation), in one line, or None."""
    if kind := _number_kind(hint):  # most values are numbers (step times, bytes): checked first
        return _scalar_problem(value, kind, where)
    if hint is Any:
        return _numbers_problem(value, where)
    if is_typeddict(hint):
        return _typeddict_problem(value, hint, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        if value is None and type(None) in args:
            return None
        problems = []
        for arm in args:  # the first arm that fits ends the check: most values fit their first
            if (problem := record_problem(value, arm, where)) is None:
                return None
            problems.append(problem)
        deeper = [p for p, arm in zip(problems, args) if _same_shape(value, arm)]
        return deeper[0] if deeper else _wrong(value, hint, where)
    if hint is type(None):
        return None if value is None else _wrong(value, hint, where)
    if origin is list:
        if not isinstance(value, list):
            return _wrong(value, hint, where)
        if kind := _number_kind(args[0]):  # a rank's step times: one loop, a name only for a problem
            return _first(_scalar_problem(v, kind, f"{where}[{i}]") for i, v in enumerate(value) if not _plain(v, kind))
        return _first(record_problem(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            return _wrong(value, hint, where)
        return _first(record_problem(v, args[1], _join(where, str(k))) for k, v in value.items())
    if isinstance(value, bool) or hint is bool:
        return None if isinstance(value, bool) and hint is bool else _wrong(value, hint, where)
    return None if isinstance(value, hint) else _wrong(value, hint, where)


def _scalar_problem(value: Any, hint: Any, where: str) -> str | None:
    """`value` against int or float: a bool is neither, an int is a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float) if hint is float else int):
        return _wrong(value, hint, where)
    return _numbers_problem(value, where)


@functools.cache
def _number_kind(hint: Any) -> type | None:
    """int for int; float for float and for `int | float` (records.Number), whose float arm takes
    both; None for any other hint."""
    if hint is float or hint is int:
        return hint
    if get_origin(hint) in (Union, UnionType) and set(get_args(hint)) == {int, float}:
        return float
    return None


def _plain(value: Any, hint: Any) -> bool:
    """A number of the hint's type that needs no closer look: finite (or NaN), below MAX_MAGNITUDE."""
    kind = type(value)
    return (kind is int or (kind is float and hint is float)) and not abs(value) > MAX_MAGNITUDE


@functools.cache
def _field_hints(record: Any) -> dict[str, Any]:
    """A record's fields and their annotations, resolved once (get_type_hints is slow: it was half
    of a 1,000-case report's load)."""
    return get_type_hints(record)


def _typeddict_problem(value: Any, hint: Any, where: str) -> str | None:
    if not isinstance(value, dict):
        return _wrong(value, hint, where)
    hints = _field_hints(hint)
    for key in sorted(hint.__required_keys__):
        if key not in value or (value[key] is None and not _allows_none(hints[key])):
            return f"required field {_join(where, key)} is {'null' if key in value else 'missing'}"
    nullable = hint in _NULLABLE_FIELDS
    for key, field_hint in hints.items():
        if key in value and not (nullable and value[key] is None):
            problem = record_problem(value[key], field_hint, _join(where, key))
            if problem:
                return problem
    return None


def result_problem(data: dict[str, Any]) -> str | None:
    """What the readers of a case result need beyond its types: numeric metrics are numbers, and an
    ok case has the median step time every table, chart and verdict is built on."""
    metrics = data.get("metrics") or {}
    for name, value in metrics.items():
        metric = registered(name)
        if metric is None:  # a misspelt or foreign name would read as a missing column everywhere
            return f"metrics.{name} is not a metric this fsdp-bench knows (results/metrics.py)"
        if problem := _numbers_problem(value, f"metrics.{name}"):
            return problem
        # a bool is a yes/no metric (params_changed, host_bound); every other one is a number
        if metric.numeric and not isinstance(value, (bool, type(None))) and record_problem(value, float):
            return f"field metrics.{name} should be a number, got {_json_type(value)}"
    if data.get("status") == "ok" and not isinstance(metrics.get(M.step_time_s_median), (int, float)):
        return f"status is ok but metrics.{M.step_time_s_median} is not a number"
    return None


def _numbers_problem(value: Any, where: str) -> str | None:
    """Every number inside `value` finite (NaN is allowed: a diverged loss) and below MAX_MAGNITUDE."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return None
        if not abs(value) <= MAX_MAGNITUDE:  # also catches inf and ints too big for a float
            return f"field {where or 'value'} is {_short(value)}, beyond the +-{MAX_MAGNITUDE:g} any measurement has"
        return None
    if isinstance(value, dict):
        return _first(_numbers_problem(v, _join(where, str(k))) for k, v in value.items())
    if isinstance(value, list):
        return _first(_numbers_problem(v, f"{where}[{i}]") for i, v in enumerate(value))
    return None


def _first(problems) -> str | None:
    return next((p for p in problems if p), None)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _allows_none(hint: Any) -> bool:
    return hint is Any or hint is type(None) or type(None) in get_args(hint)


def _same_shape(value: Any, hint: Any) -> bool:
    """Whether a union arm is the one `value` was meant as (a list for list[...], an object for a
    record), so the problem reported is the one inside it, not "should be X or Y"."""
    origin = get_origin(hint)
    if hint in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list)
    if origin is dict or is_typeddict(hint):
        return isinstance(value, dict)
    return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _wrong(value: Any, hint: Any, where: str) -> str:
    return f"{f'field {where}' if where else 'the file'} should be {hint_name(hint)}, got {_json_type(value)}"


def hint_name(hint: Any) -> str:
    """The type a field should have, in words: an integer, a list of numbers, an object..."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        arms = [a for a in args if not (a is int and float in args)]
        return " or ".join(hint_name(a) for a in arms)
    if origin is list:
        return "a list" if args[0] is Any or is_typeddict(args[0]) else f"a list of {_plural(args[0])}"
    if origin is dict:
        return "an object" if args[1] is Any else f"an object mapping names to {_plural(args[1])}"
    if is_typeddict(hint):
        return "an object"
    return {
        dict: "an object",
        list: "a list",
        str: "text",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        type(None): "null",
    }.get(hint, getattr(hint, "__name__", str(hint)))


def _plural(hint: Any) -> str:
    name = hint_name(hint)
    return {"a number": "numbers", "text": "text", "an integer": "integers"}.get(name, name)
