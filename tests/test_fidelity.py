"""Field by field: `rk.load` of each real file in tests/fixtures/ against the
same file parsed independently here (plain json / zipfile, no rollkit
code), reporting every discrepancy by trace and field. The rule: 0.

The expectations are written from each tool's documented record (see
tests/fixtures/SOURCES.md): what the file says each message, tool call,
model call's usage, score and ending is.
"""

from __future__ import annotations

import json
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest

import rollkit as rk

FIXTURES = Path(__file__).parent / "fixtures"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content if p)


def _call_ids(calls: Any) -> list[tuple[str, str]]:
    out = []
    for c in calls or []:
        if isinstance(c, str):
            c = json.loads(c)
        fn = c.get("function")
        name = fn.get("name") if isinstance(fn, dict) else fn if isinstance(fn, str) else c.get("name")
        out.append((c.get("id") or c.get("tool_call_id"), name or c.get("function_name")))
    return out


def _ours(trace: rk.Trace) -> dict[str, Any]:
    return {
        "messages": [(m.role, _text(m.content)) for m in trace.messages],
        "tool_calls": [_call_ids([{"id": c.id, "name": c.name} for c in m.tool_calls])
                       for m in trace.messages if m.role == "assistant"],
        "tool_results": [m.tool_call_id for m in trace.messages if m.role == "tool"],
        "usage": [(c.usage.input_tokens, c.usage.output_tokens, c.usage.cache_read_tokens)
                  for c in trace.model_calls if c.committed],
        "outcome": trace.outcome.label,
    }


def _diff(path: Path, expected: list[dict[str, Any]], traces: list[rk.Trace]) -> list[str]:
    found = [f"{path.name}: {len(traces)} traces, the file holds {len(expected)}"] if len(traces) != len(expected) else []
    for n, (want, trace) in enumerate(zip(expected, traces)):
        got = _ours(trace) | {k: v for k, v in (("rewards", trace.rewards), ("metrics", trace.metrics)) if k in want}
        for field, value in want.items():
            if got.get(field) != value:
                found.append(f"{path.name} trace {n} field {field}: file {value!r:.300} != loaded {got.get(field)!r:.300}")
    return found


def _openai(messages: list[dict[str, Any]], skip_roles: tuple[str, ...] = ()) -> dict[str, Any]:
    kept = [m for m in messages if m.get("role") not in skip_roles]
    open_ids: list[str] = []
    results = []
    for m in kept:
        if m["role"] == "assistant":
            open_ids.extend(i for i, _ in _call_ids(m.get("tool_calls")))
        if m["role"] == "tool":
            ids = m.get("tool_call_ids")
            answered = m.get("tool_call_id") or (ids[0] if ids else None) or open_ids[0]
            open_ids.remove(answered)
            results.append(answered)
    role = {"developer": "system"}
    return {"messages": [(role.get(m["role"], m["role"]), _text(m.get("content"))) for m in kept],
            "tool_calls": [_call_ids(m.get("tool_calls")) for m in kept if m["role"] == "assistant"],
            "tool_results": results}


def test_verifiers_results_field_by_field():
    path = FIXTURES / "verifiers/math-python--gpt-5-nano/results.jsonl"
    expected = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        columns = {k: float(v) for k, v in record.items() if k in ("total_tool_calls", "python_calls",
                                                                     "correct_answer_reward_func")}
        expected.append(_openai(record["prompt"] + record["completion"]) | {
            "rewards": {"reward": record["reward"]}, "metrics": columns, "outcome": "ok",
            "usage": [(None, None, None)] * sum(m["role"] == "assistant" for m in record["completion"])})
    assert _diff(path, expected, rk.load(path)) == []


