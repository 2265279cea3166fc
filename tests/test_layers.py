"""The architecture is the folder layout, and the imports obey it.

rollkit is layered: core < programs < runs < notebook < examples, with the
package face (`rollkit/__init__.py`, `rollkit/__main__.py`) over them all.
These tests read the source with `ast` (nothing is imported) and fail on:

- an import from a lower layer to a higher one, wherever it stands: at the
  top of a module, inside a function (a lazy import), under
  `if TYPE_CHECKING:`, or as a string naming a module that exists
  (`importlib.import_module("rollkit.x")`, a lazy-name table's
  `"..notebook.plots"`); the failure names the file and line;
- an import cycle between modules, lazy imports included. Imports under
  `if TYPE_CHECKING:` never run, so they are not edges of the cycle check
  (they are still held to the layering above);
- an import circle inside a package, type-only (`if TYPE_CHECKING:`) and
  lazy imports included: a circle makes its modules one unit that cannot be
  read bottom-up. None is allowed; `python tests/test_layers.py` lists
  any found, with the file and line of each import;
- a package or module without the docstring that says what it owns, a
  sub-package without `__all__`, and a function of the core longer than 60
  lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "rollkit"
LAYERS = ("core", "programs", "tables", "analysis", "interop", "runs", "notebook", "examples")
FACE = len(LAYERS)  # rollkit/__init__.py, rollkit/__main__.py and the command line, rollkit/cli.py


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return FACE


def _exists(module: str) -> bool:
    base = ROOT.parent.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Every rollkit module one file imports: (line, module, runs at run time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.module = _module_name(path)
        self.package = self.module if path.name == "__init__.py" else self.module.rpartition(".")[0]
        self.found: list[tuple[int, str, bool]] = []
        self._type_checking = 0

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, line: int, module: str) -> None:
        if module == "rollkit" or module.startswith("rollkit."):
            self.found.append((line, module, self._type_checking == 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        for alias in node.names:
            # `from . import interception` imports a module, not a name.
            sub = f"{module}.{alias.name}"
            self._add(node.lineno, sub if _exists(sub) else module)

    def visit_Constant(self, node: ast.Constant) -> None:
        # A module named in a string is imported by whoever reads the string
        # (import_module, a package's table of lazy names).
        value = node.value
        if not isinstance(value, str) or not value or any(c.isspace() for c in value):
            return
        # Only a dotted name can be a module: the head of an f-string
        # (f"rollkit.{key}", an attribute name built) is not the package.
        dotted = all(part.isidentifier() for part in value.split("."))
        if value.startswith("rollkit.") and dotted and _exists(value):
            self._add(node.lineno, value)
        elif value.startswith(".") and value.lstrip(".").replace(".", "").isidentifier():
            level = len(value) - len(value.lstrip("."))
            base = self.package.split(".")
            module = ".".join([*base[: len(base) - (level - 1)], value.lstrip(".")])
            if _exists(module):
                self._add(node.lineno, module)


def _all_imports() -> dict[Path, _Imports]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        visitor = _Imports(path)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        out[path] = visitor
    return out


def test_imports_point_down_only() -> None:
    wrong = []
    for path, imports in _all_imports().items():
        own = _layer(imports.module)
        for line, module, _ in imports.found:
            if _layer(module) > own:
                where = path.relative_to(ROOT.parent)
                wrong.append(f"{where}:{line} imports {module} ({_layer_name(module)}) from the {_layer_name(imports.module)} layer")
    assert wrong == [], "imports must point down (core < programs < runs < notebook < examples):\n" + "\n".join(wrong)


def _layer_name(module: str) -> str:
    layer = _layer(module)
    return LAYERS[layer] if layer < FACE else "package face"


def test_no_import_cycles_lazy_imports_included() -> None:
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], str] = {}
    for path, imports in _all_imports().items():
        edges = graph.setdefault(imports.module, set())
        for line, module, at_run_time in imports.found:
            if at_run_time and module != imports.module:
                edges.add(module)
                lines.setdefault((imports.module, module), f"{path.relative_to(ROOT.parent)}:{line}")
    cycles = _cycles(graph)
    described = [" -> ".join(cycle) + "  (" + ", ".join(lines[(a, b)] for a, b in zip(cycle, cycle[1:])) + ")"
                 for cycle in cycles]
    assert described == [], "import cycles:\n" + "\n".join(described)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected part that has one (depth-first)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _package_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """Edges between modules of one package, type-only and lazy ones included."""
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], str] = {}
    for path, imports in _all_imports().items():
        if path.name == "__init__.py":
            continue  # a package face re-exports its modules: not part of any circle
        package = imports.module.rpartition(".")[0]
        for line, module, at_run_time in imports.found:
            if module != imports.module and module.rpartition(".")[0] == package:
                graph.setdefault(imports.module, set()).add(module)
                kind = "" if at_run_time else " (type-only)"
                lines.setdefault((imports.module, module), f"{path.relative_to(ROOT.parent)}:{line}{kind}")
    return graph, lines


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe_circles() -> list[str]:
    """Each circle: its modules, then every import between them (file:line)."""
    graph, lines = _package_graph()
    out = []
    for part in sorted(_circles(graph), key=sorted):
        out.append(f"circle of {len(part)}: " + ", ".join(sorted(part)))
        out += [f"    {a} -> {b}  {lines[(a, b)]}" for a in sorted(part) for b in sorted(graph[a] & part)]
    return out


def test_no_import_circle_inside_a_package_type_only_included() -> None:
    graph, _ = _package_graph()
    assert _circles(graph) == [], (
        "import circles inside a package (python tests/test_layers.py lists them):\n" + "\n".join(describe_circles())
    )


def test_the_notebook_widgets_ask_the_facade_never_the_core() -> None:
    """The panel and the agent's seat type against the facade's protocol
    (rollkit.notebook._view) and import nothing of the core, type-only
    imports included: what can run now is the facade's to say."""
    reach = []
    for path, imports in _all_imports().items():
        if imports.module in ("rollkit.notebook.panel", "rollkit.notebook.seat"):
            reach += [f"{path.relative_to(ROOT.parent)}:{line} imports {module}"
                      for line, module, _ in imports.found
                      if module.startswith("rollkit.core") or module == "rollkit.notebook.stepping"]
    assert reach == [], "widgets must ask the facade (rollkit.notebook._view), not the core:\n" + "\n".join(reach)


