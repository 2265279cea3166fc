"""rk.evaluate: many rollouts at once, ids on every trace, failures as data
(L32), cancellation, progress, group scorers (after the runtimes are gone,
L21), DataFrames, and the bad input it refuses."""

from __future__ import annotations

import re
import warnings

import asyncio
import json
import subprocess
import sys

import pytest
from helpers.evaluate_helpers import BadHook, BrokenSetup, Said, said_agent, said_tasks

import rollkit as rk
from rollkit.runs.evaluation import (
    EvalResult,
    EvaluateArgumentError,
    RunFolderError,
    best_of_n,
    evaluate_async,
    load_run,
    pass_at_k,
)


def test_every_trace_carries_example_id_and_rollout_id():
    result = rk.evaluate(said_agent(), said_tasks(3), repeats=2, progress=False)
    assert isinstance(result, EvalResult)
    ids = sorted((t.info["example_id"], t.info["repeat"], t.info["rollout_id"]) for t in result.traces)
    assert ids == [(f"said-{i}", r, f"said-{i}#{r}") for i in range(3) for r in range(2)]
    assert all(t.info["example_id"] == t.task.key for t in result.traces)
    assert len({t.info["run_id"] for t in result.traces}) == 1
    # Deterministic rewards: the model is right on even numbers only.
    rewards = {t.info["rollout_id"]: t.reward for t in result.traces}
    assert rewards == {f"said-{i}#{r}": float(i % 2 == 0) for i in range(3) for r in range(2)}


def test_concurrency_bounds_rollouts_in_flight():
    in_flight = 0
    peak = 0

    async def slow_enough(request: rk.Request) -> str:
        # Yield to the loop a few times so every worker gets a rollout open.
        for _ in range(3):
            await asyncio.sleep(0)
        return "number 0"

    agent = rk.Agent(model=rk.ScriptedModel(slow_enough))

    def count(event: rk.Event) -> None:
        nonlocal in_flight, peak
        if event.kind == "phase_start" and event.data["phase"] == "boot":
            in_flight += 1
            peak = max(peak, in_flight)
        elif event.kind == "closed":
            in_flight -= 1

    agent.subscribe(count)
    result = rk.evaluate(agent, said_tasks(10), concurrency=3, progress=False)
    assert len(result) == 10
    assert peak == 3
    assert in_flight == 0


class ExplodingHarness(rk.ChatHarness):
    """Raises something the core does not expect from a harness segment."""

    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        if "3" in messages[-1].content:
            raise rk.LifetimeError("the runtime's owner went away")
        await super().segment(ctx, messages)


def test_L32_unexpected_exception_in_one_rollout_is_data_not_a_crash_of_siblings():
    tasks = [
        *said_tasks(5),
        BadHook(id="bad-hook", prompt="say 10"),
        BrokenSetup(id="broken-setup", prompt="say 12"),
    ]
    agent = said_agent(harness=ExplodingHarness())
    result = rk.evaluate(agent, tasks, concurrency=4, progress=False)
    by_key = {t.task.key: t for t in result.traces}
    assert sorted(by_key) == sorted(t.key for t in tasks)
    # Built badly: no rollout could exist, still a trace with the error.
    assert by_key["bad-hook"].error.type == "TypeError"
    assert "two_boundaries" in by_key["bad-hook"].error.message
    assert by_key["bad-hook"].ok is False
    # Failed in task code: the core's typed record (L31).
    assert by_key["broken-setup"].error.type == "TaskError"
    assert "disk on fire" in by_key["broken-setup"].error.message
    # Escaped the core entirely (a lifetime error): recorded by evaluate.
    assert by_key["said-3"].error.type == "LifetimeError"
    assert by_key["said-3"].ok is False and by_key["said-3"].completed is True
    # The siblings ran and were scored as usual.
    for key in ("said-0", "said-1", "said-2", "said-4"):
        assert by_key[key].ok is True
        assert by_key[key].reward == float(int(key[-1]) % 2 == 0)


