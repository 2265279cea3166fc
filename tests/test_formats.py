"""Other tools' traces as rollkit traces (rollkit.interop.formats), and back.

Where the tool installs here its fixture is made by the tool itself in the
test: inspect-ai evaluates a small task with its `mockllm` model and writes
`.eval` and `.json` logs (`rollkit.examples.peers.inspect_log`, which
notebook 03 uses too); mini-swe-agent's own `DefaultAgent` runs two bash
actions from its `DeterministicToolcallModel` and saves its `.traj.json`.
verifiers and tau2-bench are not installed here: their fixtures are written
in the tests from their documented schemas (verifiers' `state_to_output` in
`verifiers/utils/save_utils.py`, tau2-bench's `Results` / `SimulationRun` in
`tau2/data_model/simulation.py`). Each format also gets its malformed and
truncated files, which must raise a TraceFileError naming the file, the
record and the field.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rollkit as rk
from rollkit import frames
from rollkit.examples import arithmetic_tasks, demo_agent, peers


# ---- fixtures made by the real tools ---------------------------------------

@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory) -> dict[str, Path]:
    """inspect-ai's own eval of four samples, two epochs, with its mockllm
    (rollkit.examples.peers), written as an .eval and a .json log."""
    pytest.importorskip("inspect_ai", reason="the inspect-ai extra: pip install 'rollkit[inspect]'")
    folder = tmp_path_factory.mktemp("inspect")
    return {fmt: peers.inspect_log(folder / fmt, fmt) for fmt in ("eval", "json")}


_MINI = '''
import json, os, sys
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
from pathlib import Path
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_path
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.test_models import DeterministicToolcallModel, make_toolcall_output

out = Path(sys.argv[1])
config = yaml.safe_load(get_config_path("mini").read_text())
agent_config = {k: v for k, v in config.get("agent", {}).items() if k != "mode"}

def call(i, command):
    function = {"name": "bash", "arguments": json.dumps({"command": command})}
    return make_toolcall_output(None, [{"id": f"call_{i}", "type": "function", "function": function}],
                                [{"command": command, "tool_call_id": f"call_{i}"}])

model = DeterministicToolcallModel(outputs=[call(0, "echo $((6*7))"),
                                            call(1, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 42")])
env = LocalEnvironment(cwd=str(out.parent), **config.get("environment", {}))
print(DefaultAgent(model, env, **{**agent_config, "output_path": out}).run("What is 6 times 7?"))
'''


@pytest.fixture(scope="module")
def mini_traj(tmp_path_factory) -> Path:
    pytest.importorskip("minisweagent")
    folder = tmp_path_factory.mktemp("mini")
    path = folder / "sum-6x7.traj.json"
    env = {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(folder), "MSWEA_SILENT_STARTUP": "1"}
    done = subprocess.run([sys.executable, "-c", _MINI, str(path)], capture_output=True, text=True, env=env,
                          cwd=folder, timeout=120)
    assert done.returncode == 0, done.stderr
    return path


# ---- fixtures written from the documented schemas --------------------------

def _verifiers_lines() -> list[dict]:
    """Three rollouts as verifiers' `state_to_output` writes them: two of
    example 0 (one with a tool call), one of example 1 that failed."""
    prompt = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "2+3?"}]
    call = {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}
    return [
        {"example_id": 0, "prompt": prompt, "completion": [{"role": "assistant", "content": "5"}], "answer": "5",
         "task": "arith", "reward": 1.0, "error": None,
         "timing": {"start_time": 1_700_000_000.0, "generation_ms": 1500.0, "scoring_ms": 20.0, "total_ms": 1520.0},
         "is_completed": True, "is_truncated": False, "stop_condition": "has_answer",
         "metrics": {"correct": 1.0, "format": 1.0}, "correct": 1.0, "format": 1.0,
         "token_usage": {"input_tokens": 21.0, "output_tokens": 1.0}},
        {"example_id": 0, "prompt": prompt, "completion": [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_a", "content": "5"},
            {"role": "assistant", "content": "It is 5"}], "answer": "5", "task": "arith", "reward": 0.5,
         "error": None, "timing": {"start_time": 1_700_000_010.0, "setup": {"start": 1_700_000_010.0, "end": 1_700_000_010.5},
                                   "generation": {"start": 1_700_000_010.5, "end": 1_700_000_013.0},
                                   "scoring": {"start": 1_700_000_013.0, "end": 1_700_000_013.1}},
         "is_completed": True, "is_truncated": False, "stop_condition": None, "metrics": {"correct": 1.0, "format": 0.0}},
        {"example_id": 1, "prompt": [{"role": "user", "content": "7*6?"}], "completion": [], "answer": "42",
         "task": "arith", "reward": 0.0,
         "error": {"error": "ModelError", "error_chain_repr": "ModelError('503')", "error_chain_str": "ModelError: 503"},
         "timing": {"start_time": 1_700_000_020.0, "generation_ms": 100.0, "scoring_ms": 0.0, "total_ms": 100.0},
         "is_completed": False, "is_truncated": False, "stop_condition": None, "metrics": {}},
    ]


@pytest.fixture
def verifiers_run(tmp_path) -> Path:
    folder = tmp_path / "arith--gpt-test" / "run1"
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({"env_id": "arith", "model": "gpt-test", "num_examples": 2,
                                                      "rollouts_per_example": 2}))
    path = folder / "results.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in _verifiers_lines()))
    return path


def _tau2_document() -> dict:
    def at(second: int) -> str:
        return f"2025-06-01T10:00:{second:02d}.000000"

    messages = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0, "timestamp": at(1),
         "usage": {"prompt_tokens": 100, "completion_tokens": 8}, "cost": 0.001},
        {"role": "user", "content": "I want to cancel order #W123.", "turn_idx": 1, "timestamp": at(3)},
        {"role": "assistant", "content": None, "turn_idx": 2, "timestamp": at(5),
         "tool_calls": [{"id": "t1", "name": "get_order_details", "arguments": {"order_id": "#W123"},
                         "requestor": "assistant"}], "usage": {"prompt_tokens": 130, "completion_tokens": 20}},
        {"role": "tool", "id": "t1", "content": "{\"status\": \"pending\"}", "requestor": "assistant", "turn_idx": 3,
         "timestamp": at(6), "error": False},
        {"role": "assistant", "content": "Order #W123 is pending; shall I cancel it?", "turn_idx": 4,
         "timestamp": at(8), "usage": {"prompt_tokens": 170, "completion_tokens": 12}},
        {"role": "user", "content": None, "turn_idx": 5, "timestamp": at(9),
         "tool_calls": [{"id": "u1", "name": "check_phone", "arguments": {}, "requestor": "user"}]},
        {"role": "tool", "id": "u1", "content": "no new messages", "requestor": "user", "turn_idx": 6,
         "timestamp": at(10), "error": False},
        {"role": "user", "content": "Yes please. ###STOP###", "turn_idx": 7, "timestamp": at(11)},
    ]
    return {
        "timestamp": "2025-06-01T10:00:00",
        "info": {"git_commit": "abc", "num_trials": 1, "max_steps": 30, "max_errors": 10,
                 "user_info": {"implementation": "user_simulator", "llm": "gpt-user"},
                 "agent_info": {"implementation": "llm_agent", "llm": "gpt-agent"},
                 "environment_info": {"domain_name": "retail"}, "seed": 300},
        "tasks": [{"id": "7", "description": {"purpose": "cancel a pending order"},
                   "user_scenario": {"instructions": "cancel #W123"}}],
        "simulations": [{
            "id": "sim-1", "task_id": "7", "trial": 0, "seed": 300, "start_time": at(0), "end_time": at(12),
            "duration": 12.0, "termination_reason": "user_stop", "agent_cost": 0.004, "user_cost": 0.002,
            "reward_info": {"reward": 1.0, "reward_basis": ["DB", "COMMUNICATE"],
                            "reward_breakdown": {"DB": 1.0, "COMMUNICATE": 1.0}},
            "messages": messages,
        }],
    }


@pytest.fixture
def tau2_results(tmp_path) -> Path:
    path = tmp_path / "retail_results.json"
    path.write_text(json.dumps(_tau2_document(), indent=2))
    return path


@pytest.fixture
def transcripts(tmp_path) -> Path:
    path = tmp_path / "chats.jsonl"
    records = [
        {"id": "chat-1", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Hello!"}]},
        {"id": "chat-2", "reward": 0.25, "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "w1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "w1", "content": "rain"},
            {"role": "assistant", "content": [{"type": "text", "text": "Rain in Oslo."}]}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


async def _rollkit_traces(n: int = 2) -> list[rk.Trace]:
    agent = demo_agent()
    return [await agent.run(task) for task in arithmetic_tasks(n)]


# ---- inspect-ai -------------------------------------------------------------

def test_inspect_log_is_one_trace_per_sample_and_epoch(inspect_logs):
    traces = rk.load(inspect_logs["eval"])
    assert sorted(t.info["rollout_id"] for t in traces) == [f"add-{i}#{e}" for i in range(4) for e in range(2)]
    first = next(t for t in traces if t.info["rollout_id"] == "add-0#0")
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "assistant"]
    call = first.messages[1].tool_calls[0]
    assert (call.name, call.args()) == ("add", {"a": 2, "b": 3})
    assert first.messages[2].content == "5" and first.messages[3].content == "The answer is 5."
    assert first.num_turns == 2 and first.sampled == [1, 3]
    assert [(c.usage.input_tokens, c.usage.output_tokens) for c in first.model_calls] == [(12, 6), (36, 6)]
    assert all(c.end >= c.start > 1e9 for c in first.model_calls)
    assert list(first.phases) == ["setup", "agent", "scoring"]
    assert first.rewards == {"includes": 1.0} and first.scored_reward == 1.0
    assert first.info["format"] == "inspect" and first.info["file"] == str(inspect_logs["eval"])
    assert first.task.type == "inspect:adding" and first.task.data["target"] == "5"
    assert first.agent["model"] == "mockllm/model"
    wrong = next(t for t in traces if t.info["rollout_id"] == "add-3#0")
    assert wrong.rewards == {"includes": 0.0}  # 6 + 9 is not the target 16


def test_inspect_json_log_reads_the_same_as_the_eval_log(inspect_logs):
    def key(t):
        return t.info["rollout_id"]

    from_eval = sorted(rk.load(inspect_logs["eval"]), key=key)
    from_json = sorted(rk.load(inspect_logs["json"]), key=key)
    # Two runs of the task: the same conversations, tool call ids apart (inspect draws them).
    assert [t.transcript for t in from_json] == [t.transcript for t in from_eval]
    assert from_json[0].transcript.endswith("tool[add]: 5\nassistant: The answer is 5.")
    assert [t.rewards for t in from_json] == [t.rewards for t in from_eval]


async def test_save_format_inspect_writes_a_log_inspect_reads_and_rollkit_reads_back(tmp_path):
    inspect_log = pytest.importorskip("inspect_ai.log")
    traces = await _rollkit_traces(2)
    path = rk.save(traces, tmp_path / "rollkit.eval", format="inspect")
    # What `inspect view` reads; in a thread, since inside a running loop inspect would patch asyncio.
    log = await asyncio.to_thread(inspect_log.read_eval_log, str(path))
    assert log.status == "success" and len(log.samples) == 2
    assert [m.role for m in log.samples[0].messages] == [m.role for m in traces[0].messages]
    assert log.samples[0].scores["correct"].value == traces[0].rewards["correct"]
    assert log.samples[0].output.completion == traces[0].last_reply
    back = rk.load(path)
    assert [t.messages for t in back] == [t.messages for t in traces]
    assert [t.rewards["correct"] for t in back] == [t.rewards["correct"] for t in traces]
    json_path = rk.save(traces, tmp_path / "rollkit.json", format="inspect")
    assert json.loads(json_path.read_text())["status"] == "success"
    assert [t.messages for t in rk.load(json_path)] == [t.messages for t in traces]


def test_inspect_round_trip_keeps_messages_and_scores(inspect_logs, tmp_path):
    traces = rk.load(inspect_logs["eval"])
    again = rk.load(rk.save(traces, tmp_path / "again.eval", format="inspect"))
    assert [t.messages for t in again] == [t.messages for t in traces]
    assert [t.rewards for t in again] == [t.rewards for t in traces]


@pytest.mark.parametrize("log", [Path(__file__).parent / "fixtures/inspect/adding.eval",
                                 Path(__file__).parent / "fixtures/inspect/adding.json", "eval", "json"])
def test_inspect_log_is_read_directly_as_inspects_reader_reads_it(log, inspect_logs, monkeypatch, tmp_path):
    """A finished log is read directly, not through inspect's reader (which
    validated every event, twice rk.load's cost), and gives the very traces
    inspect's reader gives, field by field. A .eval the direct read does not
    expect goes to inspect's reader, whose refusal names the field (the
    .json case is test_inspect_truncated_and_malformed_logs_name_the_file)."""
    import zipfile

    import inspect_ai.log

    from rollkit.interop.formats import inspect_log

    path = log if isinstance(log, Path) else inspect_logs[log]
    read_by_inspect = []
    real = inspect_ai.log.read_eval_log
    monkeypatch.setattr(inspect_ai.log, "read_eval_log", lambda *a, **k: read_by_inspect.append(a) or real(*a, **k))
    direct = rk.load(path)
    assert read_by_inspect == []

    def refuse(*args):
        raise inspect_log._NotPlain("left to inspect's reader")

    monkeypatch.setattr(inspect_log, "_read_directly", refuse)
    through_inspect = rk.load(path)
    assert len(read_by_inspect) == 1

    def dump(trace):
        out = trace.model_dump(mode="json", exclude={"id"})
        return out, out["info"].pop("inspect_reader")

    assert [dump(t)[0] for t in direct] == [dump(t)[0] for t in through_inspect]
    assert {json.dumps(dump(t)[1]) for t in direct} == {'{"name": "rollkit"}'}
    assert {json.dumps(dump(t)[1]) for t in through_inspect} == {'{"name": "inspect-ai", "why": "left to inspect\'s reader"}'}
    assert len(direct) == (3 if isinstance(log, Path) else 8)
    if path.suffix == ".json":
        return

    monkeypatch.undo()
    bad = tmp_path / "bad.eval"
    with zipfile.ZipFile(path) as original, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as out:
        for info in original.infolist():
            data = original.read(info)
            if info.filename.startswith("samples/") and info.filename.endswith(".json"):
                data = json.dumps({**json.loads(data), "epoch": "second"}).encode()
            out.writestr(info.filename, data)
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(bad)
    assert caught.value.field == "epoch"
    assert str(caught.value).startswith(f"{bad}: inspect-ai cannot read this log (field epoch): ValidationError")


@pytest.mark.parametrize("name, reader", [
    ("adding.eval", {"name": "rollkit"}),
    ("real/0.3.41_ollama-llama3.1_log_formats_049bc22.json", {"name": "inspect-ai", "why": "a sample in an older shape"}),
    ("real/0.3.135_hardcoded-hardcoded_log_message_deduplication_e1b59b4.eval",
     {"name": "inspect-ai", "why": "a log version this reader was not written for"}),
])
def test_each_inspect_trace_says_which_reader_read_it_and_why(name, reader):
    """No silent fallback: a trace read from an inspect log records the
    reader that read it, and when inspect's own reader did, the reason the
    direct reader gave the log up (real logs of both kinds)."""
    traces = rk.load(Path(__file__).parent / "fixtures/inspect" / name)
    assert traces and [t.info["inspect_reader"] for t in traces] == [reader] * len(traces)


def test_an_unforeseen_error_of_the_direct_reader_is_recorded_not_swallowed(inspect_logs, monkeypatch):
    """A fault in the direct reader (not a shape it leaves to inspect on
    purpose) still reads the log through inspect's reader, and each trace
    names the fault."""
    from rollkit.interop.formats import inspect_log

    def broken(*args):
        raise KeyError("samples")

    monkeypatch.setattr(inspect_log, "_read_directly", broken)
    traces = rk.load(inspect_logs["eval"])
    assert len(traces) == 8
    assert {t.info["inspect_reader"]["why"] for t in traces} == {"the direct reader failed: KeyError: 'samples'"}
    assert {t.info["inspect_reader"]["name"] for t in traces} == {"inspect-ai"}


def test_inspect_zstandard_member_is_never_inflated_past_its_declared_size(tmp_path):
    """A zstandard member (as inspect writes them) whose directory declares
    100 bytes but which inflates to 64 MB is cut at 101 bytes and left to
    inspect's reader, not inflated whole."""
    import struct
    import types

    zstandard = pytest.importorskip("zstandard")
    from rollkit.interop.formats import inspect_log

    bomb = zstandard.ZstdCompressor(level=19).compress(b"[" + b"0," * (32 << 20) + b"0]")
    raw = tmp_path / "member.bin"
    raw.write_bytes(b"PK\x03\x04" + bytes(22) + struct.pack("<HH", 0, 0) + bomb)
    info = types.SimpleNamespace(compress_type=93, file_size=100, CRC=0, header_offset=0, compress_size=len(bomb))
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(inspect_log._NotPlain, match="does not inflate to the size and CRC its directory declares"):
            inspect_log._member(None, raw, info)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # inflated whole, it would be 64 MB


