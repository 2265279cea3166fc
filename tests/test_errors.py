"""Errors name the boundary that broke (L31); one rollout's failure is data,
never a crash of its siblings (L32); bad input gets a clear, early error."""

from __future__ import annotations

import asyncio
import re

import pytest
from conftest import prompt_task

import rollkit as rk


class _FailingStart(rk.LocalRuntime):
    async def _start(self):
        raise OSError("disk full")


class _FailingTools(rk.Toolset):
    async def start(self, ctx):
        raise ConnectionRefusedError("port 7000 refused")


class _RaisingHarness(rk.Harness):
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def segment(self, ctx, messages):
        raise self.exc


class _WithTools(rk.Task):
    toolsets = [_FailingTools(name="search")]


@pytest.mark.parametrize(
    ("agent_kwargs", "task", "error_type", "message"),
    [
        ({}, rk.Task(), "TaskError", "has no prompt and no user"),
        ({"harness": _RaisingHarness(ValueError("bad state"))}, prompt_task(), "HarnessError",
         "harness 'harness': ValueError: bad state"),
        ({"model": rk.ScriptedModel([])}, prompt_task(), "ProviderError",
         "ScriptedModel 'scripted' has no reply #1 (it was given 0)"),
        ({"runtime": _FailingStart}, prompt_task(), "SandboxError", "local runtime start: OSError: disk full"),
        ({}, _WithTools(prompt="x"), "ToolsetError",
         "toolset 'search' start: ConnectionRefusedError: port 7000 refused"),
    ],
)
async def test_L31_each_failure_is_typed_by_its_boundary(agent_kwargs, task, error_type, message):
    trace = await rk.Agent(**agent_kwargs).run(task)
    assert trace.error.type == error_type
    assert message in trace.error.message
    assert trace.ok is False


async def test_L31_typed_errors_pass_through_unchanged():
    harness = _RaisingHarness(rk.ProviderError("upstream said no", status=429))
    trace = await rk.Agent(harness=harness).run(prompt_task())
    assert (trace.error.type, trace.error.status, trace.error.message) == ("ProviderError", 429, "upstream said no")


async def test_L32_one_bad_rollout_does_not_cancel_its_siblings():
    def model(request):
        if "boom" in request.messages[-1].content:
            raise RuntimeError("exploded")
        return "fine"

    agent = rk.Agent(model=rk.ScriptedModel(model, delay=0.01))
    tasks = [prompt_task(p) for p in ["a", "boom", "c", "d"]]
    traces = await asyncio.gather(*(agent.run(t) for t in tasks))
    assert [t.ok for t in traces] == [True, False, True, True]
    assert traces[1].error.type == "ProviderError"
    assert [t.last_reply for t in traces] == ["fine", "", "fine", "fine"]


_WHOLE, _DOLLARS = "a whole number >= 0", "a number of dollars >= 0"


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [("max_turns", -1, _WHOLE), ("max_total_tokens", 2.5, _WHOLE), ("max_input_tokens", "10", _WHOLE),
     ("max_output_tokens", True, _WHOLE),
     *(("max_cost_usd", value, _DOLLARS) for value in (-1, "1", True, float("nan"), float("inf")))],
)
def test_bad_limit_is_refused_naming_the_field(field, value, wanted):
    with pytest.raises(ValueError) as caught:
        rk.RolloutLimits(**{field: value})
    assert f"{field} must be {wanted}, or None for no limit; got {value!r}" in str(caught.value)


def test_bad_timeout_is_refused():
    with pytest.raises(ValueError, match="timeout agent must be a number of seconds > 0, or None; got -5"):
        rk.RolloutTimeouts(agent=-5)


def test_unknown_model_name_lists_what_exists():
    with pytest.raises(ValueError) as caught:
        rk.Agent(model="gpt-9")
    message = str(caught.value)
    assert message.startswith("unknown model name 'gpt-9': use 'echo' (repeats the user's last message), ")
    assert "'openai/<model>' (an OpenAI-compatible endpoint read from OPENAI_BASE_URL and OPENAI_API_KEY)" in message
    assert "'toy-calculator' (the example set's toy" in message
    assert message.endswith("or pass a Model such as rk.ScriptedModel([...])")


def test_a_registered_model_name_and_prefix_resolve_and_bad_registrations_are_refused():
    from rollkit.core.models import _registry

    rk.register_model("mine", lambda name: rk.ScriptedModel(["hi"], name=name))
    rk.register_model("local/", lambda rest: rk.ScriptedModel(["hi"], name=f"local:{rest}"))
    try:
        assert rk.Agent(model="mine").model.name == "mine"
        assert rk.Agent(model="local/qwen").model.name == "local:qwen"
        with pytest.raises(ValueError, match="unknown model name 'local/'"):
            rk.Agent(model="local/")  # a prefix needs a name after it
    finally:
        _registry.pop("mine")
        _registry.pop("local/")
    with pytest.raises(ValueError, match="a model name is a non-empty string without surrounding spaces, got ' x'"):
        rk.register_model(" x", lambda name: None)
    with pytest.raises(TypeError, match=r"register_model\('x', ...\) needs a function of the name, got str"):
        rk.register_model("x", "not a function")


