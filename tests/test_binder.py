"""Fresh installs cannot rot unnoticed.

1. The Binder setup: build a fresh virtual environment from exactly what
   binder/ holds, the way repo2docker does (`pip install -r
   binder/requirements.txt` from the repository root, then binder/postBuild
   if there is one), and run every notebook in it top to bottom, in a
   network namespace with only loopback up (no CDN, no host but the
   kernel's). Binder's base image brings Jupyter itself; the test adds only
   that part (ipykernel to run the notebook, nbclient to drive it).
2. The README's notebook install, as the README writes it (`pip install -e
   ".[notebooks]"`), then every notebook again the same way. It runs in the
   environment of 1 (one venv per test run: the dependencies are installed
   once), and first checks that the README's command changes nothing there
   but rollkit itself (installed from the checkout instead of as a copy),
   so that environment is what the README's command gives.
3. The default install: `pip install -e .` in a fresh virtual environment
   and nothing else, then the README's "In a notebook" snippet, read from the
   README itself, run as a cell in that environment's own kernel (ipykernel
   and jupyter_client come with rollkit): the notebook stack must be there.
   The Quick start test shares that environment (it installs the same).

The venvs are real fresh ones (no system site-packages), so a missing
dependency fails here. pip's cache keeps the reinstall quick; the test's
own installs skip compiling every installed module to bytecode
(`--no-compile`: what is installed is the same, and a kernel compiles what
it imports), and each venv is removed by its fixture once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.fault_report import SECTIONS, report

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# The notebooks with a verifiers section: its cells skip their work where verifiers is
# missing (the main test environment), and run for real on the notebooks' install.
VERIFIERS_NOTEBOOKS = [n for n in NOTEBOOKS if "import verifiers.v1 as vf" in n.read_text()]

# A fresh virtual environment installs from the registry: slower than any other test.
def slow_venv(test):  # type: ignore[no-untyped-def]
    return pytest.mark.slow(pytest.mark.timeout(1800)(test))


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _fresh_venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # Kernel specs and runtime files of this environment only, inside tmp_path.
        "JUPYTER_PATH": str(venv / "share" / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        # `ipykernel install` and pip's builds make temporary folders; keep them
        # in tmp_path so nothing is left behind in /tmp.
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir()
    return venv, env


def _extras(spec: str) -> set[str]:
    """The extras of an install spec such as `.[notebooks]` or `-e ".[a,b]"`."""
    inside = spec.partition("[")[2].partition("]")[0]
    return {name.strip() for name in inside.split(",") if name.strip()}


def _readme_notebook_install() -> str:
    """The README's notebook install command, as written."""
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / "README.md").read_text().splitlines()]
    found = [line for line in lines if line.startswith("pip install") and "notebooks" in line]
    assert len(found) == 1, f"the README should give one notebook install command, found {found}"
    return found[0]