def test_inspect_truncated_and_malformed_logs_name_the_file(inspect_logs, tmp_path):
    cut = tmp_path / "cut.eval"
    data = inspect_logs["eval"].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(rk.TraceFileError, match=rf"^{cut}: inspect-ai cannot read this log") as caught:
        rk.load(cut)
    assert caught.value.path == cut
    document = json.loads(inspect_logs["json"].read_text())
    document["samples"][0]["epoch"] = "second"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(bad)
    assert caught.value.field == "samples.0.epoch"
    assert str(caught.value).startswith(f"{bad}: inspect-ai cannot read this log (field samples.0.epoch)")
    truncated = tmp_path / "truncated.json"
    truncated.write_text(inspect_logs["json"].read_text()[:5000])
    with pytest.raises(rk.TraceFileError, match=rf"^{truncated}: inspect-ai cannot read this log"):
        rk.load(truncated)


async def test_fork_of_an_imported_inspect_trace_is_refused_naming_why_and_runs_with_a_task(inspect_logs):
    trace = next(t for t in rk.load(inspect_logs["eval"]) if t.info["rollout_id"] == "add-0#0")
    with pytest.raises(rk.ForkError, match=(
            rf"cannot fork trace {trace.id}: it was imported from a inspect file \({inspect_logs['eval']}\), and "
            r"its task inspect:adding 'add-0' is not a rollkit Task that can be rebuilt .*task=\.\.\.\)")):
        await rk.fork(trace, 1, agent=rk.Agent(model="echo"))
    fork = await rk.fork(trace, 2, agent=rk.Agent(model="echo"), task=rk.Task(prompt="Add 2 and 3"))
    await fork.step("and 1 more?")
    done = await fork.close()
    assert [m.content for m in done.messages[-2:]] == ["and 1 more?", "You said: and 1 more?"]
    assert done.info["forked_from"] == [trace.id, 2] and done.num_turns == 3