def test_task_needs_task_data():
    with pytest.raises(TypeError, match="a Task needs a TaskData, got str"):
        rk.Task("what is 2+2?")


def test_step_message_of_wrong_type_is_named():
    from rollkit.core.messages import to_messages

    with pytest.raises(TypeError, match="cannot use int as a message"):
        to_messages([3])


async def test_unknown_tool_and_bad_arguments_go_back_to_the_model():
    class Calc(rk.Task):
        @rk.tool
        def add(self, a: int, b: int) -> int:
            """Add two integers."""
            return a + b

    script = [
        rk.ScriptedModel.call("multiply", a=2, b=3),
        rk.ScriptedModel.call("add", a="two", b=3),
        rk.ScriptedModel.call("add", a=2, b=3),
        "done",
    ]
    trace = await rk.Agent(model=rk.ScriptedModel(script)).run(Calc(prompt="go"))
    results = [m.content for m in trace.messages if m.role == "tool"]
    assert results[0] == "error: there is no tool named 'multiply'; available tools: add"
    assert results[1].startswith("error: invalid arguments for tool 'add': a: Input should be a valid integer")
    assert results[2] == "5"
    assert trace.ok is True and trace.metrics["tool_call_success_rate"] == pytest.approx(1 / 3)


async def test_tool_that_raises_reports_to_the_model():
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    class Div(rk.Task):
        toolsets = [rk.Toolset([divide], name="math")]

    script = [rk.ScriptedModel.call("divide", a=1, b=0), "sorry"]
    trace = await rk.Agent(model=rk.ScriptedModel(script)).run(Div(prompt="1/0?"))
    assert trace.messages[-2].content == "error: tool 'divide' raised ZeroDivisionError: float division by zero"
    assert trace.ok is True


def test_two_tools_with_one_name_are_refused():
    def add(a: int) -> int:
        return a

    with pytest.raises(ValueError, match="toolset 'dup' has two tools named 'add'"):
        rk.Toolset([add, add], name="dup")


async def test_interaction_turn_after_the_end_says_why():
    agent = rk.Agent(model="echo", limits=rk.RolloutLimits(max_turns=1))
    async with agent.interaction(rk.Task()) as it:
        assert await it.turn("hi") == "You said: hi"
        await it.turn("again")
        with pytest.raises(rk.RolloutEnded, match=r"the interaction has ended \(max_turns\)"):
            await it.turn("still there?")
    assert rk.RolloutEnded is rk.notebook.RolloutEnded
    assert rk.core.trace.ErrorInfo is rk.core.errors.ErrorInfo


# Exceptions that never reach a caller: raised and caught inside rollkit.
_INTERNAL = {
    "rollkit.core.safe_read.TooDeep": "read as a TraceFileError naming the file before it leaves safe_read",
    "rollkit.core.cancellation.Overrun": "a deadline's signal inside the rollout; recorded as the boundary's error",
    "rollkit.programs.dialects._base.WireError": "answered to the program as an HTTP 400 in its own dialect",
    "rollkit.programs.sandbox_proxy.ProxyRefusal": "answered to the sandboxed program in HTTP; never leaves the proxy",
    "rollkit.tables.nativebuild.NativeUnfit": "a part the native build cannot make: the Python build makes it instead",
}