async def test_evaluate_async_is_the_spelling_to_await():
    pending = rk.evaluate_async(said_agent(), said_tasks(2), progress=False)
    assert repr(pending) == "<rollkit evaluation, not started: await it: result = await rk.evaluate_async(...)>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        result = await pending
    assert sorted(t.info["rollout_id"] for t in result.traces) == ["said-0#0", "said-1#0"]
    # A coroutine: asyncio's own tools take it as it is.
    again = await asyncio.create_task(evaluate_async(said_agent(), said_tasks(2), progress=False))
    assert [t.reward for t in again.traces] == [t.reward for t in result.traces]


async def test_rk_evaluate_in_a_running_loop_is_refused_naming_evaluate_async(tmp_path):
    """The sync name runs to the end; where a loop runs (a notebook cell)
    that would block it forever, so it says what to write, and starts
    nothing (no run folder)."""
    with pytest.raises(rk.UsageError, match=re.escape(
            "rk.evaluate(...) runs to the end, and an event loop already runs here (a notebook cell, async code) "
            "that it would block: write `result = await rk.evaluate_async(...)`")):
        rk.evaluate(said_agent(), said_tasks(2), progress=False, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


async def test_cancellation_stops_new_work_aborts_in_flight_and_keeps_finished(tmp_path):
    blocked = 0
    all_blocked = asyncio.Event()

    async def gated(request: rk.Request) -> str:
        nonlocal blocked
        n = int(request.messages[-1].content.split()[-1])
        if n % 3 == 2:
            blocked += 1
            if blocked == 4:
                all_blocked.set()
            await asyncio.Event().wait()
        return f"number {n}"

    agent = rk.Agent(model=rk.ScriptedModel(gated))
    aborted = []
    started = []
    agent.subscribe(lambda e: aborted.append(e.rollout_id) if e.kind == "closed" and e.data.get("aborted") else None)
    agent.subscribe(lambda e: started.append(e.rollout_id) if e.kind == "phase_start" and e.data["phase"] == "boot" else None)
    run = asyncio.ensure_future(evaluate_async(agent, said_tasks(9), repeats=2, concurrency=4, out=tmp_path, progress=False))
    await all_blocked.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # Tasks 2 and 5 (two repeats each) were in flight and are aborted; the
    # 8 rollouts before them finished and are on disk; task 6 on never started.
    assert len(aborted) == 4
    assert len(started) == 12
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["info"]["rollout_id"] for line in lines) == sorted(
        f"said-{i}#{r}" for i in (0, 1, 3, 4) for r in range(2)
    )
    assert all(json.loads(line)["aborted"] is False for line in lines)


def test_progress_bar_shows_done_failed_stopped_and_mean_reward(capsys):
    tasks = [*said_tasks(4), BrokenSetup(id="broken", prompt="say 2")]
    rk.evaluate(said_agent(limits=rk.RolloutLimits(max_turns=0)), said_tasks(1, prefix="limited"), progress=True)
    first = capsys.readouterr().err
    assert "stopped=1" in first and "1/1" in first
    rk.evaluate(said_agent(), tasks, progress=True)
    err = capsys.readouterr().err
    final = err.replace("\r", "\n").strip().splitlines()[-1]
    assert "5/5" in final
    # 2 of the 4 scored rollouts said their number; the broken one failed.
    assert "failed=1" in final and "stopped=0" in final and "reward=0.500" in final