# ---- mini-swe-agent ---------------------------------------------------------

def test_mini_swe_agent_trajectory_loads_with_its_exit_status(mini_traj):
    [trace] = rk.load(mini_traj)
    assert trace.info["format"] == "trajectory" and trace.info["trajectory_format"].startswith("mini-swe-agent")
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trace.messages[2].tool_calls[0].args() == {"command": "echo $((6*7))"}
    assert "42" in trace.messages[3].content
    assert trace.num_turns == 2 and trace.stop is None and trace.outcome.kind == "ok" and trace.info["submission"] == "42\n"
    assert trace.task.key == "sum-6x7" and "What is 6 times 7?" in trace.task.data["prompt"]
    assert trace.info["missing"] == ["usage"]
    signals = frames.signals([trace])
    assert signals[["kind", "name", "missing", "why_missing"]].values.tolist()[0] == [
        "reward", "reward", True, "not in the source"]
    assert trace.metrics == {"cost": 2.0}  # the deterministic model's 1.0 per call
    assert trace.scored_reward is None and "reward=-" in trace.summary()


def test_mini_swe_agent_truncated_and_malformed_trajectories(mini_traj, tmp_path):
    cut = tmp_path / "cut.traj.json"
    cut.write_text(mini_traj.read_text()[:-40])
    with pytest.raises(rk.TraceFileError, match=rf"^{cut}: the trajectory: is cut short") as caught:
        rk.load(cut, format="trajectory")
    assert caught.value.path == cut
    document = json.loads(mini_traj.read_text())
    del document["messages"][2]["role"]
    bad = tmp_path / "bad.traj.json"
    bad.write_text(json.dumps(document, indent=2))
    with pytest.raises(rk.TraceFileError, match=rf"^{bad}: the trajectory: field messages.2.role is missing") as caught:
        rk.load(bad)
    assert caught.value.field == "messages.2.role"