_OPTIONAL_FRAMEWORKS = {"inspect_ai", "verifiers", "reasoning_gym"}


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every public exception class defined in the package (scripts that
    run as programs, `_*` modules of the harnesses, are not imported)."""
    import importlib
    import pkgutil

    found = {}
    for info in pkgutil.walk_packages(rk.__path__, "rollkit."):
        leaf = info.name.rsplit(".", 1)[-1]
        if info.name.startswith("rollkit.programs.harnesses._") or leaf in ("_watchdog_main", "_sandbox_init", "__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as missing:
            # A module that extends an optional framework (inspect's sandbox) imports it at
            # the top; the whole suite, which has every extra, reads it. Nothing else may be missing.
            if (missing.name or "").split(".")[0] in _OPTIONAL_FRAMEWORKS:
                continue
            raise
        for name, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name
                    and not name.startswith("_")):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_error_rollkit_raises_is_a_rollkit_error_and_stands_in_the_tree():
    """One family: `except rk.RollkitError` catches whatever rollkit raises
    on purpose, and core/errors.py draws each class, so a reader learns the
    error model from one file."""
    from rollkit.core import errors

    classes = _exception_classes()
    assert len(classes) >= 20, sorted(classes)
    outside = sorted(name for name, cls in classes.items()
                     if not issubclass(cls, rk.RollkitError) and name not in _INTERNAL)
    assert outside == [], f"not in the RollkitError family: {outside}"
    tree = errors.__doc__.split("Four mechanisms", 1)[0]
    drawn = set(re.findall(r"[├└]── (\w+)", tree)) | {tree.split()[tree.split().index("RollkitError")]}
    undrawn = sorted(name for name, cls in classes.items() if issubclass(cls, rk.RollkitError) and cls.__name__ not in drawn)
    assert undrawn == [], f"missing from the tree in core/errors.py: {undrawn}"


def test_usage_errors_keep_their_old_bases_so_except_clauses_still_catch_them():
    from rollkit.runs.ab import ABTestError
    from rollkit.analysis.compare import CompareError
    from rollkit.tables.runfolder import RunFolderError

    for cls in (rk.ForkError, CompareError, ABTestError, RunFolderError):
        assert issubclass(cls, rk.UsageError) and issubclass(cls, ValueError), cls
    for cls in (rk.RolloutBusy, rk.RolloutEnded, rk.LifetimeError):
        assert issubclass(cls, rk.UsageError) and issubclass(cls, RuntimeError), cls
    assert issubclass(rk.TaskError, rk.RolloutError) and not issubclass(rk.TaskError, rk.UsageError)
    assert issubclass(rk.TraceFileError, rk.RollkitError) and issubclass(rk.TraceFileError, ValueError)


def test_L31_a_descriptor_shortage_is_rollkits_resource_error_wherever_it_shows():
    """EMFILE is the whole process's shortage (a program flooding a server
    holds the descriptors), so whichever boundary's code hits it is not
    blamed: `crossing` makes it a ResourceError, also behind a cause."""
    import errno as codes

    from rollkit.core.errors import crossing

    for boundary in (rk.TaskError, rk.HarnessError, rk.SandboxError, rk.ToolsetError):
        with pytest.raises(rk.ResourceError) as caught, crossing(boundary, "somewhere"):
            try:
                raise OSError(codes.EMFILE, "Too many open files")
            except OSError as exc:
                raise RuntimeError("could not start") from exc
        assert caught.value.boundary == "rollkit" and str(caught.value).startswith(
            "somewhere: rollkit's process ran out of file descriptors (RuntimeError: could not start); not this "
            "rollout's fault: run fewer rollouts at once, cap what their programs may open, or raise the limit")
    # Typed behind the boundary from the shortage (a harness that could not start its program): the same.
    with pytest.raises(rk.ResourceError, match="^harness 'program': rollkit's process ran out of file descriptors "
                       r"\(HarnessError: ProgramHarness cannot run 'x'"), crossing(rk.HarnessError, "harness 'program'"):
        try:
            raise OSError(codes.EMFILE, "Too many open files")
        except OSError as exc:
            raise rk.HarnessError("ProgramHarness cannot run 'x'") from exc
    with pytest.raises(rk.TaskError), crossing(rk.TaskError, "task.setup"):
        raise OSError(codes.ENOENT, "No such file")  # other OS errors stay the boundary's
    with pytest.raises(rk.HarnessError, match="^not started$"), crossing(rk.TaskError, "task.setup"):
        raise rk.HarnessError("not started")  # a typed error not caused by a shortage passes unchanged


_SHORT_OF_DESCRIPTORS = """
import asyncio, json, os, resource
import rollkit as rk
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

class Setup(rk.Task):
    async def setup(self, ctx):
        open(os.devnull).close()  # any file: there is none left in the process

async def main():
    agent = rk.Agent(model=rk.ScriptedModel(["x"]))
    held = []
    try:
        while True:  # what a flood would hold
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    trace = await agent.run(Setup(prompt="hi"))
    for fd in held:
        os.close(fd)
    print(json.dumps([[e.type, e.boundary, e.phase, e.message] for e in trace.errors]))

asyncio.run(main())
"""


def test_L31_a_rollout_hit_by_a_descriptor_shortage_records_a_resource_error():
    """In a process with no descriptor left, a rollout whose setup opens a
    file records rollkit's ResourceError (it was a TaskError blaming the task)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SHORT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    [[kind, boundary, phase, message]] = json.loads(done.stdout.splitlines()[-1])
    assert (kind, boundary, phase) == ("ResourceError", "rollkit", "setup")
    assert message.startswith("task.setup: rollkit's process ran out of file descriptors (OSError: [Errno 24]")