def test_progress_false_prints_nothing(capsys):
    rk.evaluate(said_agent(), said_tasks(2), progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_L21_group_scorers_judge_all_repeats_of_a_task_after_they_closed():
    seen = {}

    def inspect_group(traces: list[rk.Trace]) -> float:
        key = traces[0].info["example_id"]
        # Every repeat is there, closed, its runtime already torn down (L21).
        seen[key] = [(t.info["repeat"], t.completed, "agent" in t.phases) for t in traces]
        return float(len(traces))

    def broken(traces: list[rk.Trace]) -> float:
        raise ZeroDivisionError("no")

    result = rk.evaluate(
        said_agent(), said_tasks(4), repeats=3, progress=False,
        group_scorers=[pass_at_k(1), pass_at_k(2), best_of_n(), inspect_group, broken],
    )
    assert seen == {f"said-{i}": [(0, True, True), (1, True, True), (2, True, True)] for i in range(4)}
    values = {(g.example_id, g.signal): g.value for g in result.groups}
    for i in range(4):
        expected = float(i % 2 == 0)
        assert values[(f"said-{i}", "pass@1")] == expected
        assert values[(f"said-{i}", "pass@2")] == expected
        assert values[(f"said-{i}", "best_of_n")] == expected
        assert values[(f"said-{i}", "inspect_group")] == 3.0
        assert values[(f"said-{i}", "broken")] is None
    errors = {g.error for g in result.groups if g.signal == "broken"}
    assert errors == {"ZeroDivisionError: no"}
    frame = result.group_signals()
    assert list(frame.columns) == ["example_id", "signal", "value", "n", "error"]
    assert len(frame) == 4 * 5
    assert "pass@1" in result.summary()


def _scored_traces(rewards: list[float | None]) -> list[rk.Trace]:
    """Traces as a closed rollout leaves them: scored with these rewards;
    None stands for a rollout that failed before scoring."""
    out = []
    for r in rewards:
        t = rk.Trace(task={"type": "T", "key": "k"})
        if r is None:
            t.errors.append(rk.core.trace.ErrorInfo(type="TaskError", boundary="task", message="broke", phase="setup"))
        else:
            t.phases["scoring"] = rk.core.trace.Span(name="scoring", start=0.0, end=1.0)
            t.rewards["x"] = r
        out.append(t)
    return out


def test_pass_at_k_estimator_values():
    traces = _scored_traces
    assert pass_at_k(1)(traces([1, 0, 0, 0])) == pytest.approx(0.25)
    assert pass_at_k(2)(traces([1, 0, 0, 0])) == pytest.approx(0.5)
    assert pass_at_k(5)(traces([1, 0, 0, 0])) is None  # fewer repeats than k: missing
    assert best_of_n()(traces([0.2, 0.7])) == pytest.approx(0.7)
    # A task failure (infrastructure, not the agent's answer) is left out ...
    assert pass_at_k(1)(traces([1, None])) == pytest.approx(1.0)
    # ... but an agent failure (HarnessError, e.g. agent timeout) is an attempt that did not pass.
    timed_out = rk.Trace(task={"type": "T", "key": "k"})
    timed_out.errors.append(rk.core.trace.ErrorInfo(type="HarnessError", boundary="harness", message="agent timeout"))
    assert pass_at_k(1)([*traces([1]), timed_out]) == pytest.approx(0.5)
    assert best_of_n()([*traces([0.3]), timed_out]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="pass_at_k needs k >= 1"):
        pass_at_k(0)


def test_dataframes_carry_example_and_rollout_ids():
    result = rk.evaluate(said_agent(), said_tasks(2), repeats=2, progress=False)
    rollouts = result.rollouts()
    assert len(rollouts) == 4
    assert sorted(rollouts["rollout_id"]) == ["said-0#0", "said-0#1", "said-1#0", "said-1#1"]
    assert rollouts.groupby("example_id")["reward"].mean().to_dict() == {"said-0": 1.0, "said-1": 0.0}
    signals = result.signals()
    assert set(signals["rollout_id"]) == set(rollouts["rollout_id"])
    assert set(result.turns()["example_id"]) == {"said-0", "said-1"}
    assert set(result.phases()["repeat"]) == {0, 1}


def test_summary_counts_outcomes_rewards_and_phases():
    tasks = [*said_tasks(3), BrokenSetup(id="broken", prompt="say 2")]
    text = rk.evaluate(said_agent(), tasks, progress=False).summary()
    assert "rollouts: 4 over 4 tasks" in text
    assert "failed: TaskError" in text
    # mean of 1, 1, 0 +/- t(0.975, 2) * s / sqrt(3); the failed rollout counted, not dropped
    assert re.search(r"^reward +0\.667 +\[-0\.768, 2\.101\] +3 / 4$", text, re.M), text
    for phase in ("boot", "setup", "agent", "scoring"):
        assert f"\n{phase} " in text


# ---- bad input ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number >= 1 (how many rollouts run at once); got 0"),
        ({"repeats": 0}, "repeats must be a whole number >= 1 (how many times each task runs); got 0"),
        ({"repeats": 1.5}, "repeats must be a whole number >= 1"),
        ({"backend": "spark"}, "backend must be 'local', 'ray'"),
        ({"resume": True}, "resume=True needs out=DIR"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError) as info:
        rk.evaluate(said_agent(), said_tasks(1), progress=False, **kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, EvaluateArgumentError)  # what the CLI reports as bad input


def test_empty_task_set_is_refused():
    with pytest.raises(ValueError, match="the task set is empty: pass at least one rk.Task"):
        rk.evaluate(said_agent(), [], progress=False)


def test_duplicate_task_keys_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"tasks\[0\] and tasks\[2\] have the same key 'said-0'"):
        rk.evaluate(said_agent(), [*said_tasks(2), Said(id="said-0", prompt="again")], progress=False)