# ---- verifiers ----------------------------------------------------------------

def test_verifiers_results_load_with_rewards_metrics_phases_and_errors(verifiers_run):
    traces = rk.load(verifiers_run)
    assert [t.info["rollout_id"] for t in traces] == ["0#0", "0#1", "1#0"]
    first, second, failed = traces
    assert first.info["format"] == "verifiers" and first.agent == {"name": "arith", "model": "gpt-test",
                                                                   "harness": "verifiers"}
    assert first.rewards == {"reward": 1.0} and first.metrics == {"correct": 1.0, "format": 1.0}
    assert (first.model_calls[0].usage.input_tokens, first.model_calls[0].usage.output_tokens) == (21, 1)
    assert first.phases["agent"].duration == pytest.approx(1.5) and first.phases["scoring"].duration == pytest.approx(0.02)
    assert first.stop == "has_answer"
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert second.num_turns == 2 and second.messages[2].tool_calls[0].args() == {"a": 2, "b": 3}
    assert list(second.phases) == ["setup", "agent", "scoring"] and second.phases["setup"].duration == pytest.approx(0.5)
    assert second.info["missing"] == ["usage"]
    assert failed.failed and (failed.error.type, failed.error.boundary) == ("ModelError", "provider")
    assert failed.scored_reward is None and failed.rewards == {} and failed.info["source_rewards"] == {"reward": 0.0}
    frame = frames.rollouts(verifiers_run)
    assert frame["reward"].tolist()[:2] == [1.0, 0.5] and frame["error_type"].tolist()[2] == "ModelError"