def test_verifiers_v1_traces_field_by_field():
    path = FIXTURES / "verifiers/v1-run/traces.jsonl"
    expected = []
    for line in path.read_text().splitlines():
        for trace in json.loads(line)["traces"]:
            messages = [n["message"] for n in trace["nodes"]]
            usage = [(c["usage"]["prompt_tokens"] + c["usage"].get("cached_input_tokens", 0),
                      c["usage"]["completion_tokens"], c["usage"].get("cached_input_tokens"))
                     for c in trace["calls"] if "node" in c]
            errors = trace.get("errors") or []
            expected.append(_openai(messages) | {
                "usage": usage, "rewards": {k: r["score"] for k, r in trace.get("rewards", {}).items()},
                "metrics": trace.get("metrics", {}),
                "outcome": f"failed: {errors[0]['type']}" if errors else "ok"})
    assert _diff(path, expected, rk.load(path)) == []


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "swe-agent").glob("*.traj")))
def test_swe_agent_trajectory_field_by_field(name):
    path = FIXTURES / "swe-agent" / name
    document = json.loads(path.read_text())
    status = (document.get("info") or {}).get("exit_status")
    expected = _openai(document["history"]) | {"outcome": "ok" if status in (None, "submitted") else status}
    stats = (document.get("info") or {}).get("model_stats") or {}
    (trace,) = rk.load(path)
    assert _diff(path, [expected], [trace]) == []
    if stats:  # SWE-agent's own totals, kept beside rollkit's
        assert (trace.info["source_usage"]["input_tokens"], trace.info["source_usage"]["output_tokens"]) == (
            stats["tokens_sent"], stats["tokens_received"])


def test_atif_trajectory_field_by_field():
    path = FIXTURES / "harbor/atif_rfc_example.json"
    document = json.loads(path.read_text())
    messages: list[dict[str, Any]] = []
    usage = []
    for step in document["steps"]:
        role = {"agent": "assistant"}.get(step["source"], step["source"])
        messages.append({"role": role, "content": step["message"], "tool_calls": [
            {"id": c["tool_call_id"], "name": c["function_name"]} for c in step.get("tool_calls", [])]})
        for result in (step.get("observation") or {}).get("results", []):
            messages.append({"role": "tool", "tool_call_id": result["source_call_id"], "content": result["content"]})
        if role == "assistant":
            m = step.get("metrics", {})
            usage.append((m.get("prompt_tokens"), m.get("completion_tokens"), m.get("cached_tokens")))
    expected = _openai(messages) | {"usage": usage, "outcome": "ok",
                                    "metrics": {"cost_usd": document["final_metrics"]["total_cost_usd"]}}
    assert _diff(path, [expected], rk.load(path)) == []


@pytest.mark.parametrize("name", ["airline_results.json", "whissle_airline_run1.json"])
def test_tau2_results_field_by_field(name):
    path = FIXTURES / "tau2" / name
    document = json.loads(path.read_text())
    expected = []
    for sim in document["simulations"]:
        # The agent's side: every message but the user simulator's own tool calls and their results.
        kept = [{**m, "tool_call_id": m["id"]} if m["role"] == "tool" else m for m in sim["messages"]
                if m.get("requestor") != "user" and not (m["role"] == "user" and m.get("tool_calls"))]
        # tau2's orchestrator opens with a fixed greeting it sends for the
        # agent (no usage, no provider response): a message, not a model call.
        given = sim["messages"][0]["role"] == "assistant" and not sim["messages"][0].get("usage")
        replies = [m for m in kept if m["role"] == "assistant"][1 if given else 0:]
        usage = [(m["usage"]["prompt_tokens"], m["usage"]["completion_tokens"], _cached(m)) if m.get("usage")
                 else (None, None, None) for m in replies]
        reward = sim["reward_info"]
        metrics = {f"reward.{k.lower()}": v for k, v in reward["reward_breakdown"].items()}
        expected.append(_openai(kept) | {
            "usage": usage, "rewards": {"reward": reward["reward"]},
            "metrics": metrics | {"agent_cost": sim["agent_cost"], "user_cost": sim["user_cost"]},
            "outcome": f"stopped: {sim['termination_reason']}"})
    assert _diff(path, expected, rk.load(path)) == []



def _cached(message: dict[str, Any]) -> int | None:
    """The cached prompt tokens of a tau2 message, from the provider's own usage it kept (raw_data)."""
    usage = (message.get("raw_data") or {}).get("usage") or {}
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", usage.get("cache_read_input_tokens"))


