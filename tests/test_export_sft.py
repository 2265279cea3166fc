"""Training rows (rk.export format="sft", rollkit.interop.exports.sft): one row
per branch in the messages + tools layout, read back the way a trainer
reads them (Hugging Face `datasets`) and checked row for row against the
real traces they came from: from a list of traces, a trace file and a run
folder, to Parquet and JSON lines, `where=` filters, and bad input."""

from __future__ import annotations

import json
import os

import pytest

import rollkit as rk
from rollkit.core.agent import RolloutLimits
from rollkit.core.messages import AssistantMessage
from rollkit.core.models import ScriptedModel
from rollkit.examples.arithmetic import _toy_reply, arithmetic_tasks, careful_calculator_model, demo_agent
from rollkit.interop.exports.sft import COLUMNS

# Local files only: datasets must not look anything up on the network.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _thinking(request):  # type: ignore[no-untyped-def]
    """The toy calculator, answering with its thinking beside the answer."""
    reply = _toy_reply(request)
    if isinstance(reply, str):
        return AssistantMessage(content=reply, reasoning="The tool said so; I repeat it.")
    return reply


def _agent(**overrides):  # type: ignore[no-untyped-def]
    return demo_agent(model=ScriptedModel(_thinking, name="toy-thinking"), **overrides)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A real run folder (four rollouts, each final answer with its thinking), a rollout
    cut by its turn limit, and a fork of the subtraction rollout (turn 1)
    finished by the careful model: every kind of row."""
    import asyncio

    folder = tmp_path_factory.mktemp("sft") / "run"
    result = rk.evaluate(_agent(), arithmetic_tasks(4), progress=False, out=folder)
    original = next(t for t in result.traces if t.task.data["operation"] == "sub")

    async def more():  # type: ignore[no-untyped-def]
        cut = await _agent(limits=RolloutLimits(max_turns=1)).run(arithmetic_tasks(1)[0])
        fork = await rk.fork(original, turn=1, agent=demo_agent(model=careful_calculator_model()))
        await fork.step()
        return cut, await fork.close()

    cut, fork = asyncio.run(more())
    traces = sorted(result.traces, key=lambda t: t.id) + [cut, fork]
    return folder, traces


def _load(path, tmp_path):  # type: ignore[no-untyped-def]
    import datasets

    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    return loaded


def _expected_messages(trace: rk.Trace) -> list[dict]:
    """transformers' chat form, written out from the trace: only the keys
    that apply, tool-call arguments as a mapping."""
    out = []
    for m in trace.messages:
        message = {"role": m.role, "content": m.content or ""}
        if m.role == "assistant":
            if m.reasoning:
                message["reasoning_content"] = m.reasoning
            if m.tool_calls:
                message["tool_calls"] = [{"id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": json.loads(c.arguments)}}
                                         for c in m.tool_calls]
        elif m.role == "tool":
            message.update(tool_call_id=m.tool_call_id, name=m.name)
        out.append(message)
    return out


def _check_row(row: dict, trace: rk.Trace) -> None:
    """A row says what its trace says."""
    origin = trace.info.get("forked_from")
    assert row["id"] == trace.id and row["task_key"] == trace.task.key and row["model"] == trace.agent["model"]
    assert row["run_id"] == trace.info.get("run_id")
    assert (row["parent_id"], row["forked_at_turn"]) == (tuple(origin) if origin else (None, None))
    if "messages" in row:
        assert row["messages"] == _expected_messages(trace)
    else:  # prompt/completion: split before the branch's first own reply
        split = trace.sampled[origin[1] if origin else 0]
        assert row["prompt"] + row["completion"] == _expected_messages(trace)
        assert len(row["prompt"]) == split and row["completion"][0]["role"] == "assistant"
    assert row["tools"] == trace.info["tools"]
    assert (row["group_id"], row["branch_id"]) == (trace.info.get("example_id", trace.task.key), trace.id)
    assert row["repetition_id"] == trace.info.get("repeat")
    assert row["reward"] == trace.scored_reward
    for name, value in trace.rewards.items():
        assert row[f"reward.{name}"] == value
    for name, value in trace.metrics.items():
        assert row[f"metric.{name}"] == value
    assert (row["outcome"], row["ok"], row["stop_condition"]) == (trace.outcome.label, trace.ok, trace.stop_condition)
    assert row["has_error"] == trace.failed and row["is_truncated"] == (trace.stop_condition == "max_turns")
    assert (row["turns"], row["input_tokens"], row["output_tokens"], row["total_tokens"]) == (
        trace.num_turns, trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens)


def test_rows_of_traces_load_in_datasets_row_for_row(made, tmp_path):
    _, traces = made
    path = rk.export(traces, tmp_path / "rows.parquet", format="sft", shape="messages")
    loaded = _load(path, tmp_path)
    assert loaded.num_rows == len(traces) == 6
    assert list(loaded.column_names[:len(COLUMNS)]) == list(COLUMNS)
    for row, trace in zip(loaded, traces):
        _check_row(row, trace)
    rows = {row["id"]: row for row in loaded}
    fork, cut = traces[-1], traces[-2]
    # the fork: its own row, its parent's conversation up to turn 1 then its own branch
    original = next(t for t in traces if t.id == fork.info["forked_from"][0])
    assert rows[fork.id]["parent_id"] == original.id and rows[fork.id]["forked_at_turn"] == 1
    assert rows[fork.id]["messages"][:4] == rows[original.id]["messages"][:4]
    assert rows[fork.id]["messages"][4:] != rows[original.id]["messages"][4:]
    assert [rows[t.id]["parent_id"] for t in traces[:-1]] == [None] * 5
    # what a filter needs: the cut rollout is truncated, the thinking kept apart from the answer
    assert rows[cut.id]["is_truncated"] and rows[cut.id]["stop_condition"] == "max_turns"
    assert sum(row["is_truncated"] for row in loaded) == 1
    last = rows[traces[0].id]["messages"][-1]
    assert last["reasoning_content"] == "The tool said so; I repeat it." and last["content"].startswith("The answer is")
    # tool calls and the tool schemas in the shape a chat template takes: arguments and tools as objects
    call = rows[traces[0].id]["messages"][2]["tool_calls"][0]
    assert call["function"]["name"] == "calculator" and set(call["function"]["arguments"]) == {"expression"}
    assert [t["function"]["name"] for t in rows[cut.id]["tools"]] == ["calculator"]
    assert set(rows[traces[0].id]["messages"][3]) == {"role", "content", "tool_call_id", "name"}


def test_a_file_with_forks_is_all_prompt_completion_and_never_repeats_a_prefix_as_trained(made, tmp_path):
    """Every row of a file has one shape: with a fork among them, every row
    is prompt/completion (a root's prompt its opening messages), so no
    trainer ever trains the fork's shared prefix."""
    _, traces = made
    loaded = _load(rk.export(traces, tmp_path / "rows.parquet", format="sft"), tmp_path)
    lines = [json.loads(line) for line in rk.export(traces, tmp_path / "rows.jsonl", format="sft").open()]
    assert "messages" not in loaded.column_names and {"prompt", "completion"} <= set(loaded.column_names)
    assert all(set(line) >= {"prompt", "completion"} and "messages" not in line for line in lines)
    rows = {row["id"]: row for row in loaded}
    for trace in traces:
        _check_row(rows[trace.id], trace)
        assert rows[trace.id] == next(line for line in lines if line["id"] == trace.id)
    fork = traces[-1]
    original = next(t for t in traces if t.id == fork.info["forked_from"][0])
    assert rows[fork.id]["prompt"] == rows[original.id]["prompt"] + rows[original.id]["completion"][:2]
    assert [m["role"] for m in rows[original.id]["prompt"]] == ["system", "user"]
    # a file without forks keeps the whole conversation in messages
    roots = _load(rk.export(traces[:-1], tmp_path / "roots.parquet", format="sft"), tmp_path)
    assert "messages" in roots.column_names and "prompt" not in roots.column_names


def test_a_run_folder_and_a_trace_file_give_the_rows_of_their_traces(made, tmp_path):
    folder, traces = made
    by_id = {t.id: t for t in traces}
    loaded = _load(rk.export(folder, tmp_path / "run.parquet", format="sft"), tmp_path)
    assert sorted(loaded["id"]) == sorted(t.id for t in traces[:4])
    for row in loaded:
        _check_row(row, by_id[row["id"]])
    # every branch in one trace file, opened as a run: the same rows as from the list, in file order
    file = rk.save(traces, tmp_path / "all.jsonl")
    from_file = rk.export(rk.open_run(file), tmp_path / "file.parquet", format="sft")
    from_list = rk.export(traces, tmp_path / "list.parquet", format="sft")
    import pyarrow.parquet as pq

    assert pq.read_table(from_file).to_pylist() == pq.read_table(from_list).to_pylist()
    # a run of several files: each file's rows, one file after the other
    both = rk.export(rk.open_run([file, folder]), tmp_path / "both.parquet", format="sft")
    # (the file holds a fork, so its rows are prompt/completion: the folder's asked the same)
    from_folder = rk.export(folder, tmp_path / "folder.parquet", format="sft", shape="prompt_completion")
    assert pq.read_table(both).to_pylist() == pq.read_table(from_file).to_pylist() + pq.read_table(
        from_folder).to_pylist()


def test_json_lines_hold_the_same_rows_as_parquet(made, tmp_path):
    import datasets

    _, traces = made
    lines = rk.export(traces, tmp_path / "rows.jsonl", format="sft")
    from_lines = datasets.load_dataset("json", data_files=str(lines), split="train", cache_dir=str(tmp_path / "hf"))
    parquet = _load(rk.export(traces, tmp_path / "rows.parquet", format="sft"), tmp_path)
    assert list(from_lines) == list(parquet) == [json.loads(line) for line in lines.open()]


def test_where_selects_the_rows_and_an_empty_selection_keeps_typed_columns(made, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, traces = made
    right = sorted(t.id for t in traces[:4] if t.scored_reward == 1)
    assert 0 < len(right) < 4
    rows = pq.read_table(rk.export(folder, tmp_path / "right.parquet", format="sft", where="reward = 1"))
    assert sorted(rows.column("id").to_pylist()) == right
    lines = rk.export(folder, tmp_path / "right.jsonl", format="sft", where="reward = 1").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == right
    none = pq.read_table(rk.export(folder, tmp_path / "none.parquet", format="sft", where="reward > 5"))
    assert none.num_rows == 0
    assert none.schema.field("reward").type == pa.float64() and none.schema.field("turns").type == pa.int64()
    assert none.schema.field("reward.correct").type == pa.float64()
    assert pa.types.is_list(none.schema.field("messages").type)
    # rows in small groups: a run is written a group at a time
    grouped = rk.export(folder, tmp_path / "grouped.parquet", format="sft", rows_per_group=1)
    assert pq.ParquetFile(grouped).num_row_groups == 4


def test_bad_input_is_refused_with_what_to_do(made, tmp_path):
    folder, traces = made
    with pytest.raises(rk.UsageError, match=r"'rows.csv' ends in \.csv; name the file with one of \.jsonl, \.parquet"):
        rk.export(traces, tmp_path / "rows.csv", format="sft")
    with pytest.raises(rk.UsageError, match="give a path ending in .jsonl or .parquet"):
        rk.export(traces, format="sft")
    with pytest.raises(rk.UsageError, match=r"rk.export: filter 'no_such_column = 1' names column 'no_such_column', which the run does not have"):
        rk.export(folder, tmp_path / "rows.parquet", format="sft", where="no_such_column = 1")
    with pytest.raises(rk.UsageError, match="takes traces, a trace file, a run folder or an opened run, got int"):
        rk.export(42, tmp_path / "rows.parquet", format="sft")
    with pytest.raises(rk.UsageError, match="item 1 is str, not a rollkit Trace"):
        rk.export([traces[0], "trace"], tmp_path / "rows.parquet", format="sft")
    with pytest.raises(rk.UsageError, match="where= is SQL over a run's rollouts table"):
        rk.export(traces, tmp_path / "rows.parquet", format="sft", where="reward = 1")
    with pytest.raises(rk.UsageError, match="rows_per_group must be a whole number >= 1, got 0"):
        rk.export(traces, tmp_path / "rows.parquet", format="sft", rows_per_group=0)
    with pytest.raises(rk.UsageError, match=r"shape is one of 'auto', 'messages', 'prompt_completion', got 'chat'"):
        rk.export(traces, tmp_path / "rows.jsonl", format="sft", shape="chat")
    with pytest.raises(rk.UsageError, match="tools_as is 'objects' or 'string', got 'json'"):
        rk.export(traces, tmp_path / "rows.jsonl", format="sft", tools_as="json")
    with pytest.raises(rk.UsageError, match=r"chat_template_kwargs is a dict .*enable_thinking.*, got str"):
        rk.export(traces, tmp_path / "rows.jsonl", format="sft", chat_template_kwargs="no")
    with pytest.raises(rk.UsageError, match=r"tokenizer= is the tokenizer's name .*, got int"):
        rk.export(traces, tmp_path / "rows.jsonl", format="sft", tokenizer=3)
    with pytest.raises(rk.UsageError, match="unknown format 'csv'; the formats are 'sft'"):
        rk.export(traces, tmp_path / "rows.parquet", format="csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written is left behind


def test_a_failed_export_leaves_no_file(made, tmp_path, monkeypatch):
    from rollkit.interop.exports import sft

    _, traces = made

    def broken(record, signals, **options):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk full")

    monkeypatch.setattr(sft, "training_row", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        rk.export(traces, tmp_path / "rows.parquet", format="sft")
    assert list(tmp_path.iterdir()) == []


def test_an_imported_trace_has_no_tools_column_value_but_its_messages(tmp_path):
    """A trace from another tool's file does not say which tools were
    offered: null, never an empty list (which would say there were none)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    import shutil

    source = shutil.copy(Path(__file__).parent / "fixtures" / "inspect" / "adding.eval", tmp_path / "adding.eval")
    traces = rk.load(source)
    rows = [json.loads(line) for line in rk.export(traces, tmp_path / "rows.jsonl", format="sft").open()]
    # the file itself, opened as a run (read from the JSON lines its tables were built from): the same rows
    from_file = [json.loads(line) for line in rk.export(source, tmp_path / "file.jsonl", format="sft").open()]
    unnamed = lambda rows: [{k: v for k, v in row.items() if k not in ("id", "branch_id")} for row in rows]  # noqa: E731
    assert unnamed(from_file) == unnamed(rows)  # (an import names its traces afresh each time)
    assert [row["tools"] for row in rows] == [None] * len(traces)
    for row, trace in zip(rows, traces):
        assert row["messages"] == _expected_messages(trace)
        assert row["reward"] == trace.scored_reward and row["outcome"] == trace.outcome.label
    # inspect's message limit stopped the third: a truncation, though rollkit's limits did not
    assert [row["is_truncated"] for row in rows] == [False, False, True]
    assert rows[2]["stop_condition"] == "message limit"


def test_a_run_is_exported_without_building_a_trace(made, tmp_path, monkeypatch):
    """Rows of a run come from its JSON lines, never through `Trace`
    objects (five times the CPU: benchmarks/export_sft.py)."""
    import pyarrow.parquet as pq

    from rollkit.core.trace import Trace

    folder, traces = made
    expected = pq.read_table(rk.export(traces[:4], tmp_path / "list.parquet", format="sft")).to_pylist()

    def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a Trace was built")

    monkeypatch.setattr(Trace, "model_validate_json", refused)
    monkeypatch.setattr(Trace, "model_validate", refused)
    rows = pq.read_table(rk.export(folder, tmp_path / "run.parquet", format="sft")).to_pylist()
    assert sorted(rows, key=lambda row: row["id"]) == expected


def test_each_row_carries_what_its_rollout_cost(tmp_path):
    """A priced model's rollouts carry their dollars (Trace.cost_usd); an
    unpriced one's are null, never 0."""
    import asyncio

    from rollkit.core import prices

    prices.prices({"toy-priced": {"input": 1000.0, "output": 2000.0}})
    try:
        priced = demo_agent(model=ScriptedModel(_toy_reply, name="toy-priced"))
        tasks = arithmetic_tasks(2)
        traces = [asyncio.run(priced.run(t)) for t in tasks] + [asyncio.run(demo_agent().run(tasks[0]))]
    finally:
        prices.prices({"toy-priced": None})
    rows = rk.export(traces, tmp_path / "rows.jsonl", format="sft").read_text().splitlines()
    costs = [json.loads(line)["cost_usd"] for line in rows]
    assert costs[:2] == [t.cost_usd for t in traces[:2]] and all(c > 0 for c in costs[:2])
    assert costs[2] is None


def test_an_empty_run_exports_no_rows_with_typed_columns(tmp_path):
    """A run folder whose trace file is still empty (a run that just
    started): an empty typed file, with or without a filter; rl says it has
    no turns to write."""
    import pyarrow.parquet as pq

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "traces.jsonl").write_text("")
    out = rk.export(tmp_path / "run", tmp_path / "rows.parquet", format="sft", where="reward = 1")
    table = pq.read_table(out)
    assert table.num_rows == 0 and table.column_names[:3] == ["id", "run_id", "task_key"]
    with pytest.raises(rk.UsageError, match=r"the source holds no turns \(0 rollouts, 0 turns\)"):
        rk.export(tmp_path / "run", tmp_path / "rl.parquet", format="rl")