def test_not_a_task_is_refused_naming_its_index():
    with pytest.raises(TypeError, match=r"tasks\[1\] is a str, not a rk.Task") as info:
        rk.evaluate(said_agent(), [said_tasks(1)[0], "say 2"], progress=False)
    assert isinstance(info.value, EvaluateArgumentError)


def test_bad_group_scorers_are_argument_errors():
    with pytest.raises(TypeError, match="group_scorers: group scorer 'x' must be a function") as info:
        rk.evaluate(said_agent(), said_tasks(1), progress=False, group_scorers={"x": 3})
    assert isinstance(info.value, EvaluateArgumentError)


async def test_bad_arguments_are_refused_before_anything_runs_in_a_loop():
    with pytest.raises(ValueError, match="concurrency must be"):
        rk.evaluate(said_agent(), said_tasks(1), concurrency=0)


def test_rk_evaluate_stays_the_function_after_importing_the_module(tmp_path):
    import rollkit.runs.evaluation  # noqa: F401 - a submodule import must not shadow the name
    from rollkit.notebook import running

    assert rk.evaluate is running.evaluate
    result = rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, progress=False)
    assert [t.model_dump() for t in load_run(tmp_path)] == [t.model_dump() for t in result]


def test_evaluate_in_a_running_loop_is_awaited_even_where_nest_asyncio_allows_reentry():
    # One rule whatever patched the loop: `await rk.evaluate_async(...)` works in
    # every notebook. In a subprocess: nest_asyncio patches the whole process.
    pytest.importorskip("nest_asyncio")
    code = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import nest_asyncio, rollkit as rk
from helpers.evaluate_helpers import said_agent, said_tasks

async def notebook_cell():
    nest_asyncio.apply(asyncio.get_running_loop())  # what some libraries do in Jupyter
    pending = rk.evaluate_async(said_agent(), said_tasks(3), progress=False)
    print(repr(pending))
    result = await pending
    print(type(result).__name__, sorted(t.info["rollout_id"] for t in result.traces))

