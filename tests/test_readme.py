"""Every code block of README.md and of the docs site runs as written, top to bottom.

The README stands alone; the docs pages follow each other in the order of
the site's navigation (mkdocs.yml), a page reading what an earlier one
wrote. Each of the two runs its ```python blocks in order in ONE fresh
Jupyter kernel (they use top-level `await`, as a notebook cell does), and
its ```bash / ```console blocks as bash scripts, all in one temporary
folder, so a block can read what an earlier one wrote (`runs/arith`) and
must not trip over it. A block that fails names its file and line and
shows the error.

Not run, each line for the reason given in SKIPPED (and a rule that no
longer matches a README line fails, so nothing is skipped by accident):
installing, the whole test suite, and servers that run until Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from helpers.kernel_helpers import ROOT, Kernel, kernel_env  # noqa: E402

README = ROOT / "README.md"


def docs_pages() -> list[Path]:
    """The docs site's pages in the order of its navigation (mkdocs.yml)."""
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [ROOT / "docs" / name for name in nav]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```", re.M | re.S)
SHELLS = ("bash", "console", "sh", "shell")
NPM_BIN = Path(os.environ.get("ROLLKIT_NPM_PREFIX", Path.home() / ".cache" / "rollkit" / "npm")) / "node_modules" / ".bin"

# A shell line that starts with a key is not run, for the reason given.
SKIPPED = {
    "pip install -e . && rollkit demo": "installs rollkit into this environment (the quick start's first step)",
    "scripts/test.sh": "runs the whole test suite, this test included",
    'pip install -e ".[notebooks]"': "installs JupyterLab and the notebooks' extras into this environment",
    "jupyter lab": "a notebook server: runs until Ctrl-C",
    "rollkit view": "a web server: runs until Ctrl-C",
}


def blocks_of(path: Path) -> list[tuple[str, str, int]]:
    """(language, code, line in the file) of every fenced block."""
    text = path.read_text()
    return [(m["lang"], m["code"], text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def readme_blocks() -> list[tuple[str, str, int]]:
    return blocks_of(README)


def all_blocks() -> list[tuple[str, str, int]]:
    return [block for path in [README, *docs_pages()] for block in blocks_of(path)]


def _shell_script(code: str) -> tuple[str, list[str]]:
    """The block as a bash script without its skipped lines, and those lines."""
    kept, skipped = [], []
    for line in code.splitlines():
        command = line.strip().removeprefix("$ ")
        if any(command.startswith(key) for key in SKIPPED):
            skipped.append(command)
        else:
            kept.append(command)
    return "set -euo pipefail\n" + "\n".join(kept) + "\n", skipped


# A python line that calls a key's harness needs that CLI; where
# scripts/test.sh could not install it (no npm), the line is not run. A line
# that needs an extra this interpreter cannot hold (verifiers pins mcp and
# openai below the test extra's) is not run either: its own test runs it in
# the venv scripts/test.sh builds for it (tests/test_verifiers_tasks.py).
NEEDS_CLI = {"codex": "harnesses.codex(", "claude": "harnesses.claude_code("}
NEEDS_MODULE = {"verifiers": 'rk.tasks_from("verifiers:'}


def _missing_needs(env: dict[str, str]) -> dict[str, str]:
    """What the lines need that is not here: {name: the text that marks such a line}."""
    missing = {name: mark for name, mark in NEEDS_CLI.items() if shutil.which(name, path=env["PATH"]) is None}
    missing |= {name: mark for name, mark in NEEDS_MODULE.items() if importlib.util.find_spec(name) is None}
    return missing


def _without_missing_needs(code: str, missing: dict[str, str], line: int) -> str:
    kept = []
    for text in code.splitlines():
        need = next((name for name, mark in missing.items() if mark in text), None)
        if need is None:
            kept.append(text)
        else:
            where = f"installed in {NPM_BIN}: scripts/test.sh installs it from the npm registry" if need in NEEDS_CLI \
                else "importable here: its test runs it in its own venv"
            print(f"README.md:{line}: not run: {text.strip()}  ({need} is not {where})")
            kept.append(text[: len(text) - len(text.lstrip())] + "pass")
    return "\n".join(kept) + "\n"


def test_each_need_marks_a_python_line() -> None:
    lines = [line for lang, code, _ in all_blocks() if lang == "python" for line in code.splitlines()]
    for name, mark in {**NEEDS_CLI, **NEEDS_MODULE}.items():
        assert any(mark in line for line in lines), f"the {name} rule ({mark!r}) marks no python line of the README or docs"


def test_the_skip_rules_each_match_a_shell_line() -> None:
    lines = [line.strip().removeprefix("$ ") for lang, code, _ in all_blocks() if lang in SHELLS
             for line in code.splitlines()]
    for key in SKIPPED:
        assert any(line.startswith(key) for line in lines), f"SKIPPED rule {key!r} matches no shell line of the README or docs"


def test_only_python_shell_and_plain_blocks() -> None:
    """A block in a language this test does not run would go unchecked."""
    langs = {lang for lang, _, _ in all_blocks()}
    assert langs <= {"python", "", *SHELLS}, langs


def _run_blocks(paths: list[Path], tmp_path: Path) -> dict[str, int]:
    """Run every block of `paths`, in order, in one kernel and one scratch folder."""
    work = tmp_path / "work"
    work.mkdir()
    env = kernel_env()
    # What the blocks need: a key in the environment (never used: no block
    # calls a remote model) and the agent CLIs they name, from where
    # scripts/test.sh installs them.
    env["OPENAI_API_KEY"] = "sk-readme-test-not-sent"
    env["PATH"] = os.pathsep.join([str(NPM_BIN), env.get("PATH", "")])
    missing = _missing_needs(env)
    kernel = Kernel(sys.executable, work, tmp_path / "kernels", env=env)
    ran = {"python": 0, "shell": 0}
    try:
        for path in paths:
            where = path.relative_to(ROOT)
            for lang, code, line in blocks_of(path):
                if lang == "python":
                    code = _without_missing_needs(code, missing, line)
                    content, outputs = kernel.run(code)
                    assert content["status"] == "ok", (
                        f"the python block at {where}:{line} failed:\n" + "\n".join(outputs)[-4000:]
                    )
                    ran["python"] += 1
                elif lang in SHELLS:
                    _run_shell(code, f"{where}:{line}", work, env)
                    ran["shell"] += 1
    finally:
        kernel.stop()
    assert os.listdir(work), "the blocks wrote nothing: they did not run where expected"
    return ran


def _run_shell(code: str, where: str, work: Path, env: dict[str, str]) -> None:
    script, skipped = _shell_script(code)
    for command in skipped:
        reason = next(r for key, r in SKIPPED.items() if command.startswith(key))
        print(f"{where}: not run: {command}  ({reason})")
    done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"the shell block at {where} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )


@pytest.mark.slow
def test_every_readme_block_runs_as_written(tmp_path: Path) -> None:
    ran = _run_blocks([README], tmp_path)
    assert ran["python"] >= 2 and ran["shell"] >= 2, ran


@pytest.mark.slow
def test_every_docs_block_runs_as_written(tmp_path: Path) -> None:
    ran = _run_blocks(docs_pages(), tmp_path)
    assert ran["python"] >= 15 and ran["shell"] >= 3, ran


def test_ci_runs_the_quick_start_commands_exactly_as_the_readme_gives_them() -> None:
    """CI proves the README only if it runs the same lines: each command of
    the Quick start block stands in .ci/run as written, in order, after the
    newcomer's setup (a fresh venv, an empty HOME, a clone in the temporary
    folder)."""
    quick = README.read_text().split("## Quick start\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in quick.splitlines() if line.strip()]
    assert commands == ["pip install -e . && rollkit demo", "scripts/test.sh"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    where = [ci.index(command) for command in commands]
    assert where == sorted(where)
    setup = "\n".join(ci[: where[0]])
    assert 'export HOME="$work/home"' in setup and "python3 -m venv" in setup and "git clone" in setup


def test_the_readme_lists_every_notebook_with_a_binder_link() -> None:
    """The notebooks table names each notebook in notebooks/, linked, with
    a Binder link that opens that notebook."""
    text = README.read_text()
    table = text.split("## Notebooks\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    linked = [re.search(r"\]\(notebooks/([^)]+\.ipynb)\)", row)[1] for row in rows]
    assert linked == notebooks
    for name, row in zip(notebooks, rows):
        assert f"mybinder.org/v2/gh/rollkit/rollkit/HEAD?labpath=notebooks%2F{name})" in row, name


def test_the_readme_is_one_page() -> None:
    """At most 200 lines, and no measured figure: claims link to the benchmarks page."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    figures = re.findall(r"\d[\d,.]*\s*(?:µs|us|ms|s|MB|GB|MiB|rollouts/s|x)\b", text)
    assert figures == [], figures
    assert "docs/benchmarks.md" in text
