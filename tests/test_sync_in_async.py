"""A batch's sync name is never called inside an async function.

`rk.evaluate`, `rk.ab_test`, `rk.turn_values` and `rk.turn_values_many` run
a batch to its end on a loop of their own; inside a running event loop (an
async function, a notebook cell) they refuse, naming the async spelling to
await. A call like that in our own code or benchmarks is a bug that only
shows when that code runs (benchmarks/notebook.py had three). This scan
reads every module of the package, the tests and the benchmarks with `ast`
and fails on such a call, unless it stands in a `pytest.raises` block: a
test of the refusal itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNC_BATCHES = {"evaluate", "ab_test", "turn_values", "turn_values_many"}


def _is_sync_batch(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in SYNC_BATCHES
    return (isinstance(func, ast.Attribute) and func.attr in SYNC_BATCHES
            and isinstance(func.value, ast.Name) and func.value.id in ("rk", "rollkit"))


def _expects_refusal(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        call = item.context_expr
        if isinstance(call, ast.Call):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name == "raises":
                return True
    return False


def _sync_calls_in(body: list[ast.stmt]) -> list[ast.Call]:
    """The sync batch calls that run in this async function's own frame
    (a nested function runs when it is called, maybe in a thread: not here)."""
    found: list[ast.Call] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)) and _expects_refusal(node):
            continue
        if isinstance(node, ast.Call) and _is_sync_batch(node):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _offenders(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AsyncFunctionDef):
            found += [f"{name}:{call.lineno} in async def {node.name}: {ast.unparse(call.func)}(...) "
                      f"refuses where a loop runs; await its _async form" for call in _sync_calls_in(node.body)]
    return found


def test_no_sync_batch_call_inside_an_async_function() -> None:
    files = [*(ROOT / "rollkit").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    assert len(files) > 100
    offenders = [line for path in files
                 for line in _offenders(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert offenders == []


def test_the_scan_can_fail() -> None:
    source = '''
async def measure():
    result = rk.evaluate(agent, tasks)          # refused at run time: flagged
    with pytest.raises(rk.UsageError):
        rk.ab_test(a, b, tasks)                 # the refusal's own test: fine
    def in_a_thread():
        return evaluate(agent, tasks)           # runs where it is called: not here
    return await rk.evaluate_async(agent, tasks), turn_values(trace)
'''
    assert sorted(_offenders(source, "x.py")) == [
        "x.py:3 in async def measure: rk.evaluate(...) refuses where a loop runs; await its _async form",
        "x.py:8 in async def measure: turn_values(...) refuses where a loop runs; await its _async form",
    ]