asyncio.run(notebook_cell())
"""
    from helpers.evaluate_helpers import HERE

    done = subprocess.run([sys.executable, "-c", code, str(HERE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "<rollkit evaluation, not started: await it: result = await rk.evaluate_async(...)>",
        "EvalResult ['said-0#0', 'said-1#0', 'said-2#0']",
    ]


async def test_an_evaluation_never_awaited_writes_nothing_and_the_folder_stays_usable(tmp_path):
    out = tmp_path / "run"
    forgotten = rk.evaluate_async(said_agent(), said_tasks(2), out=out, progress=False)
    with pytest.raises(AttributeError, match=r"this evaluation has not run yet; await it: result = await rk.evaluate_async"):
        forgotten.traces  # noqa: B018 - what a notebook user who forgot `await` types next
    forgotten._coroutine.close()  # dropped without running (no "never awaited" warning in the test log)
    assert not out.exists()
    # The next run on the same out= is a new run, not refused as "already holds a run".
    result = await rk.evaluate_async(said_agent(), said_tasks(2), out=out, progress=False)
    assert sorted(t.info["rollout_id"] for t in load_run(out)) == sorted(t.info["rollout_id"] for t in result.traces)


async def test_a_folder_problem_is_raised_when_the_evaluation_is_awaited(tmp_path):
    await rk.evaluate_async(said_agent(), said_tasks(1), out=tmp_path, progress=False)
    again = rk.evaluate_async(said_agent(), said_tasks(1), out=tmp_path, progress=False)  # no error yet: nothing touched
    with pytest.raises(RunFolderError, match="already holds a run"):
        await again


def test_group_scorers_count_a_trace_that_was_not_scored_as_missing_not_zero():
    # One failed rollout (None) among the repeats: left out, not a fail.
    assert pass_at_k(1)(_scored_traces([1, 0, None])) == pytest.approx(0.5)
    assert pass_at_k(2)(_scored_traces([1, None])) is None  # one judged repeat < k
    assert best_of_n()(_scored_traces([None, None])) is None
    # Rewards recorded but scoring never ran (an aborted rollout): not counted either.
    unscored = rk.Trace(task={"type": "T", "key": "k"}, rewards={"x": 1.0})
    assert unscored.scored is False
    assert pass_at_k(1)([unscored, *_scored_traces([0])]) == 0.0
    assert best_of_n()([unscored]) is None


def test_lines_of_rollouts_that_end_together_are_serialized_one_after_another_then_written(tmp_path, monkeypatch):
    # Serializing lines back to back keeps pydantic-core's code in the CPU's
    # caches: a folder's cost halves when instant rollouts end together.
    from rollkit.runs import evaluation

    log = []
    serialize = evaluation.trace_line

    class Logged(evaluation.TraceLog):
        def write(self, line: bytes) -> None:
            log.append("write")
            super().write(line)

    def logged(trace: rk.Trace) -> bytes:
        log.append("serialize")
        return serialize(trace)

    monkeypatch.setattr(evaluation, "trace_line", logged)
    monkeypatch.setattr(evaluation, "TraceLog", Logged)
    rk.evaluate(said_agent(), said_tasks(8), concurrency=4, out=tmp_path, progress=False)
    assert log.count("serialize") == log.count("write") == 8
    runs = [len(run) for run in "".join("s" if e == "serialize" else "w" for e in log).split("w") if run]
    assert max(runs) >= 2 and sum(runs) == 8
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == 8


def test_L21_a_group_is_judged_only_once_every_trace_of_it_is_on_disk(tmp_path):
    # Rollouts of two tasks end in the same turn of the loop and their lines
    # are written together, by the worker that ended first; every worker
    # judges its task's group only once its line is written.
    on_disk = {}

    def count_lines(traces: list[rk.Trace]) -> float:
        key = traces[0].info["example_id"]
        lines = (tmp_path / "traces.jsonl").read_text().splitlines()
        on_disk[key] = sorted(json.loads(line)["info"]["repeat"] for line in lines
                              if json.loads(line)["info"]["example_id"] == key)
        return 1.0

    rk.evaluate(said_agent(), said_tasks(3), repeats=2, concurrency=4, out=tmp_path, progress=False,
                group_scorers=[count_lines])
    assert on_disk == {"said-0": [0, 1], "said-1": [0, 1], "said-2": [0, 1]}


def test_a_line_that_cannot_be_made_loses_no_other_rollout_written_with_it(tmp_path, monkeypatch):
    # Lines of rollouts that end together are written together: one that
    # cannot be serialized is raised, once every other line is on disk.
    from rollkit.runs import evaluation

    serialize = evaluation.trace_line

    def failing(trace: rk.Trace) -> bytes:
        if trace.info["example_id"] == "said-1":
            raise RuntimeError("this line cannot be made")
        return serialize(trace)

    monkeypatch.setattr(evaluation, "trace_line", failing)
    with pytest.raises(RuntimeError, match="this line cannot be made"):
        rk.evaluate(said_agent(), said_tasks(4), concurrency=4, out=tmp_path, progress=False)
    written = [json.loads(line)["info"]["example_id"] for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert sorted(written) == ["said-0", "said-2", "said-3"]
