"""The docs' metrics table is the registry's: adding, renaming or re-documenting a metric is one
row in fsdp_bench/results/metrics.py, and this fails until the docs say the same."""

import re
from pathlib import Path

from fsdp_bench.report.table import REPORT_COLUMNS
from fsdp_bench.results.metrics import METRICS, markdown_table

ROOT = Path(__file__).resolve().parents[2]
START = "<!-- metrics table: generated from fsdp_bench/results/metrics.py"
END = "<!-- end of metrics table -->"


def _docs_table() -> str:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        if START in text:
            body = text.split(START, 1)[1].split("\n", 1)[1]
            return body.split(END, 1)[0].strip()
    raise AssertionError("no file holds the generated metrics table")


def test_docs_metrics_table_is_the_registry():
    assert _docs_table() == markdown_table(), "run: python -m fsdp_bench.results.metrics, and paste its table"


def test_every_registered_metric_has_a_unit_and_a_method():
    for metric in METRICS:
        assert metric.unit and metric.doc, metric.name
        assert metric.better in (None, "higher", "lower"), metric.name
        assert re.fullmatch(r"[a-z0-9_]*(<[a-z]+>[a-z0-9_]*)*", metric.name), metric.name


def test_report_table_shows_what_the_registry_says():
    from fsdp_bench.results.metrics import TABLE, shown_in

    shown = {m.name for m in shown_in(TABLE)}
    metric_columns = {name for name, _ in REPORT_COLUMNS if name in {m.name for m in METRICS}}
    assert metric_columns == shown


# --- issue 24: the README is short; docs/ holds the reference, and lists what the code defines ---

DOCS = ROOT / "docs"
README_MAX_LINES = 250


def test_every_option_is_documented():
    from fsdp_bench.plan.options import DISPLAY_OPTIONS, OPTIONS

    text = (DOCS / "options.md").read_text()
    missing = [f"--bench-{name}" for name in [*OPTIONS, *DISPLAY_OPTIONS] if f"`--bench-{name}" not in text]
    assert not missing, f"docs/options.md lacks {missing}"


def test_every_model_flavor_is_documented():
    from fsdp_bench.plan.flavors import MODEL_FLAVORS

    text = (DOCS / "models.md").read_text()
    missing = [name for name in MODEL_FLAVORS if f"`{name}`" not in text]
    assert not missing, f"docs/models.md lacks {missing}"


def test_the_model_catalog_is_documented_row_by_row():
    """docs/models.md's "Adding a model" table is the catalog (plan.architectures), field by field."""
    from fsdp_bench.plan.architectures import ARCHITECTURES

    text = (DOCS / "models.md").read_text()
    assert "## Adding a model" in text
    table = text.split("<!-- architectures:", 1)[1].split("\n", 1)[1].split("<!-- end of architectures -->")[0]
    yes = {True: "yes", False: "no"}
    expected = [
        f"| `{a.name}` | {a.builder} | {a.shape} | {yes[a.takes_tokens]} | {yes[a.built_on_meta]} "
        f"| {yes[a.tied_by_default]} | {a.norm} |"
        for a in ARCHITECTURES.values()
    ]
    assert table.strip().splitlines() == expected


def test_the_metrics_table_lives_in_docs():
    assert START in (DOCS / "metrics.md").read_text() and START not in (ROOT / "README.md").read_text()


def test_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links
    # every docs page is reachable from the README
    assert {p.name for p in DOCS.glob("*.md")} <= {Path(link).name for link in links}


def _registry_names_in(folder: Path) -> set[str]:
    """The metrics a package's modules name through the registry (`M.<name>`)."""
    return {n for path in folder.rglob("*.py") for n in re.findall(r"\bM\.([a-z0-9_]+)", path.read_text())}


def test_charts_draw_what_the_registry_flags_chart():
    """A metric flagged CHART is drawn by some chart, and a metric a chart names is flagged CHART,
    but for the columns a chart reads to draw another (error bars, the trained filter)."""
    from fsdp_bench.results.metrics import CHART, M, shown_in

    read_not_drawn = {M.params_changed, M.step_time_s_median_ci_low, M.step_time_s_median_ci_high}
    named = _registry_names_in(ROOT / "fsdp_bench" / "report" / "charts") - read_not_drawn
    flagged = {m.name for m in shown_in(CHART)}
    # charts.memory spells the breakdown's names from its BREAKDOWN parts (naming one through M)
    breakdown = {m for m in flagged if m.startswith("breakdown_")}
    assert named - breakdown == flagged - breakdown and len(breakdown) == 5


