"""backend="ray": the same evaluation on a local Ray instance (2 CPUs, one
or two actors), compared with a local run on the embedded model; the trace
file and resume behave as locally; an unreachable address is a clear error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the rollkit[ray] extra")

from helpers.evaluate_helpers import (  # noqa: E402
    HERE,
    BadHook,
    BrokenSetup,
    Gate,
    GateHarness,
    NodeReportingHarness,
    Unpicklable,
    said_agent,
    said_tasks,
)

import rollkit as rk  # noqa: E402
from rollkit.runs.evaluation import RunFolderError, evaluate_async, load_run, pass_at_k  # noqa: E402
from rollkit.examples import arithmetic_tasks, demo_agent  # noqa: E402
from rollkit.runs.ray_backend import RayBackend, RayUnavailable  # noqa: E402


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One small local Ray instance for this module, shut down at its end."""
    assert not ray.is_initialized()
    temp = tmp_path_factory.mktemp("ray", numbered=False)
    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",  # its servers on loopback only
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(temp),
        runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}},
    )
    yield
    ray.shutdown()


def _deterministic(trace: rk.Trace) -> dict:
    """What two runs on the embedded model must share: not ids, not times.
    Tool call ids come from a per-process counter, so they become their order."""
    call_ids: dict[str, int] = {}
    messages = []
    for message in trace.messages:
        data = message.model_dump()
        for call in data.get("tool_calls") or ():
            call["id"] = call_ids.setdefault(call["id"], len(call_ids))
        if data.get("tool_call_id") is not None:
            data["tool_call_id"] = call_ids.setdefault(data["tool_call_id"], len(call_ids))
        messages.append(data)
    return {
        "rollout_id": trace.info["rollout_id"],
        "task": trace.task.model_dump(),
        "messages": messages,
        "rewards": trace.rewards,
        "metrics": trace.metrics,
        "stop": trace.stop,
        "ok": trace.ok,
        "turns": trace.num_turns,
        "tokens": (trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens),
        "errors": [(e.type, e.phase) for e in trace.errors],
    }


def _by_rollout(traces):
    return sorted((_deterministic(t) for t in traces), key=lambda d: d["rollout_id"])


def test_ray_run_equals_local_run_on_the_embedded_model(local_ray, capsys):
    tasks = arithmetic_tasks(6)
    local = rk.evaluate(demo_agent(), tasks, repeats=2, concurrency=4, progress=False)
    on_ray = rk.evaluate(demo_agent(), tasks, repeats=2, concurrency=4, backend=RayBackend(actors=2), progress=True)
    assert len(on_ray) == 12
    assert _by_rollout(on_ray.traces) == _by_rollout(local.traces)
    # The toy calculator really ran its tool on the workers.
    assert all(t.metrics["used_calculator"] == 1.0 for t in on_ray.traces)
    assert sorted({t.reward for t in on_ray.traces}) == [0.0, 1.0]
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "12/12" in bar and "failed=0" in bar and "reward=0.667" in bar


def test_L32_failures_on_ray_are_data_like_locally(local_ray):
    tasks = [*said_tasks(3), BadHook(id="bad-hook", prompt="say 10"), BrokenSetup(id="broken", prompt="say 12")]
    local = rk.evaluate(said_agent(), tasks, progress=False)
    on_ray = rk.evaluate(said_agent(), tasks, backend="ray", progress=False)
    assert _by_rollout(on_ray.traces) == _by_rollout(local.traces)
    errors = {t.task.key: t.error.type for t in on_ray.traces if t.failed}
    assert errors == {"bad-hook": "TypeError", "broken": "TaskError"}


def test_ray_trace_file_resume_and_groups_behave_as_locally(local_ray, tmp_path):
    tasks = said_tasks(4)
    first = rk.evaluate(said_agent(), tasks, repeats=2, out=tmp_path, backend=RayBackend(actors=1), progress=False,
                        group_scorers=[pass_at_k(1)])
    assert [t.model_dump() for t in load_run(tmp_path).traces] == [t.model_dump() for t in first.traces]
    # The columnar tables of a Ray run are the same as of a local one (rollkit.tables.columns).
    assert rk.open_run(tmp_path).rollouts().equals(rk.frames.rollouts(first.traces))
    # They are plain Parquet, in parts (shards by byte range of the driver's file): Ray Data and
    # DuckDB read the folder as it is, as the README says ("Big runs").
    import duckdb
    from ray import data as ray_data

    rollouts = tmp_path / ".rollkit" / "traces.jsonl" / "rollouts"
    expected = rk.frames.rollouts(first.traces)["reward"].mean()
    data = ray_data.read_parquet(str(rollouts))
    assert data.count() == 8 and data.mean("reward") == pytest.approx(expected)
    assert duckdb.sql(f"select count(*), avg(reward) from '{rollouts}/*.parquet'").fetchall() == [(8, pytest.approx(expected))]
    # Cut the run short as a crash would: 3 whole lines and a torn one.
    path = tmp_path / "traces.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][:40])
    (tmp_path / "groups.jsonl").write_text("")
    with pytest.warns(UserWarning, match="line 4 is torn"):
        resumed = rk.evaluate(said_agent(), tasks, repeats=2, out=tmp_path, resume=True, backend="ray", progress=False,
                              group_scorers=[pass_at_k(1)])
    ids = [json.loads(line)["info"]["rollout_id"] for line in path.read_text().splitlines()]
    assert sorted(ids) == sorted(f"said-{i}#{r}" for i in range(4) for r in range(2))
    assert _by_rollout(resumed.traces) == _by_rollout(first.traces)
    assert sorted((g.example_id, g.value) for g in resumed.groups) == [
        ("said-0", 1.0), ("said-1", 0.0), ("said-2", 1.0), ("said-3", 0.0)
    ]