def test_tau2_results_in_the_folder_layout_load_as_the_one_file_does(tmp_path):
    """tau2's newer layout (Results.save to a folder): results.json without
    the simulations, one file per simulation in simulations/. The real
    results file, split that way, loads into the same traces."""
    path = FIXTURES / "tau2/airline_results.json"
    document = json.loads(path.read_text())
    simulations = document.pop("simulations")
    folder = tmp_path / "run"
    (folder / "simulations").mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(document))
    for sim in simulations:
        (folder / "simulations" / f"{sim['id']}.json").write_text(json.dumps(sim))

    def comparable(traces: list[rk.Trace]) -> list[dict[str, Any]]:
        rows = [t.model_dump(exclude={"id"}) for t in traces]
        for row in rows:
            row["info"].pop("file")  # names the file it came from
            # What the census keeps by source path names the simulation's file in the folder layout.
            row["info"]["source"] = {re.sub(r"^simulations[./][^.]+(\.json)?", "simulations.*", k): v
                                     for k, v in row["info"]["source"].items()}
        return sorted(rows, key=lambda row: json.dumps(row["task"], sort_keys=True, default=str))

    one_file = comparable(rk.load(path))
    assert len(one_file) == len(simulations) == 3
    assert comparable(rk.load(folder)) == one_file


def _inspect_samples(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".json":
        return json.loads(path.read_text())["samples"]
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if n.startswith("samples/"))
        return [json.loads(z.read(n)) for n in names]


@pytest.mark.parametrize("name", ["adding.eval", "adding.json"])
def test_inspect_log_field_by_field(name):
    pytest.importorskip("inspect_ai")
    path = FIXTURES / "inspect" / name
    expected = []
    for sample in sorted(_inspect_samples(path), key=lambda s: (str(s["id"]), s["epoch"])):
        scoring: set[str] = set()  # the scorers' span and the spans inside it (each scorer's own)
        for e in sample["events"]:
            if e["event"] == "span_begin" and (e.get("type") == "scorers" or e.get("parent_id") in scoring):
                scoring.add(e["id"])
        usage = []
        for event in sample["events"]:
            if event["event"] == "model" and event.get("span_id") not in scoring:
                u = event["output"]["usage"]
                read, wrote = u.get("input_tokens_cache_read"), u.get("input_tokens_cache_write")
                usage.append((u["input_tokens"] + (read or 0) + (wrote or 0), u["output_tokens"], read))
        scores = {k: {"C": 1.0, "I": 0.0}.get(v["value"], v["value"]) for k, v in sample["scores"].items()}
        limit = sample.get("limit")
        expected.append(_openai(sample["messages"]) | {
            "usage": usage, "metrics": scores | {"working_time": sample["working_time"]},
            "outcome": f"stopped: {limit['type']} limit" if limit else "ok"})
    traces = sorted(rk.load(path), key=lambda t: (str(t.info["sample_id"]), t.info["epoch"]))
    assert _diff(path, expected, traces) == []
    # The tool that failed keeps inspect's ToolCallError.
    failed = [e for t in traces for e in t.info.get("tool_errors", [])]
    assert [e["error"]["message"] for e in failed] == ["negative numbers are not supported"]


REAL_INSPECT = sorted((FIXTURES / "inspect" / "real").iterdir())


@pytest.mark.parametrize("path", [FIXTURES / "inspect" / "adding.eval", FIXTURES / "inspect" / "adding.json",
                                  *REAL_INSPECT], ids=lambda p: p.name)
def test_every_real_inspect_log_reads_as_inspects_own_reader_reads_it(path):
    pytest.importorskip("inspect_ai")
    from helpers.oracle_inspect import differences

    assert differences(path) == []


def test_the_real_inspect_logs_span_the_versions_and_providers_they_claim():
    versions = {p.name.split("_", 1)[0] for p in REAL_INSPECT}
    providers = {p.name.split("_")[1].split("-", 1)[0] for p in REAL_INSPECT}
    assert len(REAL_INSPECT) == 58 and sum(p.stat().st_size for p in REAL_INSPECT) < 15_000_000
    assert {"0.3.41", "0.3.95", "0.3.128", "0.3.208", "unrecorded"} <= versions and len(versions) == 18
    assert {"openai", "anthropic", "google", "azureai", "ollama", "mockllm", "vitals"} <= providers


def _real(fragment: str) -> Path:
    (path,) = [p for p in REAL_INSPECT if fragment in p.name]
    return path


def test_a_log_inspect_refuses_is_refused_naming_the_field_and_skip_reads_what_inspect_accepts():
    pytest.importorskip("inspect_ai")
    path = _real("gpt-4o-2024-08-06_An-R-Eval")  # vitals wrote each sample's output with a broken content part
    with pytest.raises(rk.TraceFileError, match=r"inspect-ai cannot read this log \(field samples\.0\.output\.choices"
                                                r"\.0\.message\.content\.str\): ValidationError") as refused:
        rk.load(path)
    assert "errors='skip' to read the samples inspect-ai accepts" in str(refused.value)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert rk.load(path, errors="skip") == []
    assert [str(w.message).split(": ", 1)[1].split(" (")[0] for w in said] == [
        f"sample {n} epoch 1" + ": inspect-ai cannot read it" for n in range(1, 29)]
    assert all("(field output.choices.0.message.content.str)" in str(w.message) for w in said)