def test_the_checks_above_can_fail() -> None:
    """The walkers find what they look for: a lazy upward import, a
    TYPE_CHECKING one, an import_module string, and a two-module cycle."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n    from ..notebook.plots import rollouts\n"
        "def f():\n    from ..runs import evaluation\n    importlib.import_module('rollkit.examples')\n"
        "_LAZY = {'rollouts': ('..notebook.plots', 'rollouts'), 'key': ('rollkit.program', None)}\n"
    )
    imports = _Imports(ROOT / "core" / "example.py")
    imports.visit(ast.parse(source))
    assert [(line, module, run) for line, module, run in imports.found] == [
        (4, "rollkit.notebook.plots", False),
        (6, "rollkit.runs.evaluation", True),
        (7, "rollkit.examples", True),
        (8, "rollkit.notebook.plots", True),  # 'rollkit.program' is no module: a plain string
    ]
    assert all(_layer(module) > _layer(imports.module) for _, module, _ in imports.found)
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]
    # a type-only import closes a circle too
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_every_module_opens_with_a_docstring_and_every_layer_lists_its_names() -> None:
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree)
        where = str(path.relative_to(ROOT.parent))
        if not doc:
            missing.append(f"{where}: no module docstring")
            continue
        if path.name == "__init__.py" and path.parent != ROOT:
            if "owns" not in doc or "import" not in doc:
                missing.append(f"{where}: the docstring must say what the layer owns and what it must not import")
            if not any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
                       for n in tree.body):
                missing.append(f"{where}: no __all__")
    assert missing == []


def test_no_function_is_longer_than_60_lines() -> None:
    """In every layer: a longer one is split into parts with names."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if length > 60:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} is {length} lines")
    assert long == [], "split these into functions with names:\n" + "\n".join(long)