def test_unreachable_ray_address_is_refused_before_anything_is_written(tmp_path):
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    with pytest.raises(RayUnavailable) as info:
        rk.evaluate(said_agent(), said_tasks(1), out=tmp_path / "run", backend=RayBackend(address="127.0.0.1:1"), progress=False)
    message = str(info.value)
    assert "cannot reach the Ray cluster at '127.0.0.1:1'" in message
    assert "ray start --head" in message and "pass no address to run on a local Ray instance" in message
    assert not (tmp_path / "run").exists()
    with pytest.raises(RayUnavailable, match="is not HOST:PORT"):
        rk.evaluate(said_agent(), said_tasks(1), backend=RayBackend(address="nowhere"), progress=False)
    with pytest.raises(ValueError, match="actors must be a whole number >= 1, got 0"):
        RayBackend(actors=0)


def test_cli_unreachable_ray_address_is_a_clear_error():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "rollkit", "eval", "helpers.evaluate_helpers:TASKS", "-m", "echo",
         "--backend", "ray", "--ray-address", "127.0.0.1:1", "--no-progress"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 1
    assert "Error: cannot reach the Ray cluster at '127.0.0.1:1'" in done.stderr
    assert "Traceback" not in done.stderr


def test_resume_of_another_run_is_refused_on_ray_too(tmp_path):
    rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False)
    with pytest.raises(RunFolderError, match="holds another run"):
        rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, resume=True, backend=RayBackend(), progress=False)


async def test_interrupt_on_ray_waits_for_the_workers_to_abort_before_killing_actors(local_ray):
    gate = ray.remote(Gate).remote()
    agent = rk.Agent(model="echo", harness=GateHarness(gate))
    run = asyncio.ensure_future(
        evaluate_async(agent, said_tasks(2), concurrency=2, backend=RayBackend(actors=1), progress=False)
    )
    await gate.wait_for.remote("started", 2)  # both rollouts are in a segment on the worker
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # Each rollout's abort ran its (slow) harness cleanup to the end before
    # the actor was killed: nothing was left half torn down on the worker.
    assert await gate.count.remote("cleaned up") == 2


def test_a_task_that_cannot_reach_a_worker_is_a_failed_trace_not_a_crash(local_ray):
    tasks = [*said_tasks(2), Unpicklable(id="unpicklable", prompt="say 4")]
    result = rk.evaluate(said_agent(limits=rk.RolloutLimits(max_turns=5)), tasks, backend=RayBackend(actors=1), progress=False)
    by_key = {t.task.key: t for t in result.traces}
    assert sorted(by_key) == ["said-0", "said-1", "unpicklable"]
    lost = by_key["unpicklable"]
    assert (lost.error.type, lost.error.phase) == ("TypeError", "ray")
    assert "cannot be pickled" in lost.error.message
    assert lost.ok is False and lost.completed is True
    assert lost.info["rollout_id"] == "unpicklable#0"
    # The same record as a rollout that failed to build locally: agent, limits, timeouts.
    assert lost.agent["model"] == "odd-wrong" and lost.limits["max_turns"] == 5
    assert lost.timeouts == by_key["said-0"].timeouts
    assert by_key["said-0"].ok and by_key["said-1"].ok


async def test_a_rollout_whose_worker_died_runs_again_on_a_new_actor(local_ray, tmp_path):
    """The actor running three rollouts is killed while they run (as a lost
    node kills it): they run again on a new actor, each recorded once, with a
    warning saying why. (Across nodes: tests/test_ray_cluster.py.)"""
    gate = ray.remote(Gate).remote()
    agent = said_agent(harness=NodeReportingHarness(gate))
    backend = RayBackend(actors=1)
    run = asyncio.ensure_future(
        evaluate_async(agent, said_tasks(3), concurrency=3, out=tmp_path, backend=backend, progress=False))
    await gate.wait_for.remote(f"started on {ray.get_runtime_context().get_node_id()}", 3)
    ray.kill(backend._pool[0])  # the worker dies mid-rollout
    await gate.arrive.remote("go")
    result = await run
    ids = [json.loads(line)["info"]["rollout_id"] for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["said-0#0", "said-1#0", "said-2#0"]
    assert [t.ok for t in result.traces] == [True] * 3, [t.errors for t in result.traces]
    assert all(len(t.warnings) == 1 and t.warnings[0].startswith("ran again: its Ray worker was lost (")
               for t in result.traces), [t.warnings for t in result.traces]


async def test_a_rollout_whose_worker_keeps_dying_is_rollkits_resource_error(local_ray):
    gate = ray.remote(Gate).remote()
    agent = said_agent(harness=NodeReportingHarness(gate))
    backend = RayBackend(actors=1, retries=0)
    run = asyncio.ensure_future(evaluate_async(agent, said_tasks(1), backend=backend, progress=False))
    await gate.wait_for.remote(f"started on {ray.get_runtime_context().get_node_id()}", 1)
    ray.kill(backend._pool[0])
    result = await run
    [trace] = result.traces
    assert (trace.error.type, trace.error.boundary, trace.error.phase) == ("ResourceError", "rollkit", "ray")
    assert trace.error.message.startswith("the Ray worker running this rollout was lost 1 times, the last: ")
    with pytest.raises(ValueError, match="retries must be a whole number >= 0, got -1"):
        RayBackend(retries=-1)