def test_the_inspect_oracle_names_each_class_it_guards():
    """The oracle can fail: each known class of wrong value, put back into a
    correct trace, is reported by name."""
    pytest.importorskip("inspect_ai")
    from helpers.oracle_inspect import differences

    # 1, 2: reasoning merged into the text (an OpenAI reasoning reply: an empty reasoning part, then the text)
    gpt5 = _real("gpt-5_popularity_HdSV")
    [trace] = rk.load(gpt5)
    reply = trace.messages[2]
    reply.content, reply.parts = "[reasoning]\n" + reply.content, None
    found = differences(gpt5, [trace])
    assert any("message 2 text" in d for d in found) and any("message 2 parts" in d for d in found)
    # 3, 5: cached input counted twice (OpenAI through 0.3.183), reasoning tokens dropped
    browser = _real("browser_a30fba8")
    [trace] = rk.load(browser)
    call = trace.model_calls[1]
    assert (call.usage.input_tokens, call.usage.cache_read_tokens) == (1568, 1024)
    call.usage.input_tokens += call.usage.cache_read_tokens
    [gpt5_trace] = rk.load(gpt5)
    assert gpt5_trace.model_calls[0].usage.reasoning_tokens == 256
    gpt5_trace.model_calls[0].usage.reasoning_tokens = None
    assert any("model call 1 input" in d for d in differences(browser, [trace]))
    assert any("model call 0 reasoning tokens: inspect 256 != rollkit None" in d
               for d in differences(gpt5, [gpt5_trace]))
    # 4: failed, retried attempts dropped
    retried = _real("mockllm-fake_retry")
    [trace] = rk.load(retried)
    assert [(c.committed, c.error.type if c.error else None) for c in trace.model_calls] == [
        (False, "_Transient"), (False, "_Transient"), (True, None)]
    del trace.model_calls[:2]
    assert any("model call count: inspect 3 != rollkit 1" in d for d in differences(retried, [trace]))


# ---- issue 33, classes 6 to 11: each over the real files that show it ------------------------


def test_a_verifiers_run_folder_opens_as_verifiers_writes_it_with_its_metadata():
    folder = FIXTURES / "verifiers/math-python--gpt-5-nano"
    meta = json.loads((folder / "metadata.json").read_text())
    traces = rk.load(folder)
    assert len(traces) == len((folder / "results.jsonl").read_text().splitlines()) == 15
    assert [t.model_dump(exclude={"id"}) for t in traces] == [
        t.model_dump(exclude={"id"}) for t in rk.load(folder / "results.jsonl")]
    assert {(t.agent["name"], t.agent["model"], json.dumps(t.agent["sampling_args"])) for t in traces} == {
        (meta["env"], meta["model"], json.dumps(meta["sampling_args"]))}
    assert all(t.info["run_metadata"] == meta for t in traces)