def test_live_line_shows_what_the_registry_flags_live():
    from fsdp_bench.launch.progress import LIVE_PIECES
    from fsdp_bench.results.metrics import LIVE, shown_in

    assert {name for names, _ in LIVE_PIECES for name in names} == {m.name for m in shown_in(LIVE)}


def test_compare_judges_metrics_with_a_direction():
    from fsdp_bench.report.compare import COMPARED, is_regression
    from fsdp_bench.results.metrics import BY_NAME

    assert all(BY_NAME[m].better for m in COMPARED)
    assert is_regression("tokens_per_s_per_device", -10.0, 5.0) and not is_regression(
        "tokens_per_s_per_device", 10.0, 5.0
    )
    assert is_regression("peak_allocated_gib", 10.0, 5.0) and not is_regression("peak_allocated_gib", -10.0, 5.0)


def test_docs_strategies_table_is_the_catalog():
    from fsdp_bench.plan.strategy_table import markdown_table

    text = (DOCS / "options.md").read_text()
    start = "<!-- strategies table: generated from fsdp_bench/plan/catalog.py"
    body = text.split(start, 1)[1].split("\n", 1)[1].split("<!-- end of strategies table -->", 1)[0]
    assert body.strip() == markdown_table(), "run: python -m fsdp_bench.plan.strategy_table, and paste its table"


def test_the_probe_steps_are_documented_in_the_order_the_worker_runs_them():
    """metrics.md once listed the FLOP counter as probe step 1 and a CUDA-only profiler step 3, and
    --bench-no-probes' help said 2 steps, after the step-parts probe had come first on every device."""
    from fsdp_bench.plan.case import PARTS_PROBE_STEPS
    from fsdp_bench.plan.options import PROBE_STEPS, option_help

    source = (ROOT / "fsdp_bench" / "worker" / "probes.py").read_text().split("def run_probes(", 1)[1]
    order = [
        source.index(f"{name}(case") for name in ("_probe_step_parts", "_probe_flops_and_state", "_probe_breakdown")
    ]
    assert order == sorted(order)
    metrics = (ROOT / "docs" / "metrics.md").read_text()
    assert f"| probe steps 1-{PARTS_PROBE_STEPS} after the measured steps" in metrics
    assert f"| probe step {PARTS_PROBE_STEPS + 1} | `FlopCounterMode`" in metrics
    assert f"| probe step {PARTS_PROBE_STEPS + 2} | `MemTracker`" in metrics
    assert f"`--bench-no-probes` skips probe steps 1-{PROBE_STEPS}." in metrics
    assert PROBE_STEPS == PARTS_PROBE_STEPS + 2
    assert f"(up to {PROBE_STEPS} per case)" in option_help("no-probes")
    assert f"after the measured ones (up to {PROBE_STEPS})" in (ROOT / "docs" / "options.md").read_text()


def test_how_it_works_names_every_module_of_each_package():
    """docs/how-it-works.md's layout table left out 34 modules (analysis/attribution, report/why,
    plan/sweep, ...): a newcomer looking for where the step is taken apart found no row naming it."""
    rows = {
        line.split("|")[1].strip(): line.split("|")[2]
        for line in (DOCS / "how-it-works.md").read_text().splitlines()
        if line.startswith("| `fsdp_bench/")
    }
    missing = []
    for package in ("results", "plan", "analysis", "launch", "worker", "report"):
        names = [p.stem for p in (ROOT / "fsdp_bench" / package).glob("*.py") if not p.stem.startswith("__")]
        names += [f"{p.name}/" for p in (ROOT / "fsdp_bench" / package).iterdir() if (p / "__init__.py").exists()]
        row = rows[f"`fsdp_bench/{package}/`"]
        named = set(re.findall(r"`([\w/]+)", row))  # whole names: `history` is not `history_page`
        missing += [f"{package}/{name}" for name in names if name not in named]
    assert not missing, f"docs/how-it-works.md's table lacks {missing}"