def test_verifiers_malformed_and_truncated_lines(verifiers_run):
    lines = verifiers_run.read_text().splitlines()
    record = json.loads(lines[1])
    record["reward"] = "high"
    verifiers_run.write_text("\n".join([lines[0], json.dumps(record), lines[2]]) + "\n")
    with pytest.raises(rk.TraceFileError, match=rf"^{verifiers_run}: line 2: field reward should be a number, got str") as caught:
        rk.load(verifiers_run)
    assert (caught.value.line, caught.value.field) == (2, "reward")
    with pytest.warns(UserWarning, match="line 2: field reward should be a number.*; skipped"):
        assert [t.info["rollout_id"] for t in rk.load(verifiers_run, errors="skip")] == ["0#0", "1#0"]
    verifiers_run.write_text(lines[0] + "\n" + lines[1][:60])
    with pytest.warns(UserWarning, match="line 2 is torn"):
        assert len(rk.load(verifiers_run, format="verifiers")) == 1


# ---- tau2-bench ---------------------------------------------------------------

def test_tau2_results_keep_user_and_agent_turns_apart(tau2_results):
    [trace] = rk.load(tau2_results)
    assert trace.info["format"] == "tau2" and trace.task.type == "tau2:retail" and trace.task.key == "7"
    assert [m.role for m in trace.messages] == ["assistant", "user", "assistant", "tool", "assistant", "user"]
    assert trace.messages[2].tool_calls[0].name == "get_order_details"
    assert [(u.by, u.segment, [m.content for m in u.messages], u.replying_to) for u in trace.user_turns] == [
        ("user simulator", 1, ["I want to cancel order #W123."], "Hi! How can I help you today?"),
        ("user simulator", 2, ["Yes please. ###STOP###"], "Order #W123 is pending; shall I cancel it?"),
    ]
    assert trace.info["user_tool_calls"] == 1  # the user's own tool call is the user's, not the agent's
    assert [c.segment for c in trace.turns] == [0, 1, 1]
    assert [c.usage.input_tokens for c in trace.turns] == [100, 130, 170]
    assert [round(c.latency, 3) for c in trace.turns] == [1.0, 2.0, 2.0]
    assert trace.rewards == {"reward": 1.0} and trace.stop == "user_stop" and trace.agent["model"] == "gpt-agent"
    assert trace.metrics == {"reward.db": 1.0, "reward.communicate": 1.0, "agent_cost": 0.004, "user_cost": 0.002}
    assert frames.user_turns([trace])["by"].tolist() == ["user simulator", "user simulator"]