def _type_name_checks(source: str) -> list[int]:
    """Lines comparing a class's name (`type(x).__name__ == "C"`,
    `x.__class__.__name__`) instead of asking isinstance."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr == "__name__" and (
                        isinstance(side.value, ast.Call) and getattr(side.value.func, "id", None) == "type"
                        or isinstance(side.value, ast.Attribute) and side.value.attr == "__class__"):
                    lines.append(node.lineno)
    return lines


def test_no_type_is_told_by_its_name() -> None:
    """A class checked by name passes for any class of that name and breaks
    silently on a rename; the import it avoids points down anyway."""
    assert _type_name_checks('if type(run).__name__ == "LazyRun": pass') == [1]  # the check can fail
    found = [f"{path.relative_to(ROOT.parent)}:{line}" for path in sorted(ROOT.rglob("*.py"))
             for line in _type_name_checks(path.read_text())]
    assert found == [], "use isinstance:\n" + "\n".join(found)


# The layout and the core's module map live on the docs site's architecture page.
ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def test_the_layout_is_the_documented_layout() -> None:
    """The architecture page's Layout section lists exactly the sub-packages there are."""
    section = ARCHITECTURE.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = {line.split()[0].rstrip("/") for line in section.splitlines() if line.startswith("rollkit/")}
    packages = {f"rollkit/{p.parent.name}" for p in ROOT.glob("*/__init__.py")}
    assert listed == packages


def test_the_docs_list_every_core_module_bottom_up() -> None:
    """The architecture page's core map names each core module once, and
    none imports (type-only imports included) a module listed after it."""
    section = ARCHITECTURE.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("- `")]
    modules = sorted(p.stem for p in (ROOT / "core").glob("*.py") if p.name != "__init__.py")
    assert sorted(listed) == modules
    graph, lines = _package_graph()
    later = [f"{a} imports {b}, listed after it ({lines[(f'rollkit.core.{a}', f'rollkit.core.{b}')]})"
             for i, a in enumerate(listed) for b in listed[i + 1:] if f"rollkit.core.{b}" in graph.get(f"rollkit.core.{a}", ())]
    assert later == []


if __name__ == "__main__":
    print("\n".join(describe_circles()) or "no import circle inside any package")


def _private_names_imported(path: Path, source: str) -> list[str]:
    """`from X import _name` in `path`, where `_name` is a private name of
    module X or a private module of package X, `from X._module import ...`
    outside the package `_module` belongs to, and `import ... as _alias`:
    a private module another package reads is public in its package, and a
    local alias needs no underscore to stay out of `__all__`."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        outside = _private_module_outside(module, package)
        if outside:
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {module} (private to {outside})")
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private or (alias.asname or "").startswith("_"):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {module}.{alias.name}"
                             + (f" as {alias.asname}" if alias.asname else ""))
    return found


def _private_module_outside(module: str, package: str) -> str | None:
    """The package a private module in `module`'s path belongs to, when the
    importing `package` is not inside it (a `_module` is its package's
    own: its siblings may read it, nobody else), else None. rollkit's own
    modules only: another library's private modules are its business."""
    parts = module.split(".") if module.startswith("rollkit.") else []
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:i])
            return None if package == owner or package.startswith(owner + ".") else owner
    return None


def test_no_private_name_is_imported_across_modules() -> None:
    """What another module needs is public in its module (a `_name` stays in its module)."""
    found = [hit for path in sorted(ROOT.rglob("*.py")) for hit in _private_names_imported(path, path.read_text())]
    assert found == [], "make these public in their module:\n" + "\n".join(found)


def test_the_private_name_check_can_fail() -> None:
    path = ROOT / "tables" / "columns.py"
    old = ("from .rows import TABLES, _Rows\nfrom ..core.store import _sniff\nfrom . import rows\n"
           "from ..notebook import _loop\nfrom ..analysis.compare import compare as _compare\n")
    outside = "from ..core._gcpause import paused\nfrom ._census_tables import TABLES\n"
    assert _private_names_imported(path, outside) == [
        "rollkit/tables/columns.py:1 rollkit.core._gcpause (private to rollkit.core)"]
    assert _private_names_imported(path, old) == ["rollkit/tables/columns.py:1 rollkit.tables.rows._Rows",
                                                  "rollkit/tables/columns.py:2 rollkit.core.store._sniff",
                                                  "rollkit/tables/columns.py:4 rollkit.notebook._loop",
                                                  "rollkit/tables/columns.py:5 rollkit.analysis.compare.compare as _compare"]
