"""The docs site builds without a warning, and says what the code is.

`mkdocs build --strict` (mkdocs.yml: Material theme, mkdocstrings for the
API reference) fails on a broken link, a page missing from the navigation,
or an API object mkdocstrings cannot find; the test command runs it here.
The API page names every public name of `rollkit`, each with a docstring;
the benchmarks page is what scripts/benchmarks_page.py makes of the
committed measurements. The pages' code blocks run in tests/test_readme.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# Journeys the site has a page for (issue 54): the page must exist and be in the navigation.
JOURNEYS = ["stepping.md", "users.md", "programs.md", "runs.md", "compare.md", "formats.md", "training.md",
            "spans-and-cost.md", "cli.md", "viewer.md", "tasks.md", "api.md", "benchmarks.md", "changelog.md",
            "architecture.md"]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Not -q: mkdocs counts the warnings strict mode aborts on from its log,
    # and -q leaves them out of it (a broken link then builds).
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=config.parent)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = sorted(p.relative_to(tmp_path / "site") for p in (tmp_path / "site").rglob("index.html"))
    print(f"{len(pages)} pages")
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert 'id="rollkit.core.agent.Agent"' in api and 'id="rollkit.tables.lazyrun.open_run"' in api


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    """The check above can fail: the same site with one link to a page that
    does not exist does not build."""
    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    # Only the pages and the theme: the API page's objects are not what this checks.
    config = (ROOT / "mkdocs.yml").read_text()
    (copy / "mkdocs.yml").write_text(config)
    (copy / "docs" / "api.md").write_text("# API reference\n")
    page = copy / "docs" / "cli.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    done = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


def test_every_journey_has_a_page_in_the_navigation() -> None:
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert [j for j in JOURNEYS if j not in nav or not (DOCS / j).is_file()] == []
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md")), "a page outside the navigation, or a missing one"


def test_the_api_page_names_every_public_name_with_a_docstring() -> None:
    import inspect

    import rollkit as rk

    listed = set(re.findall(r"^::: (\S+)", (DOCS / "api.md").read_text(), re.M))
    missing, undocumented = [], []
    for name in rk.__all__:
        obj = getattr(rk, name)
        if name == "__version__":
            continue
        path = obj.__name__ if inspect.ismodule(obj) else f"{obj.__module__}.{obj.__name__}"
        if path not in listed:
            missing.append(f"{name} ({path})")
        if not inspect.getdoc(obj):
            undocumented.append(name)
    assert missing == [], "add to docs/api.md: " + ", ".join(missing)
    assert undocumented == [], "give these a docstring: " + ", ".join(undocumented)


def test_the_benchmarks_page_is_generated_from_the_committed_measurements() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import benchmarks_page
    finally:
        sys.path.pop(0)
    assert (DOCS / "benchmarks.md").read_text() == benchmarks_page.page(), (
        "docs/benchmarks.md is not what benchmarks/results/*.json give: run python scripts/benchmarks_page.py")
    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert len(results) >= 2
    import json

    for path in results:
        record = json.loads(path.read_text())
        assert {"date", "machine", "load", "results", "script"} <= set(record), path.name
        assert record["results"] and all({"name", "value", "unit"} <= set(r) for r in record["results"]), path.name


def _benchmark_scripts() -> list[Path]:
    return [p for p in sorted((ROOT / "benchmarks").glob("*.py")) if not p.name.startswith("_")]


def test_every_benchmark_script_writes_its_numbers_through_the_one_writer() -> None:
    """The page can only table what a script writes: every script in
    benchmarks/ records its numbers in _common.Results, takes --json PATH
    (json_option on its parser, or json_path of argv) and saves them, and
    names the option in its docstring's run line."""
    import ast

    missing = []
    for script in _benchmark_scripts():
        source = script.read_text()
        tree = ast.parse(source)
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and node.module == "_common" for alias in node.names}
        called = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute)}
        if "Results" not in imported or not imported & {"json_option", "json_path"}:
            missing.append(f"{script.name}: does not import Results and json_option/json_path from _common")
        if "save" not in called or not called & {"add", "add_record"}:
            missing.append(f"{script.name}: adds no number to its Results or never saves them")
        if "--json PATH" not in (ast.get_docstring(tree) or ""):
            missing.append(f"{script.name}: its docstring's run line does not name --json PATH")
    assert missing == [], "\n".join(missing)


def test_a_benchmark_run_with_json_writes_a_record_the_page_tables(tmp_path: Path) -> None:
    """A real (tiny) run of benchmarks/frames_eager.py --json: the record has
    the options it ran with, the machine, the load and the date, one row per
    frame with its unit, and the page's table shows each row and the command."""
    import json

    out = tmp_path / "frames_eager.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "frames_eager.py"), "--traces", "24",
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["script"] == "frames_eager.py" and record["machine"]["cores"] == os.cpu_count()
    assert record["options"] == ["--traces", "24"]  # the sizes it ran with, not where it wrote
    assert len(record["load"]["before"]) == 3 and record["date"].endswith("+00:00")
    assert [r["name"] for r in record["results"]] == [f"rk.frames.{kind}(24 traces)" for kind in
                                                      ("rollouts", "turns", "calls", "phases", "signals")]
    assert all(r["unit"] == "s" and r["value"] > 0 for r in record["results"])
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import benchmarks_page
    finally:
        sys.path.pop(0)
    table = "\n".join(benchmarks_page._table(record))
    assert all(f"| {r['name']} | " in table for r in record["results"])
    assert "Run as `python benchmarks/frames_eager.py --traces 24`." in table


def test_a_record_s_units_come_from_its_keys() -> None:
    """What a fresh process printed as JSON keeps its units on the page:
    seconds, MB, rates per second and per CPU second, ratios, counts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _common import Results
    finally:
        sys.path.pop(0)
    results = Results("x.py", "a test")
    results.add_record("export", {"wall_s": 1.5, "peak_mb_build": 90, "rows_per_s": 10, "json_rows_per_cpu_s": 3,
                                  "ratio_cpu": 2.0, "rows": 5, "first_open": 0.2, "refused": True, "error": "no",
                                  "native": {"cpu_s": 0.5}}, bare="s")
    assert [(r["name"], r["unit"]) for r in results.rows] == [
        ("export: wall_s", "s"), ("export: peak_mb_build", "MB"), ("export: rows_per_s", "/s"),
        ("export: json_rows_per_cpu_s", "/CPU s"), ("export: ratio_cpu", "x"), ("export: rows", ""),
        ("export: first_open", "s"), ("export, native: cpu_s", "s")]