def test_tau2_truncated_and_malformed_results(tau2_results, tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text(tau2_results.read_text()[:-100])
    with pytest.raises(rk.TraceFileError, match=rf"^{cut}: the results: is cut short"):
        rk.load(cut, format="tau2")
    document = _tau2_document()
    document["simulations"][0]["messages"][2]["timestamp"] = "yesterday"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(rk.TraceFileError, match=rf"^{bad}: simulation 0: field messages.2.timestamp should be a time"):
        rk.load(bad)


# ---- OpenAI transcripts -------------------------------------------------------

async def test_transcripts_load_and_a_fork_runs_on_with_a_rollkit_agent(transcripts):
    plain, with_tools = rk.load(transcripts)
    assert plain.info["format"] == "messages" and plain.info["source_id"] == "chat-1"
    assert plain.task.data == {"prompt": "Hi", "system_prompt": "Be brief.", "id": None}
    assert plain.rewards == {"reward": None} and plain.signal_errors == {"reward": "not in the source"}
    assert with_tools.rewards == {"reward": 0.25}
    assert with_tools.messages[-1].content == "Rain in Oslo."
    assert sorted(plain.info["missing"]) == ["timings", "usage"]
    fork = await rk.fork(plain, 1, agent=rk.Agent(model="echo"))
    assert type(fork.task) is rk.Task and fork.task.data.prompt == "Hi"
    await fork.step("Bye")
    done = await fork.close()
    assert [m.content for m in done.messages] == ["Be brief.", "Hi", "Hello!", "Bye", "You said: Bye"]


async def test_save_format_messages_round_trips_the_conversation(tmp_path):
    traces = await _rollkit_traces(2)
    path = rk.save(traces, tmp_path / "train.jsonl", format="messages")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in records] == [t.id for t in traces]
    assert records[0]["reward"] == traces[0].scored_reward
    call = records[0]["messages"][2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "calculator"
    back = rk.load(path)
    assert [t.messages for t in back] == [t.messages for t in traces]
    assert [t.rewards["reward"] for t in back] == [t.scored_reward for t in traces]


def test_transcript_without_a_role_names_line_and_field(transcripts):
    lines = transcripts.read_text().splitlines()
    record = json.loads(lines[1])
    del record["messages"][1]["role"]
    transcripts.write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    with pytest.raises(rk.TraceFileError, match=rf"^{transcripts}: line 2: field messages.1.role is missing") as caught:
        rk.load(transcripts)
    assert (caught.value.line, caught.value.field) == (2, "messages.1.role")


# ---- recognising formats ------------------------------------------------------

async def test_load_recognises_each_format_by_content(tmp_path, verifiers_run, tau2_results, transcripts, mini_traj):
    rollkit_file = rk.save(await _rollkit_traces(1), tmp_path / "run.jsonl")
    for path, fmt in ((verifiers_run, "verifiers"), (tau2_results, "tau2"), (transcripts, "messages"),
                      (mini_traj, "trajectory")):
        assert {t.info["format"] for t in rk.load(path)} == {fmt}, path
    assert "format" not in rk.load(rollkit_file)[0].info
    with pytest.raises(ValueError, match=r"format='nope' is not a format rollkit reads; the formats are rollkit, inspect, atif"):
        rk.load(transcripts, format="nope")
    with pytest.raises(ValueError, match=r"format='tau2' is not a format rollkit writes; the formats are rollkit, inspect, atif, messages"):
        rk.save(rk.load(transcripts), tmp_path / "x.json", format="tau2")
    # Forcing a format the file is not in fails on the file's own records.
    with pytest.raises(rk.TraceFileError, match=rf"^{transcripts}: line 1: field prompt is missing"):
        rk.load(transcripts, format="verifiers")


async def test_imported_and_rollkit_traces_share_one_frame(inspect_logs, verifiers_run):
    traces = [*rk.load(inspect_logs["eval"]), *rk.load(verifiers_run), *await _rollkit_traces(2)]
    frame = frames.rollouts(traces)
    assert len(frame) == 13
    assert frame["task_type"].tolist()[:8] == ["inspect:adding"] * 8
    assert frame["task_type"].tolist()[8:11] == ["verifiers:arith"] * 3
    assert set(frame.columns) >= {"reward.includes", "reward.reward", "reward.correct"}
    signals = frames.signals(traces)
    assert (signals["why_missing"] == "not in the source").sum() == 0  # every one of these has its reward


def test_rollkit_show_reads_an_inspect_log(inspect_logs):
    done = subprocess.run([sys.executable, "-m", "rollkit", "show", str(inspect_logs["eval"])], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{inspect_logs['eval']}: 8 traces (inspect)" in done.stdout
    assert "rollouts: 8 over 4 tasks" in done.stdout
    reward_line = next(line for line in done.stdout.splitlines() if line.startswith("reward "))
    assert reward_line.split() == ["reward", "0.750", "[0.363,", "1.137]", "8", "/", "8"]


def test_view_shows_another_tools_trace_file_and_compares_two(verifiers_run, tmp_path):
    from rollkit.notebook.browser import TraceBrowser
    from rollkit.notebook.runbrowser import RunGrid
    from rollkit.notebook.viewpage import RunCharts, view

    page = view([verifiers_run])
    _, heading, part, charts, grid = page.children
    assert isinstance(grid, RunGrid) and grid.total == 3
    assert str(verifiers_run) in heading.value
    summary, browser = part.children
    assert "rollouts: 3 over 2 tasks" in summary.value
    assert isinstance(charts, RunCharts) and charts.figures[0].layout.title.text == "reward distribution · 3 rollouts"
    assert isinstance(browser, TraceBrowser)
    assert [t.info["rollout_id"] for t in browser.traces] == ["0#0", "0#1", "1#0"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    _, _, part = view([bad]).children  # no charts for a file that cannot be read
    assert f"{bad}: line 1 is not a rollkit trace" in part.value
    twice = view([verifiers_run, verifiers_run])
    assert "paired sign-flip permutation test" in twice.children[-1].result.value


# ---- issue 21: tau2's folder layout and endings, SWE-agent's history anywhere ----

def test_tau2_folder_layout_infrastructure_error_and_tool_error_flag(tmp_path):
    # tau2's newer layout (tau2/data_model/simulation.py, Results.save "dir"):
    # results.json without the simulations, one file per simulation beside it.
    document = _tau2_document()
    (sim,) = document.pop("simulations")
    tool = next(m for m in sim["messages"] if m["role"] == "tool" and m.get("requestor") != "user")
    tool["error"] = True
    broken = {**sim, "id": "sim-2", "termination_reason": "infrastructure_error", "reward_info": None}
    folder = tmp_path / "run"
    (folder / "simulations").mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({**document, "format_version": 2}))
    for s in (sim, broken):
        (folder / "simulations" / f"{s['id']}.json").write_text(json.dumps(s))
    ok, failed = rk.load(folder)  # the folder, or its results.json
    assert [t.info["simulation_id"] for t in rk.load(folder / "results.json")] == [ok.info["simulation_id"], "sim-2"]
    assert ok.outcome.kind == "stopped" and ok.info["tool_errors"] == [{"tool_call_id": tool["id"], "error": True}]
    assert failed.outcome.label == "failed: ProviderError" and failed.outcome.boundary == "provider"
    assert failed.scored_reward is None and "infrastructure_error" in failed.errors[0].message


def test_swe_agent_history_past_the_first_64_kib_is_found_by_parsing(tmp_path):
    source = Path(__file__).parent / "fixtures/swe-agent/6e44b9__sweagenttestrepo-1c2844.traj"
    document = json.loads(source.read_text())
    # SWE-agent writes `trajectory` (every step's observation) before `history`:
    # a long run puts history far past the first 64 KiB, on one line or pretty-printed.
    document["trajectory"] = document["trajectory"] * 40
    for name, text in (("one-line.traj", json.dumps(document)), ("pretty.traj", json.dumps(document, indent=2))):
        path = tmp_path / name
        path.write_text(text)
        assert text.index('"history"') > 64 * 1024
        (trace,) = rk.load(path)
        assert trace.info["format"] == "trajectory" and len(trace.messages) == len(document["history"])
        assert trace.outcome.kind == "ok"  # exit status "submitted": the agent's own clean finish