def test_the_readme_and_binder_give_the_notebooks_the_same_install() -> None:
    """One install for the notebooks: the README's command and Binder's
    requirements name the same extras of this checkout, and those extras
    carry the optional packages the notebooks import (the two tests below
    run every notebook on each install)."""
    requirements = [line.strip() for line in (BINDER / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#")]
    assert requirements == [".[notebooks]"]
    readme = _readme_notebook_install()
    assert readme == 'pip install -e ".[notebooks]"'
    assert _extras(readme) == _extras(requirements[0]) == {"notebooks"}
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["notebooks"]) >= {"rollkit[inspect]", "rollkit[reasoning-gym]", "rollkit[verifiers]",
                                        "rollkit[lab]"}
    uses_inspect = [n.name for n in NOTEBOOKS if "inspect" in n.read_text()]
    assert uses_inspect, "no notebook reads an inspect log any more: drop the extra"
    assert [n.name for n in VERIFIERS_NOTEBOOKS] == ["09_bring_your_own_tasks.ipynb"]


def _stdout(notebook: dict) -> str:
    """What a notebook's code cells printed, in order."""
    return "".join("".join(o.get("text", "")) for c in notebook["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


def _code(notebook: dict) -> list[str]:
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def test_a_verifiers_section_says_how_to_install_it_where_verifiers_is_missing() -> None:
    """Where verifiers is missing (the main test environment runs the
    notebooks so: nbval and tests/test_run_all.py prove every cell still
    runs), the section's first cell says how to get it."""
    for path in VERIFIERS_NOTEBOOKS:
        guard = next(code for code in _code(json.loads(path.read_text())) if "import verifiers.v1 as vf" in code)
        assert "except ImportError:\n    vf = None\n" in guard
        assert 'pip install "rollkit[verifiers]"' in guard, guard


def _verifiers_section_ran(work: Path) -> None:
    """The verifiers section of each notebook that has one ran for real in
    `work` (where the runner saved the executed notebooks): its outputs are
    ones only a run with verifiers prints, the scores verifiers' functions gave."""
    for path in VERIFIERS_NOTEBOOKS:
        printed = _stdout(json.loads((work / path.name).read_text()))
        assert "This section needs verifiers" not in printed
        assert re.search(r"^verifiers 0\.4\.\d+$", printed, re.M), printed[-3000:]
        assert ("rewards: {'correct': 1.0, 'showed_work': 1.0} weights: {'correct': 0.8, 'showed_work': 0.2} "
                "-> reward 1.0") in printed, printed[-3000:]
        assert "scratchpad: ['2 + 3 = 5']" in printed
        assert re.search(r"^reward\.showed_work +1\.000 +4/4 +0\.000 +4/4 ", printed, re.M), printed[-3000:]


def _offline(command: list[str]) -> tuple[list[str], bool]:
    """`command` in a network namespace of its own with only loopback up,
    where one can be made (root, util-linux's unshare): a notebook that
    asks any host but the kernel's loopback fails there."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=60) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0 or shutil.which("ip") is None:
        print("no network namespace can be made here: the notebooks run with the network as it is")
        return command, False
    script = "ip link set lo up && exec " + " ".join(shlex.quote(part) for part in command)
    return ["unshare", "--net", "bash", "-c", script], True


class _Venv:
    """One fresh venv for the tests of a module, and which install it holds now."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path, self.env = _fresh_venv(root)
        self.python = self.path / "bin" / "python"
        self.holds: str | None = None

    def pip(self, *args: str, cwd: Path = ROOT) -> str:
        return _run([str(self.python), "-m", "pip", *args], cwd=cwd, env=self.env).stdout

    def frozen(self) -> dict[str, str]:
        """Every installed package but rollkit, by name: its `pip freeze` line."""
        named = {line.split("==")[0].split(" @ ")[0].lower(): line for line in self.pip("freeze", "--all").splitlines()
                 if line and not line.startswith(("#", "-e "))}  # an editable install: rollkit's own lines
        return {name: line for name, line in named.items() if name != "rollkit"}


def _binder_install(venv: _Venv) -> None:
    """Binder's install, as repo2docker does it: from the repository root."""
    venv.pip("install", "-q", "--no-compile", "-r", str(BINDER / "requirements.txt"))
    post_build = BINDER / "postBuild"
    if post_build.exists():
        _run(["bash", str(post_build)], cwd=ROOT, env=venv.env)
    venv.holds = "binder"


@pytest.fixture(scope="module")
def notebooks_venv(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A fresh venv with Binder's install, and what Binder's base image
    provides beside it: a kernel and something to drive it. Removed when
    the module's tests are done."""
    root = tmp_path_factory.mktemp("notebooks-venv")
    venv = _Venv(root)
    _binder_install(venv)
    venv.pip("install", "-q", "--no-compile", "ipykernel", "nbclient")
    _run([str(venv.python), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"], env=venv.env)
    # Notebook 07's made-up run: made by the first run of the notebooks, read by the second.
    venv.env["ROLLKIT_BIG_RUN_CACHE"] = str(root / "big-runs")
    yield venv
    shutil.rmtree(root, ignore_errors=True)


# Runs each notebook given after the folder it works in (argv[1]) top to bottom,
# with a last cell printing where its kernel ran and which rollkit it imported;
# "RAN <notebook> <seconds>" after each, flushed, so a run cut short still says
# what had run and how long it took. "MIRRORED <notebook> <n>" counts the
# Output-widget states nbclient wrote back to the kernel while a cell ran:
# each such write can hide the cell's reply until the timeout
# (rollkit.notebook.outputs), so a notebook must make none.
_RUNNER = textwrap.dedent(
    """
    import sys, time, nbclient, nbformat
    from nbclient.output_widget import OutputWidget
    mirrored = []
    publish = OutputWidget._publish_msg
    def counted(self, *args, **kwargs):
        mirrored.append(args[0])
        return publish(self, *args, **kwargs)
    OutputWidget._publish_msg = counted
    work = sys.argv[1]
    for path in sys.argv[2:]:
        nb = nbformat.read(path, as_version=4)
        # Prove where the kernel runs: this environment, and rollkit installed into it.
        nb.cells.append(nbformat.v4.new_code_cell(
            "import sys, rollkit; print('PREFIX', sys.prefix); print('ROLLKIT', rollkit.__file__)"))
        started = time.monotonic()
        nbclient.NotebookClient(nb, timeout=600, startup_timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": work}}).execute()
        print(nb.cells[-1].outputs[0]["text"].strip())
        nbformat.write(nb, path.rsplit("/", 1)[-1])  # read back by the test
        print("MIRRORED", path.rsplit("/", 1)[-1], len(mirrored))
        mirrored.clear()
        print("RAN", path.rsplit("/", 1)[-1], f"{time.monotonic() - started:.1f}", flush=True)
    """
)


def _report_times(name: str, printed: str | bytes | None, notebooks: list[Path]) -> list[str]:
    """Each notebook's run time (from the runner's RAN lines) into the test
    report's summary, section "notebook times", and the one it was running
    when the run ended early: they show in every run of the suite, so a slow
    notebook can be found without a failure. Returns the lines reported."""
    text = printed.decode(errors="replace") if isinstance(printed, bytes) else printed or ""
    ran = [line.split()[1:3] for line in text.splitlines() if line.startswith("RAN ")]
    lines = [f"{name}: {notebook} {seconds} s" for notebook, seconds in ran]
    if len(ran) < len(notebooks):
        lines.append(f"{name}: {notebooks[len(ran)].name} did not finish")
    for line in lines:
        report(line, section="notebook times")
    return lines


def _run_every_notebook(venv: _Venv, name: str) -> str:
    """Every notebook top to bottom in `venv`'s kernel, with no network but
    loopback where a namespace can be made (_RUNNER); each notebook's time goes
    into the test report's summary. Returns the rollkit folder the kernels imported."""
    work = venv.root / name
    work.mkdir()
    command, offline = _offline([str(venv.python), "-c", _RUNNER, str(work), *map(str, NOTEBOOKS)])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=work, env=venv.env)
    except subprocess.TimeoutExpired as exc:
        _report_times(name, exc.stdout, NOTEBOOKS)
        raise
    _report_times(name, done.stdout, NOTEBOOKS)
    assert done.returncode == 0, f"the notebooks failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    print(done.stdout)
    print("network:", "loopback only" if offline else "as it is")
    ran = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("RAN")]
    assert ran == [n.name for n in NOTEBOOKS]
    mirrored = [line for line in done.stdout.splitlines() if line.startswith("MIRRORED") and not line.endswith(" 0")]
    assert mirrored == [], f"notebooks whose cells captured into an Output widget (a stall risk): {mirrored}"
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("PREFIX", "ROLLKIT")))
    assert Path(found["PREFIX"]).resolve() == venv.path.resolve()
    packages = {Path(line.split(" ", 1)[1]).resolve().parent for line in done.stdout.splitlines()
                if line.startswith("ROLLKIT")}
    assert len(packages) == 1, packages  # every notebook's kernel imported the same rollkit
    _verifiers_section_ran(work)
    return str(packages.pop())


def test_each_notebooks_time_shows_in_the_summary_whatever_the_outcome(tmp_path: Path) -> None:
    """The notebook runner of the two slow tests above, for real on two tiny
    notebooks in this environment's kernel: each notebook's time lands in
    the "notebook times" section the report's summary prints (conftest),
    and a run cut short names the notebook it was in."""
    import nbformat

    from conftest import pytest_terminal_summary

    books = []
    for i in range(2):
        books.append(tmp_path / f"tiny{i}.ipynb")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({i})")]), books[-1])
    done = subprocess.run([sys.executable, "-c", _RUNNER, str(tmp_path), *map(str, books)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    before = list(SECTIONS.get("notebook times", []))
    try:
        lines = _report_times("run", done.stdout, books)
        assert [re.fullmatch(r"run: (tiny\d\.ipynb) \d+\.\d s", line)[1] for line in lines] == ["tiny0.ipynb",
                                                                                                 "tiny1.ipynb"]
        cut = _report_times("cut", b"RAN tiny0.ipynb 1.5\n", books)  # a timed-out run's output is bytes
        assert cut == ["cut: tiny0.ipynb 1.5 s", "cut: tiny1.ipynb did not finish"]

        class Terminal:
            printed: list[str] = []

            def section(self, title: str) -> None:
                self.printed.append(f"== {title} ==")

            def write_line(self, line: str) -> None:
                self.printed.append(line)

        pytest_terminal_summary(Terminal())
        shown = Terminal.printed[Terminal.printed.index("== notebook times =="):]
        assert shown[1 + len(before):][:4] == [f"notebook times: {line}" for line in [*lines, *cut]]
    finally:
        SECTIONS["notebook times"] = before  # the tiny ones are not the suite's notebooks
        if not before:
            del SECTIONS["notebook times"]


@slow_venv
def test_binder_install_runs_every_notebook_offline(notebooks_venv: _Venv) -> None:
    """A fresh venv with exactly Binder's requirements runs every notebook
    top to bottom, with no network but loopback."""
    if notebooks_venv.holds != "binder":
        _binder_install(notebooks_venv)
    package = _run_every_notebook(notebooks_venv, "binder-run")
    assert Path(package).is_relative_to(notebooks_venv.path.resolve())  # installed, not the checkout


@slow_venv
def test_the_readme_notebook_install_runs_every_notebook_offline(notebooks_venv: _Venv) -> None:
    """The README's notebook install, as written, gives the environment
    Binder's gives (nothing but rollkit itself changes), and every notebook
    runs top to bottom on it, rollkit imported from the checkout."""
    before = notebooks_venv.frozen()
    command = shlex.split(_readme_notebook_install())
    assert command[:2] == ["pip", "install"]
    notebooks_venv.pip(*command[1:], "-q", "--no-compile")
    notebooks_venv.holds = "readme"
    after = notebooks_venv.frozen()
    assert {name: (before.get(name), after.get(name)) for name in before.keys() | after.keys()
            if before.get(name) != after.get(name)} == {}
    package = _run_every_notebook(notebooks_venv, "readme-run")
    assert Path(package) == (ROOT / "rollkit").resolve()  # the editable install: the checkout's own


def _readme_notebook_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## In a notebook", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def default_venv(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A fresh venv for the default install (`pip install -e .` and nothing
    else), shared by the two tests that make that install: the second
    finds the dependencies there. Removed when the module's tests are done."""
    root = tmp_path_factory.mktemp("default-venv")
    yield _Venv(root)
    shutil.rmtree(root, ignore_errors=True)


@slow_venv
def test_the_default_install_runs_the_readme_notebook_snippet(default_venv: _Venv) -> None:
    venv, env, python, tmp_path = default_venv.path, default_venv.env, default_venv.python, default_venv.root
    default_venv.pip("install", "-q", "--no-compile", "-e", str(ROOT), cwd=tmp_path)
    snippet = _readme_notebook_snippet()
    assert "ro.panel()" in snippet and "rk.plots.rewards(traces)" in snippet
    # What the cell made, so the test checks values, not only that nothing raised.
    check = (
        "import sys\n"
        "panel = ro.panel(); fig = rk.plots.rewards(traces); browser = rk.notebook.TraceBrowser(traces)\n"
        "print('RESULT', type(panel).__name__, type(panel.chart.figure).__name__, type(fig).__name__, "
        "len(traces), trace.ok, type(rk.frames.rollouts(traces)).__name__, sys.prefix)\n"
    )
    runner = textwrap.dedent(
        """
        import sys
        from jupyter_client.manager import start_new_kernel
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=300)
        outputs = []
        def hook(msg):
            content = msg["content"]
            if msg["msg_type"] == "stream":
                outputs.append(content["text"])
            elif msg["msg_type"] == "error":
                outputs.append("ERROR " + content["ename"] + ": " + content["evalue"])
        try:
            for code in (sys.argv[1], sys.argv[2]):
                reply = kc.execute_interactive(code, timeout=300, output_hook=hook)
                if reply["content"]["status"] != "ok":
                    break
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        print("".join(outputs))
        """
    )
    done = _run([str(python), "-c", runner, snippet, check], cwd=tmp_path, env=env)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert result, done.stdout[-3000:]
    words = result[0].split()
    assert words[1:8] == ["RolloutPanel", "FigureWidget", "Figure", "24", "True", "DataFrame", str(venv)]


def _readme_shell_block(heading: str) -> str:
    """The first ```bash block under `## heading` in the README, as written."""
    section = (ROOT / "README.md").read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@slow_venv
def test_a_newcomer_runs_the_quick_start_and_run_many_blocks_in_a_fresh_venv(default_venv: _Venv) -> None:
    """The README's shell blocks as a stranger runs them: the Quick start's
    install-and-demo line from the clone, then every line of "Run many" in a
    scratch folder, in a fresh virtual environment with nothing else in it
    (the default install's: the same install); and the CLI's help pages
    print without a traceback."""
    venv, env, tmp_path = default_venv.path, default_venv.env, default_venv.root
    quick_start = _readme_shell_block("Quick start").splitlines()[0].split("#", 1)[0].strip()
    assert quick_start == "pip install -e . && rollkit demo"
    demo = _run(["bash", "-c", f"set -euo pipefail\n{quick_start}"], cwd=ROOT, env=env)
    assert "rollouts: 24 over 12 tasks" in demo.stdout, demo.stdout[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    run_many = _readme_shell_block("Run many")
    assert "rollkit eval" in run_many and "--resume" in run_many
    done = _run(["bash", "-c", f"set -euo pipefail\n{run_many}"], cwd=work, env=env)
    # The example set's tasks, three rollouts each, written once: the resume ran nothing again.
    from rollkit.examples import arithmetic_tasks

    lines = (work / "runs" / "arith" / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 3 * len(arithmetic_tasks()), done.stdout[-2000:]
    for command in (["rollkit", "--help"], ["rollkit", "demo", "--help"], ["rollkit", "view", "--help"]):
        shown = _run([str(venv / "bin" / command[0]), *command[1:]], cwd=work, env=env)
        assert "Usage:" in shown.stdout and "Traceback" not in shown.stdout + shown.stderr, shown.stderr
