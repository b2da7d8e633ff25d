"""The house rules of the layout, read from the source (no import of the modules themselves).

results <- plan <- analysis <- {launch, worker, report} <- {pytest_plugin, CLI shims, visualize.py,
scripts}: each package imports only those below it; launch, worker and report never import one
another; only worker imports torch (and the libraries built on it), only report imports pandas and
matplotlib, only the plugin imports pytest. No function is longer than 60 lines, the worker keeps
no module-level mutable state, and no run-folder path is spelled outside `results.layout`.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fsdp_bench"
# What each layer may import from the project.
ALLOWED = {
    "results": {"results"},
    "plan": {"results", "plan"},
    "analysis": {"results", "plan", "analysis"},
    "launch": {"results", "plan", "analysis", "launch"},
    "worker": {"results", "plan", "analysis", "worker"},
    "report": {"results", "plan", "analysis", "report"},
}
EDGES = {"pytest_plugin", "fit", "__init__"}  # top-level modules: they may import any layer
TORCH_LIBS = {"torch", "transformers", "accelerate", "psutil", "pynvml"}
REPORT_LIBS = {"pandas", "matplotlib"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every imported module name, top-level and inside functions alike."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "fsdp_bench":  # `from fsdp_bench import x`: x is the module
                found += [(node.lineno, f"fsdp_bench.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def test_the_package_is_the_layers_and_nothing_else():
    layers = {_layer(p) for p in _modules()}
    assert layers <= set(ALLOWED) | EDGES, f"modules outside the layers: {sorted(layers - set(ALLOWED) - EDGES)}"
    assert set(ALLOWED) <= layers


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_and_heavy_libraries_stay_in_their_layer(path: Path):
    layer = _layer(path)
    problems = []
    for line, name in _imports(path):
        top = name.split(".")[0]
        if top == "fsdp_bench" and layer not in EDGES:
            parts = name.split(".")
            target = parts[1] if len(parts) > 1 else "fsdp_bench"  # the root holds only __version__
            if target not in ALLOWED[layer] | {"fsdp_bench"}:
                problems.append(f"line {line}: {layer} imports {name}")
        if top in TORCH_LIBS and layer != "worker":
            problems.append(f"line {line}: only worker imports {top}")
        if top in REPORT_LIBS and layer != "report":
            problems.append(f"line {line}: only report imports {top}")
        if top in ("pytest", "_pytest") and path.name != "pytest_plugin.py":
            problems.append(f"line {line}: only the plugin imports pytest")
    assert not problems, "\n".join(problems)


def _functions(paths):
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def test_no_function_is_longer_than_60_lines():
    scripts = sorted((ROOT / "scripts").glob("*.py")) + [ROOT / "visualize.py"]
    long = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for p, n in _functions(_modules() + scripts)
        if n.end_lineno - n.lineno + 1 > 60
    ]
    assert not long, "\n".join(long)


def test_the_worker_keeps_no_module_level_mutable_state():
    problems = []
    for path in PACKAGE.joinpath("worker").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                problems.append(f"{path.name}:{node.lineno} global {', '.join(node.names)}")
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                # constants are UPPER_CASE, type aliases CamelCase; anything else is state
                if isinstance(target, ast.Name) and not target.id.lstrip("_")[:1].isupper():
                    problems.append(f"{path.name}:{node.lineno} module-level variable {target.id}")
    assert not problems, "\n".join(problems)


# Literal run-folder names: only results.layout spells them.
_RUN_PATH_LITERAL = re.compile(r"""["'](cases|env\.json|\.lock|\.attempts|nodes|case\.json|log\.txt)["']|rank-\{""")


def test_run_folder_paths_come_from_the_layout():
    offenders = []
    for path in _modules() + [ROOT / "visualize.py"]:
        if path.name == "layout.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if _RUN_PATH_LITERAL.search(code) and '"""' not in code:
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_strategy_traits_are_never_read_from_the_name():
    """A question about a strategy goes to the catalog: no name prefixes or suffixes, no
    hand-kept sets of names outside it."""
    pattern = re.compile(r"""strategy\w*\.(startswith|endswith)\(|\{\s*"(ddp|fsdp[12]\w*)",\s*"fsdp""")
    offenders = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in _modules()
        if p.name != "catalog.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, "\n".join(offenders)


# The modules that record a metric under its name (the aggregate and the statistics it calls, the
# profiler's per-rank split, the worker's rank record, the repeats' merge, the simulation, the
# migration of older files) spell it; every other reader asks the
# registry (`fsdp_bench.results.metrics.M`), so a renamed or misspelt metric fails at once.
_METRIC_RECORDERS = {
    "results/metrics.py",
    "analysis/aggregate.py",
    "results/stats.py",
    "worker/profiling.py",
    "analysis/repeats.py",
    "analysis/simulation.py",
    "results/migrate.py",
}


def test_metric_names_are_spelled_only_in_the_registry_and_their_recorder():
    from fsdp_bench.results.metrics import BY_NAME

    literal = re.compile(r"""(["'])(""" + "|".join(sorted(BY_NAME, key=len, reverse=True)) + r""")\1""")
    offenders = []
    for path in _modules() + [ROOT / "visualize.py"]:
        rel = str(path.relative_to(PACKAGE)) if PACKAGE in path.parents else path.name
        if rel in _METRIC_RECORDERS or rel.startswith(("worker/", "plan/")):
            continue  # the worker records its own fields; plan names options, not metrics
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if literal.search(line.split("  #")[0]) and not line.strip().startswith("#"):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _project_imports(path: Path) -> set[str]:
    return {name for _, name in _imports(path) if name.startswith("fsdp_bench.")}


def test_no_import_cycle_inside_a_subpackage():
    """Function-level imports count: a cycle hidden in a function is still a cycle."""
    graph = {}
    for path in _modules():
        rel = path.relative_to(PACKAGE).with_suffix("")
        graph["fsdp_bench." + ".".join(rel.parts)] = _project_imports(path)
    cycles = []
    for start in graph:
        package = start.rsplit(".", 1)[0]
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt.rsplit(".", 1)[0] != package or nxt not in graph:
                    continue
                if nxt == start:
                    cycles.append(" -> ".join(trail + [nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_family_questions_go_to_the_catalog_and_the_flavor_rows():
    """A `family ==` (or `in`, `!=`) comparison lives only in the strategy catalog, the flavor
    rows and the strategy module that applies each family; everyone else asks a trait."""
    allowed = {"plan/catalog.py", "plan/flavors.py", "worker/strategies.py"}
    pattern = re.compile(r"""\bfamily\s*(==|!=)\s*["']|\bfamily\s+(not\s+)?in\s*[(\[{]\s*["']""")
    offenders = [
        f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
        for p in _modules()
        if str(p.relative_to(PACKAGE)) not in allowed
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line.split("#")[0])
    ]
    assert not offenders, "\n".join(offenders)


# argument names that hold a rank record or a case result (results.records), and untyped
# annotations that would hide which one
_RECORD_ARGS = {"result", "results", "record", "records", "rank", "ranks", "rank0", "merged", "first", "died", "b", "n"}
_UNTYPED = re.compile(r"\b(dict|Mapping)\[str, Any\]")


def test_rank_records_and_case_results_are_typed_outside_results():
    """A function outside results/ takes a rank record or a case result as the RankRecord or
    CaseResult that results.records declares, never as an untyped dict."""
    offenders = [
        f"{p.relative_to(PACKAGE)}:{node.lineno} {node.name}({arg.arg}: {ast.unparse(arg.annotation)})"
        for p, node in _functions(m for m in _modules() if _layer(m) != "results")
        for arg in [*node.args.args, *node.args.kwonlyargs]
        if arg.arg in _RECORD_ARGS and arg.annotation is not None and _UNTYPED.search(ast.unparse(arg.annotation))
    ]
    assert not offenders, "\n".join(offenders)


_RECORD_WRITE = re.compile(r"""\b(record|result|merged)\[["']([a-z_0-9]+)["']\]\s*=(?!=)""")


def test_every_field_written_to_a_record_is_declared_in_results_records():
    """A field the worker writes to a rank record, or the parent to a case result, is one that
    results.records declares (with its type, which the loader checks)."""
    from typing import get_type_hints

    from fsdp_bench.results.records import CaseResult, RankRecord

    declared = {"record": set(get_type_hints(RankRecord)), "result": set(get_type_hints(CaseResult))}
    declared["merged"] = declared["result"]
    writes = [
        (f"{p.relative_to(PACKAGE)}:{i}", kind, field)
        for p in _modules()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        for kind, field in _RECORD_WRITE.findall(line)
    ]
    assert len({field for _, kind, field in writes if kind == "record"}) > 30  # the pattern still finds them
    undeclared = [f"{where}: {kind}[{field!r}]" for where, kind, field in writes if field not in declared[kind]]
    assert not undeclared, "\n".join(undeclared)


# --- registries: one source, every field read ------------------------------------------------------

# The registries whose rows code must ask, never restate: each a dataclass in its own module.
# (The strategy rows are also asked through catalog helpers such as names_where(**traits);
# test_strategy_traits_are_never_read_from_the_name holds those; the docs' strategies table,
# plan/strategy_table.py, reads the fields no helper does.)
REGISTRIES = {
    "plan/catalog.py": ("OptimizerTiming", "Precision", "Strategy"),
    "plan/architectures.py": ("Architecture",),
}


def _dataclass_fields(path: Path, name: str) -> list[str]:
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    props = [
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef)
        and any(isinstance(d, ast.Name) and d.id == "property" for d in n.decorator_list)
    ]
    return fields + props


def _attributes_read(paths: list[Path]) -> set[str]:
    return {n.attr for p in paths for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("module, cls", [(m, c) for m, classes in REGISTRIES.items() for c in classes])
def test_every_registry_field_has_a_reader_outside_its_module(module: str, cls: str):
    """A field nobody reads is a second source waiting to drift (the optimizer timings' labels and
    line styles once had copies in report/charts/style.py while their own went unread)."""
    home = PACKAGE / module
    read = _attributes_read([p for p in _modules() if p != home])
    unread = [f for f in _dataclass_fields(home, cls) if f not in read]
    assert not unread, f"{cls} fields read nowhere outside {module}: {unread}"


def registry_literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string literal that is exactly a registry key."""
    return [
        (n.lineno, n.value)
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
    ]


def _precision_and_timing_names() -> set[str]:
    from fsdp_bench.plan.catalog import OPTIMIZER_TIMING_ROWS, PRECISIONS

    return set(PRECISIONS) | set(OPTIMIZER_TIMING_ROWS)


def test_precision_and_timing_names_are_spelled_only_in_plan():
    """Code asks the rows (plan.catalog.precision(), intended_timing(), ...), never compares a
    case's precision or optimizer timing with a name of its own."""
    names = _precision_and_timing_names()
    found = [
        f"{p.relative_to(ROOT)}:{line} {value!r}"
        for p in _modules()
        if _layer(p) != "plan"
        for line, value in registry_literals(p.read_text(), names)
    ]
    assert not found, "\n".join(found)


def test_the_literal_rule_catches_a_planted_name():
    planted = 'def scaler(case):\n    return case.precision == "fp16"\n\nLABEL = "after_shard"\n'
    assert sorted(registry_literals(planted, _precision_and_timing_names())) == [(2, "fp16"), (4, "after_shard")]


# --- issue 34: every file a run writes has one declared shape -------------------------------------


def test_every_json_write_names_its_record_type():
    """Each write_json_atomic call in the package passes `shape=` a type declared in results/ (a
    record or a reading), so the file's fields are named in one place and checked when written."""
    import ast

    from fsdp_bench.results import readings, records

    declared = {n for module in (records, readings) for n in vars(module) if n[0].isupper()}
    calls = []
    for path in [*_modules(), ROOT / "scripts" / "bench_visualize.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "write_json_atomic":
                shape = next((k.value for k in node.keywords if k.arg == "shape"), None)
                calls.append((f"{path.name}:{node.lineno}", getattr(shape, "id", None)))
    assert len(calls) >= 12
    assert [c for c in calls if c[1] not in declared] == []


def test_a_write_off_its_declared_shape_is_refused_under_the_suite(tmp_path):
    from fsdp_bench.results.io import CHECK_WRITES_ENV, write_json_atomic
    from fsdp_bench.results.records import RankRecord

    assert os.environ.get(CHECK_WRITES_ENV)  # tests/conftest.py: what the sweeps below inherit
    with pytest.raises(ValueError, match="not a RankRecord: field step_times_s"):
        write_json_atomic(tmp_path / "rank0.json", {"rank": 0, "step_times_s": "fast"}, shape=RankRecord)
    assert not (tmp_path / "rank0.json").exists()
    write_json_atomic(tmp_path / "rank0.json", {"rank": 0, "step_times_s": [0.1, 0.2]}, shape=RankRecord)


def test_few_plain_dicts_outside_results():
    """Records and readings have declared types; what stays `dict[str, Any]` outside results/ is
    keyword arguments, option specs and other dicts no file is read back as."""
    plain = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in _modules()
        if "results" not in p.relative_to(PACKAGE).parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "dict[str, Any]" in line
    ]
    assert len(plain) < 20, plain


# The names the package gives a record when it reads one, and the record type each name holds.
_RECORD_NAMES = {
    "result": "CaseResult",
    "merged": "CaseResult",
    "rank": "RankRecord",
    "record": "RankRecord",
    "answer": "TuneAnswer",
    "work": "Work",
}


def undeclared_reads(source: str) -> list[tuple[int, str]]:
    """(line, `name[key]`) of every read by a string key, of a record by its usual name, whose
    key the record type does not declare, and of a `metrics` dict by a name the registry lacks."""
    from typing import get_type_hints

    from fsdp_bench.results import records
    from fsdp_bench.results.metrics import registered

    out = []
    for node in ast.walk(ast.parse(source)):
        key = base = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key, base = node.slice.value, node.value
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "setdefault", "pop"):
            if node.args and isinstance(node.args[0], ast.Constant):
                key, base = node.args[0].value, node.func.value
        name = getattr(base, "id", None)
        if not isinstance(key, str) or name is None:
            continue
        if name == "metrics" and registered(key) is None:
            out.append((node.lineno, f"metrics[{key!r}]"))
        elif name in _RECORD_NAMES and key not in get_type_hints(getattr(records, _RECORD_NAMES[name])):
            out.append((node.lineno, f"{name}[{key!r}]"))
    return out


def test_records_are_read_only_by_the_keys_their_types_declare():
    offenders = [
        f"{p.relative_to(PACKAGE)}:{line}: {what}"
        for p in _modules()
        if "results" not in p.relative_to(PACKAGE).parts
        for line, what in undeclared_reads(p.read_text())
    ]
    assert not offenders, "\n".join(offenders)


def test_the_read_rule_catches_a_planted_key():
    planted = 'def f(result, rank, metrics):\n    return result["metric"], rank.get("steps"), metrics["tok_s"]\n'
    assert undeclared_reads(planted) == [(2, "result['metric']"), (2, "rank['steps']"), (2, "metrics['tok_s']")]