def test_a_tau2_simulation_without_a_task_id_is_its_own_task_never_none(tmp_path):
    document = json.loads((FIXTURES / "tau2/airline_results.json").read_text())
    for sim in document["simulations"]:
        del sim["task_id"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    traces = rk.load(path)
    keys = [t.task.key for t in traces]
    assert keys == [f"simulation:{sim['id']}" for sim in document["simulations"]] and len(set(keys)) == 3
    assert all("task.key" in t.info["inferred"] for t in traces)
    named = rk.load(FIXTURES / "tau2/airline_results.json")
    assert all("task.key" not in t.info["inferred"] for t in named)


@pytest.mark.parametrize("name", ["swe-agent__test-repo-i1.traj", "pydicom__pydicom-1458.traj"])
def test_swe_agent_s_demonstration_is_not_taken_for_the_task(name):
    path = FIXTURES / "swe-agent" / name
    document = json.loads(path.read_text())
    history = document["history"]
    task = next(m["content"] for m in history if m["role"] == "user" and not m.get("is_demo"))
    (trace,) = rk.load(path)
    assert trace.task.data["prompt"] == task and task.startswith("We're currently solving the following issue")
    assert trace.info["demo_messages"] == [i for i, m in enumerate(history) if m.get("is_demo")] == [1]
    status = document["info"]["exit_status"]
    assert _diff(path, [_openai(history) | {"outcome": "ok" if status == "submitted" else status}], [trace]) == []


MINI = ["sqlfluff__sqlfluff-2419.traj.json", "pvlib__pvlib-python-1606.traj.json", "pvlib__pvlib-python-1154.traj.json"]


@pytest.mark.parametrize("name", MINI)
def test_mini_swe_agent_trajectory_field_by_field_cached_tokens_and_provider_failures(name):
    path = FIXTURES / "mini-swe-agent" / name
    document = json.loads(path.read_text())
    messages = [m for m in document["messages"] if m["role"] != "exit"]
    usage = []
    for m in messages:
        if m["role"] == "assistant":
            u = m["extra"]["response"]["usage"]
            usage.append((u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"]))
    exit_extra = document["messages"][-1]["extra"]
    raised = exit_extra.get("exception_str", "")
    # litellm's exceptions are the model provider's (L31); a submission is the agent's own finish.
    outcome = "ok" if exit_extra["exit_status"] == "Submitted" else (
        "failed: ProviderError" if raised.startswith("litellm.") else f"failed: {exit_extra['exit_status']}")
    (trace,) = rk.load(path)
    assert _diff(path, [_openai(messages) | {"usage": usage, "outcome": outcome}], [trace]) == []
    if trace.errors:
        assert (trace.error.boundary, trace.info["exit_status"]) == ("provider", exit_extra["exit_status"])
        assert trace.error.message == raised
    assert sum(cached is not None and cached > 0 for _, _, cached in usage) == len(usage)


def _atif_v15(tmp_path):
    """The RFC example with the v1.5 fields Harbor's summarising agents
    write: an agent step copied into the context (`is_copied_context`), a
    result that is a subagent's trajectory (`subagent_trajectory_ref`), and
    a file total cost that is not the steps' sum (it counts the subagent).
    Derived from the real example: no real v1.5 file could be fetched."""
    document = json.loads((FIXTURES / "harbor/atif_rfc_example.json").read_text())
    copied = {**document["steps"][1], "step_id": 0, "is_copied_context": True}
    copied.pop("observation", None)
    steps = [document["steps"][0], copied, *document["steps"][1:]]
    steps[-1] = {**steps[-1], "observation": {"results": [
        {"subagent_trajectory_ref": [{"session_id": "sub-1", "trajectory_path": "sub-1.json"}]}]}}
    for n, step in enumerate(steps, start=1):
        step["step_id"] = n
    document.update(schema_version="ATIF-v1.5", steps=steps)
    document["final_metrics"]["total_cost_usd"] = 0.00123
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(document))
    return path, document


def test_atif_copied_context_is_not_a_call_a_subagent_ref_is_kept_and_cost_has_one_source(tmp_path):
    path, document = _atif_v15(tmp_path)
    (trace,) = rk.load(path)
    steps = document["steps"]
    calls = [s for s in steps if s["source"] == "agent" and not s.get("is_copied_context")]
    assert len(trace.model_calls) == len(calls) == 2
    assert [m.role for m in trace.messages].count("assistant") == 3 and len(trace.sampled) == 2
    assert not any(m.role == "user" and m.content == "" for m in trace.messages)  # no empty message for the ref
    assert trace.info["subagent_trajectory_refs"] == [{"step_id": 4, "source_call_id": None, "message": None,
                                                       "subagent_trajectory_ref": steps[-1]["observation"]["results"][0]["subagent_trajectory_ref"]}]
    step_cost = sum(s["metrics"]["cost_usd"] for s in calls)
    assert trace.metrics["cost_usd"] == pytest.approx(step_cost)
    assert trace.info["disagreements"]["cost_usd"]["final_metrics.total_cost_usd"] == 0.00123
    assert (sum(c.usage.input_tokens for c in trace.model_calls), trace.info["inferred"]) == (
        sum(s["metrics"]["prompt_tokens"] for s in calls), ["model_calls.start", "outcome"])


@pytest.mark.parametrize("kind", ["ok", "stopped", "failed", "aborted", "incomplete"])
def test_atif_inspect_and_rollkit_round_trips_keep_the_outcome_exactly(tmp_path, kind):
    from rollkit.core.trace import TaskRef

    trace = rk.Trace(task=TaskRef.of(rk.Task(prompt="q")))
    trace.record_span("agent", 1.0, 2.0)
    if kind == "failed":
        trace.record_cut("agent")  # cut and failed: the failure wins, the cut is kept
    trace.record_outcome({"ok": rk.Outcome.ok(), "stopped": rk.Outcome.stopped("max_turns"),
                          "failed": rk.Outcome.failed("ProviderError", "provider", message="down", phase="agent"),
                          "aborted": rk.Outcome.aborted("finalize"), "incomplete": rk.Outcome.incomplete()}[kind])
    fields = ("ok", "completed", "aborted", "aborted_in", "stop_condition", "errors", "phases")
    for fmt, name in (("atif", "t.json"), ("rollkit", "t.jsonl"), ("inspect", "t.eval"), ("inspect", "t.json")):
        (back,) = rk.load(rk.save([trace], tmp_path / name, format=fmt))
        assert back.outcome == trace.outcome, fmt
        assert {f: getattr(back, f) for f in fields} == {f: getattr(trace, f) for f in fields}, fmt


def test_what_an_importer_guessed_is_shown_as_inferred_in_the_html():
    from rollkit.notebook import trace_html

    (guessed,) = rk.load(FIXTURES / "harbor/atif_rfc_example.json")  # ATIF does not say how a run ended
    page = trace_html(guessed)
    assert guessed.info["inferred"] == ["model_calls.start", "outcome"]
    assert "<i>(inferred)</i>" in page and "inferred by the importer, not read from the source" in page
    assert "how the run ended (the source does not say)" in page
    verifiers = rk.load(FIXTURES / "verifiers/math-python--gpt-5-nano/results.jsonl")[0]
    assert "tool call id of message 3" in trace_html(verifiers)
    (read,) = rk.load(FIXTURES / "swe-agent/function_calling_simple.traj")  # SWE-agent says how it ended
    assert "outcome" not in read.info.get("inferred", []) and "<i>(inferred)</i>" not in trace_html(read)


# Every verifiers run folder committed here (results.jsonl + metadata.json, from
# verifiers' own repository across September to November 2025; SOURCES.md).
VERIFIERS_RUNS = sorted(p.parent for p in (FIXTURES / "verifiers").rglob("results.jsonl"))
_VERIFIERS_FIELDS = {"id", "example_id", "prompt", "completion", "answer", "info", "task", "reward", "error",
                     "generation_ms", "scoring_ms", "total_ms", "timing", "metrics", "is_completed", "is_truncated",
                     "stop_condition", "token_usage"}


@pytest.mark.parametrize("folder", VERIFIERS_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_verifiers_run_folder_field_by_field(folder):
    meta = json.loads((folder / "metadata.json").read_text())
    expected = []
    for line in (folder / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        # Before `metrics`, each reward function's score is a top-level number column.
        metrics = record.get("metrics") or {k: float(v) for k, v in record.items()
                                            if k not in _VERIFIERS_FIELDS and isinstance(v, (int, float))}
        prompt, completion = record["prompt"], record["completion"]
        messages = (prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]) + (
            completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}])
        expected.append(_openai(messages) | {
            "rewards": {"reward": record["reward"]}, "metrics": metrics,
            "outcome": f"failed: {record['error']}" if record.get("error") else "ok",
            "usage": [(None, None, None)] * sum(m["role"] == "assistant" for m in messages)})
    traces = rk.load(folder)
    assert _diff(folder / "results.jsonl", expected, traces) == []
    assert {(t.agent["model"], t.info["run_metadata"]["model"]) for t in traces} == {(meta["model"], meta["model"])}


# ---- the tools' own readers as the oracle ------------------------------------------------
#
# A reader that cannot live in rollkit's environment runs in a virtualenv of
# its own (like benchmarks/readers.py): its python is $ROLLKIT_ORACLE_VERIFIERS_PYTHON,
# else ~/.cache/rollkit-oracles/verifiers/bin/python when that exists, made by
#     python -m venv ~/.cache/rollkit-oracles/verifiers
#     ~/.cache/rollkit-oracles/verifiers/bin/pip install verifiers==0.4.0

_VERIFIERS_SIDE = r'''
import json, sys
from pathlib import Path
from verifiers.v1.trace import Trace
from verifiers.v1.utils.trace_store import read_episodes

def text(message):
    content = getattr(message, "content", None)
    if isinstance(content, list):
        return "\n".join(getattr(p, "text", "") or "" for p in content)
    return content or ""

out = []
for episode in read_episodes(Path(sys.argv[1]), Trace):
    for trace in episode.traces:
        chain, at = [], len(trace.nodes) - 1
        while at is not None:
            chain.append(at)
            at = trace.nodes[at].parent
        path = [trace.nodes[i].message for i in reversed(chain)]
        out.append({
            "messages": [[m.role, text(m), getattr(m, "reasoning_content", None),
                          [c.id for c in getattr(m, "tool_calls", None) or []], getattr(m, "tool_call_id", None)]
                         for m in path],
            "calls": [[c.usage.prompt_tokens + (c.usage.cached_input_tokens or 0), c.usage.completion_tokens,
                       c.usage.cached_input_tokens, c.time.start, c.time.end, c.finish_reason]
                      for c in trace.calls if c.node is not None],
            "failed_calls": [[c.error.type, c.error.message, c.time.start, c.time.end]
                             for c in trace.calls if c.node is None and c.error is not None],
            "rewards": {k: r.score for k, r in trace.rewards.items()},
            "weights": {k: r.weight for k, r in trace.rewards.items()},
            "metrics": dict(trace.metrics),
            "errors": [[e.type, e.message] for e in trace.errors],
            "completed": trace.is_completed,
        })
print(json.dumps(out))
'''


def _verifiers_python() -> Path | None:
    import os

    named = os.environ.get("ROLLKIT_ORACLE_VERIFIERS_PYTHON")
    default = Path.home() / ".cache" / "rollkit-oracles" / "verifiers" / "bin" / "python"
    return Path(named) if named else default if default.exists() else None


def test_verifiers_v1_traces_against_verifiers_own_reader():
    import subprocess

    python = _verifiers_python()
    if python is None:
        pytest.skip("no virtualenv with verifiers 0.4.0: see the comment above _VERIFIERS_SIDE")
    folder = FIXTURES / "verifiers/v1-run"
    done = subprocess.run([str(python), "-c", _VERIFIERS_SIDE, str(folder)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    ours = []
    for trace in rk.load(folder):
        committed = [c for c in trace.model_calls if c.committed]
        ours.append({
            "messages": [[m.role, _text(m.content), getattr(m, "reasoning", None),
                          [c.id for c in getattr(m, "tool_calls", [])], getattr(m, "tool_call_id", None)]
                         for m in trace.messages],
            "calls": [[c.usage.input_tokens, c.usage.output_tokens, c.usage.cache_read_tokens, c.start, c.end,
                       c.finish_reason] for c in committed],
            "failed_calls": [[c.error.type, c.error.message, c.start, c.end] for c in trace.model_calls
                             if not c.committed and c.error is not None],
            # A failed run has no reward (L23): what the source scored is kept beside it.
            "rewards": trace.info.get("source_rewards") or trace.rewards,
            "weights": {k: trace.reward_weights.get(k, 1.0) for k in (trace.info.get("source_rewards") or trace.rewards)},
            "metrics": trace.metrics,
            "errors": [[e.type, e.message] for e in trace.errors],
            "completed": trace.outcome.kind in ("ok", "stopped"),  # verifiers' is_completed
        })
    differences = [f"trace {n} {field}: verifiers {t[field]!r:.300} != rollkit {o[field]!r:.300}"
                   for n, (t, o) in enumerate(zip(theirs, ours)) for field in t if t[field] != o.get(field)]
    assert (len(theirs), differences) == (len(ours), [])


# Harbor's own ATIF models (harbor needs Python 3.12: a virtualenv of its own,
# $ROLLKIT_ORACLE_HARBOR_PYTHON or ~/.cache/rollkit-oracles/harbor/bin/python, made by
#     python3.12 -m venv ~/.cache/rollkit-oracles/harbor
#     ~/.cache/rollkit-oracles/harbor/bin/pip install harbor==0.26.0
# (scripts/test.sh builds both).
_HARBOR_SIDE = r'''
import json, sys
from harbor.models.trajectories.trajectory import Trajectory

def text(value):
    if isinstance(value, list):
        return "\n".join(getattr(p, "text", "") or "" for p in value)
    return value or ""

out = []
for path in sys.argv[1:]:
    with open(path) as f:
        whole = f.read()
    try:  # one trajectory a file, or one a line
        json.loads(whole)
        lines = [whole]
    except ValueError:
        lines = [l for l in whole.splitlines() if l.strip()]
    for line in lines:
        t = Trajectory.model_validate_json(line)
        messages, calls, refs = [], [], []
        for step in t.steps:
            role = {"agent": "assistant"}.get(step.source, step.source)
            messages.append([role, text(step.message), [c.tool_call_id for c in step.tool_calls or []]])
            if step.source == "agent" and not step.is_copied_context and step.llm_call_count != 0:
                m = step.metrics
                calls.append([m.prompt_tokens, m.completion_tokens, m.cached_tokens] if m else [None, None, None])
            for r in (step.observation.results if step.observation else []):
                if r.subagent_trajectory_ref:
                    refs.append([step.step_id, [x.model_dump(exclude_none=True) for x in r.subagent_trajectory_ref]])
                if r.source_call_id:
                    messages.append(["tool", text(r.content), r.source_call_id])
                elif r.content or not r.subagent_trajectory_ref:
                    messages.append(["user", text(r.content), []])
        out.append({"messages": messages, "calls": calls, "refs": refs, "steps": len(t.steps)})
print(json.dumps(out))
'''


def _oracle_python(tool: str) -> Path | None:
    import os

    named = os.environ.get(f"ROLLKIT_ORACLE_{tool.upper()}_PYTHON")
    default = Path.home() / ".cache" / "rollkit-oracles" / tool / "bin" / "python"
    return Path(named) if named else default if default.exists() else None


def _harbor(*paths: Path) -> list[dict[str, Any]]:
    import subprocess

    python = _oracle_python("harbor")
    if python is None:
        pytest.skip("no virtualenv with harbor: see the comment above _HARBOR_SIDE")
    done = subprocess.run([str(python), "-c", _HARBOR_SIDE, *map(str, paths)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _ours_as_atif_reads(trace: rk.Trace) -> dict[str, Any]:
    messages = []
    for m in trace.messages:
        if m.role == "tool":
            messages.append(["tool", m.content, m.tool_call_id])
        else:
            messages.append([m.role, _text(m.content), [c.id for c in getattr(m, "tool_calls", [])]])
    return {"messages": messages,
            "calls": [[c.usage.input_tokens, c.usage.output_tokens, c.usage.cache_read_tokens]
                      for c in trace.model_calls if c.committed],
            "refs": [[r["step_id"], r["subagent_trajectory_ref"]] for r in trace.info.get("subagent_trajectory_refs", [])]}


def test_atif_files_against_harbor_s_own_models(tmp_path):
    derived, _ = _atif_v15(tmp_path)
    paths = [FIXTURES / "harbor/atif_rfc_example.json", derived]
    theirs = _harbor(*paths)
    for path, want in zip(paths, theirs):
        (trace,) = rk.load(path)
        ours = _ours_as_atif_reads(trace)
        assert {k: ours[k] for k in ("messages", "calls", "refs")} == {k: want[k] for k in ("messages", "calls", "refs")}


def test_every_fixture_exported_to_atif_is_accepted_whole_by_harbor(tmp_path):
    """rollkit -> ATIF: each real file of every format, exported, validates
    against Harbor's Trajectory model (extra="forbid" on every step) and
    reads back there as rollkit wrote it."""
    sources = [FIXTURES / "harbor/atif_rfc_example.json", FIXTURES / "tau2/airline_results.json",
               FIXTURES / "verifiers/v1-run", FIXTURES / "verifiers/math-python--gpt-5-nano",
               FIXTURES / "swe-agent/function_calling_simple.traj",
               FIXTURES / "mini-swe-agent/pvlib__pvlib-python-1606.traj.json"]
    if __import__("importlib").util.find_spec("inspect_ai"):
        sources.append(FIXTURES / "inspect/adding.eval")
    written = [rk.save(rk.load(source), tmp_path / f"{n}.jsonl", format="atif") for n, source in enumerate(sources)]
    theirs = _harbor(*written)
    traces = [t for path in written for t in rk.load(path)]
    assert len(theirs) == len(traces) > len(sources)
    for want, trace in zip(theirs, traces):
        ours = _ours_as_atif_reads(trace)
        assert want["calls"] == ours["calls"]
