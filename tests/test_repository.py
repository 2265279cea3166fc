"""What the repository tracks: source, tests, notebooks and small fixtures, never build outputs.

Twelve wheel files (3.4 MB) once rode in the tree's root by accident; these
checks read `git ls-files` so a binary cannot come back unnoticed.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_OUTPUTS = (".whl", ".tar.gz", ".zip", ".egg", ".so", ".pyd", ".pyc", ".dylib", ".dll", ".exe")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    return [name for name in out.stdout.decode().split("\0") if name]


def _build_outputs(names: list[str]) -> list[str]:
    return [name for name in names if name.lower().endswith(BUILD_OUTPUTS)]


def test_no_build_output_or_archive_is_tracked() -> None:
    found = _build_outputs(_tracked())
    assert not found, f"build outputs tracked by git (remove them, they are not source): {found}"


def test_the_binary_check_can_fail() -> None:
    names = ["rollkit/core/trace.py", "pydantic-2.14.4-py3-none-any.whl", "dist/rollkit-0.1.0.tar.gz"]
    assert _build_outputs(names) == names[1:]


# A measured figure: a decimal with a unit of time or size ("0.14 s",
# "2.6 GB"), an approximate one ("~60 ms"), a ratio ("10x"), or a number
# with a unit after "took", "cost(s)" or "peaked at". A setting or a limit
# ("a 5 s timeout", "lines up to 16 MiB") is a whole number without these.
_UNIT = r"(?:ms|µs|us|ns|s|seconds|KB|MB|GB|KiB|MiB|GiB)\b"
_MEASURED = re.compile(
    rf"(?<![\w.])\d[\d,]*\.\d+\s?{_UNIT}"
    rf"|~\s?\d[\d,.]*\s?{_UNIT}"
    r"|(?<![\w.])[1-9]\d*(?:\.\d+)?x(?![\w])"
    rf"|\b(?:took|costs?|peaked at)\b[^.;:]*?(?<![\w.])\d[\d,.]*\s?{_UNIT}"
)


def _comment_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) of every `#` comment and docstring line of a module."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found += [(node.body[0].lineno + k, line) for k, line in enumerate(doc.splitlines())]
    return found


def _measured_figures_of(source: str) -> list[str]:
    return [f"{line}: {text.strip()}" for line, text in _comment_lines(source) if _MEASURED.search(text)]


def test_comments_say_why_not_how_fast() -> None:
    """No measured figure in a comment or docstring of rollkit/: a number
    measured once goes stale in a comment; it belongs in the commit message
    and in a benchmark (benchmarks/) that prints it."""
    found = [f"{path.relative_to(ROOT)}:{hit}" for path in sorted((ROOT / "rollkit").rglob("*.py"))
             for hit in _measured_figures_of(path.read_text())]
    assert not found, "measured figures in comments (move them to the commit message / a benchmark):\n" + "\n".join(found)


def test_the_measured_figure_check_can_fail() -> None:
    measured = ["took 3.7 s to the MAPs' 1.9 s", "costs ~60 ms of CPU", "pydantic costs 10x more",
                "a million rollouts peaked at 1.25 GB", "a build cost 81 us of CPU a line", "took 2.6 GB"]
    settings = ["a 95% interval", "a short timeout (5 s)", "lines up to 16 MiB", "hex (0x)", 'kill_grace="2s"',
                "30 tasks x 10 repeats", "the 97.5% quantile", "429s and 5xx", "e.g. 100 MB of `[],`"]
    source = "".join(f"# {text}\n" for text in measured + settings)
    assert [hit.split(": ", 1)[1] for hit in _measured_figures_of(source)] == [f"# {t}" for t in measured]



def _stray_helpers(names: list[str]) -> list[str]:
    """Python modules directly in tests/ that are neither a test module nor conftest.py."""
    return [name for name in names if re.fullmatch(r"tests/[^/]+\.py", name)
            and not re.fullmatch(r"tests/(test_\w+|conftest)\.py", name)]


def test_the_tests_folder_holds_only_tests_its_helpers_live_in_tests_helpers() -> None:
    """What the tests share that is not a test lives in tests/helpers/:
    six verifiers helpers were added beside the tests after the others had
    moved there, as nothing said where one goes."""
    found = _stray_helpers(_tracked())
    assert not found, f"modules in tests/ that are not tests (move them into tests/helpers/): {found}"


def test_the_stray_helper_check_can_fail() -> None:
    names = ["tests/test_trace.py", "tests/conftest.py", "tests/helpers/fake_provider.py",
             "tests/programs/echo.py", "tests/byo_verifiers_taskset.py", "tests/oracle.py"]
    assert _stray_helpers(names) == ["tests/byo_verifiers_taskset.py", "tests/oracle.py"]
