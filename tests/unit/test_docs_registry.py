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
