"""rk.tasks_from: inspect-ai tasks and reasoning-gym datasets as rollkit tasks.

The proofs run the same deterministic replies (tests/helpers/scripted_provider.py, a
keyless OpenAI-compatible server on 127.0.0.1) through each framework
natively and through rollkit, and compare the per-sample scores exactly:
inspect's own `eval` (its openai provider pointed at the server) against
`rk.evaluate` with `rk.OpenAIModel`; reasoning-gym's own loop (the openai
client, `extract_answer`, the dataset's `score_answer`) against
`rk.evaluate`. Then: keys and provenance, a saved trace forked and scored in
a new process, and bad input with its messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import rollkit as rk

pytest.importorskip("inspect_ai")
reasoning_gym = pytest.importorskip("reasoning_gym")

sys.path.insert(0, str(Path(__file__).parent))
from helpers import byo_inspect_tasks as byo  # noqa: E402
from helpers.scripted_provider import ScriptedProvider  # noqa: E402

TASKS_FILE = Path(__file__).parent / "helpers" / "byo_inspect_tasks.py"


def _scripted_agent() -> rk.Agent:
    """The embedded model answering as the scripted server does."""

    def answer(request: rk.Request) -> object:
        messages = [{"role": m.role, "content": m.content or ""} for m in request.messages]
        said = byo.reply(messages)
        return rk.ScriptedModel.call(said["tool"], **said["arguments"]) if isinstance(said, dict) else said

    return rk.Agent(rk.ScriptedModel(answer))


def _inspect_native(names: list[str], provider: ScriptedProvider, log_dir: Path) -> dict[tuple[str, str, int], dict]:
    """inspect's own eval of the tasks: {(task, sample id, epoch): {scorer: float}}."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model
    from inspect_ai.scorer import value_to_float

    model = get_model("openai/scripted", base_url=provider.url, api_key=provider.secret, responses_api=False)
    logs = inspect_eval([f"{TASKS_FILE}@{name}" for name in names], model=model, log_dir=str(log_dir),
                        display="none", log_format="json")
    to_float = value_to_float()
    scores = {}
    for log in logs:
        assert log.status == "success", log.error
        for sample in log.samples:
            scores[(log.eval.task, str(sample.id), sample.epoch)] = {
                name: to_float(score.value) for name, score in sample.scores.items()}
    return scores


def test_inspect_scores_are_inspects_own_for_match_includes_choice_a_grader_model_and_a_tool_sample(
        tmp_path, monkeypatch):
    with ScriptedProvider(byo.reply) as provider:
        # model_graded_qa(model="openai/gpt-4o-mini") finds its grader here, in inspect's eval and in rollkit alike.
        monkeypatch.setenv("OPENAI_BASE_URL", provider.url)
        monkeypatch.setenv("OPENAI_API_KEY", provider.secret)
        native = _inspect_native(["qa", "mcq", "judged"], provider, tmp_path)
        agent = rk.Agent(rk.OpenAIModel("scripted", base_url=provider.url, api_key=provider.secret))
        ours = {}
        for name in ("qa", "mcq", "judged"):
            tasks = rk.tasks_from(f"{TASKS_FILE}@{name}")
            result = rk.evaluate(agent, tasks, progress=False)  # repeats: the task's epochs (mcq: 2)
            for trace in result.traces:
                source = trace.info["source"]
                assert source["framework"] == "inspect-ai" and source["task"] == name
                ours[(name, str(source["sample_id"]), trace.info["repeat"] + 1)] = {**trace.rewards, **{
                    k: v for k, v in trace.metrics.items() if k in ("match", "includes")}}
    assert ours == native
    # The expectations, written out: right and wrong answers, includes differing from match, the tool's sample.
    assert {k[1]: v for k, v in native.items() if k[0] == "qa"} == {
        "1": {"match": 1.0, "includes": 1.0}, "2": {"match": 0.0, "includes": 0.0},
        "3": {"match": 0.0, "includes": 1.0}, "tool-add": {"match": 1.0, "includes": 1.0},
        "5": {"match": 0.0, "includes": 0.0}}
    assert {k[1:]: v["choice"] for k, v in native.items() if k[0] == "mcq"} == {
        ("fr", 1): 1.0, ("fr", 2): 1.0, ("planet", 1): 0.0, ("planet", 2): 0.0, ("prime", 1): 1.0, ("prime", 2): 1.0}
    assert {k[1]: v for k, v in native.items() if k[0] == "judged"} == {
        "sum": {"model_graded_qa": 1.0}, "capital": {"model_graded_qa": 0.0}}
    assert any(m.get("role") == "tool" for body in provider.requests for m in body["messages"])


# inspect's limits on `limited` (three turns: 11, 12 and 13 tokens, 3 of them output; 6 messages before the
# third), what stops it and the score: limits reached before a call, limits a call takes the count past
# (inspect discards that reply: it is not scored), limits that leave the answer in.
_LIMITS = [({"message_limit": 6}, "message", "I"), ({"message_limit": 7}, None, "C"),
           ({"turn_limit": 2}, "turn", "I"), ({"turn_limit": 3}, None, "C"),
           ({"token_limit": 23}, "token", "I"), ({"token_limit": 30}, "token", "I"), ({"token_limit": 36}, None, "C"),
           ({"token_limit": "output:8"}, "token", "I"), ({"token_limit": "output:9"}, None, "C"),
           # At $1 (input) and $2 (output) per token: 14, 15 and 16 dollars a turn (29, then 45 in all).
           ({"cost_limit": 29}, "cost", "I"), ({"cost_limit": 40}, "cost", "I"), ({"cost_limit": 45}, None, "C")]


def test_inspect_limits_stop_a_rollout_where_inspects_own_eval_stops_the_sample(tmp_path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelCost, ModelInfo, get_model, set_model_info
    from inspect_ai.model._model_info import clear_model_info_cache

    # The same prices on both sides, in dollars per million tokens (inspect's cost_limit needs them too).
    cost = ModelCost(input=1e6, output=2e6, input_cache_write=1e6, input_cache_read=1e6)
    set_model_info("openai/scripted", ModelInfo(cost=cost))
    rk.prices({"scripted": {"input": 1e6, "output": 2e6}})
    try:
        _compare_limits(inspect_eval, get_model, tmp_path)
    finally:
        rk.prices({"scripted": None})
        clear_model_info_cache()


def _compare_limits(inspect_eval, get_model, tmp_path) -> None:
    with ScriptedProvider(byo.reply) as provider:
        model = get_model("openai/scripted", base_url=provider.url, api_key=provider.secret, responses_api=False)
        agent = rk.Agent(rk.OpenAIModel("scripted", base_url=provider.url, api_key=provider.secret))
        logs = [inspect_eval(f"{TASKS_FILE}@limited", task_args=args, model=model, log_dir=str(tmp_path),
                             display="none", log_format="json")[0] for args, _, _ in _LIMITS]
        for (args, stopped, scored), log in zip(_LIMITS, logs):
            sample = log.samples[0]
            native = (sample.limit.type if sample.limit else None, sample.scores["includes"].value)
            trace = rk.evaluate(agent, rk.tasks_from(f"{TASKS_FILE}@limited", task_args=args),
                                progress=False).traces[0]
            condition = trace.stop_condition
            ours = (condition.removesuffix("_limit") if condition else None, "C" if trace.reward else "I")
            assert trace.ok and ours == native == (stopped, scored), args
            # The same turns; a last tool result may be on one side only (inspect keeps the one it appended
            # before its check; a rollkit trace's conversation ends with the last call's), and the reply that
            # took the tokens (or dollars) past the limit is kept on the trace (inspect discards it; its scorers do not see it).
            roles, theirs = [m.role for m in trace.messages], [m.role for m in sample.messages]
            short, long = sorted((roles, theirs), key=len)
            assert long[:len(short)] == short and long[len(short):] in ([], ["tool"], ["assistant"]), (args, roles)
            past = args in ({"token_limit": 30}, {"token_limit": "output:8"}, {"cost_limit": 40})
            assert (long[len(short):] == ["assistant"]) == past and (not past or long is roles), args


def test_a_local_sandbox_sample_runs_inspects_bash_tool_in_its_own_sandbox_as_inspects_eval_does(tmp_path):
    with ScriptedProvider(byo.reply) as provider:
        native = _inspect_native(["shell"], provider, tmp_path)
        theirs = [m for m in provider.requests[-1]["messages"] if m["role"] == "tool"][0]["content"]
        agent = rk.Agent(rk.OpenAIModel("scripted", base_url=provider.url, api_key=provider.secret))
        trace = rk.evaluate(agent, rk.tasks_from(f"{TASKS_FILE}@shell"), progress=False).traces[0]
    assert native == {("shell", "note", 1): {"includes": 1.0}} and trace.reward == 1.0 and trace.ok
    said = [m.content for m in trace.messages if m.role == "tool"][0]
    # The sample's file and its setup script's output, in a folder of its own, as inspect's eval gives them.
    # (the file has no line end: "set up" follows on its line)
    assert said.splitlines()[0] == theirs.splitlines()[0] == "hello from the fileset up"
    folder = Path(said.splitlines()[1])
    assert folder.is_absolute() and folder != Path(theirs.splitlines()[1]) and not folder.exists()  # cleaned up


def _printed_env(tasks) -> str:
    """What inspect's bash() tool printed for `env` (after the setup script's) in the first task's local sandbox."""

    def answer(request: rk.Request) -> object:
        said = [m for m in request.messages if m.role == "tool"]
        return said[-1].content if said else rk.ScriptedModel.call("bash", command="cat setup_env.txt; env; echo PWD=$(pwd)")

    trace = rk.evaluate(rk.Agent(rk.ScriptedModel(answer)), tasks, progress=False).traces[0]
    assert trace.ok, trace.error
    return [m.content for m in trace.messages if m.role == "tool"][0]


def test_a_local_sandbox_passes_no_host_api_keys_to_its_commands_unless_pass_env_names_them(monkeypatch):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import bash

    keys = {"OPENAI_API_KEY": "sk-fake-openai-4711", "ANTHROPIC_API_KEY": "sk-ant-fake-4712",
            "ROLLKIT_TEST_TOKEN": "fake-token-4713", "ROLLKIT_TEST_SECRET": "fake-secret-4714"}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    task = Task(name="envs", dataset=[Sample(input="Print the environment.", id="env", setup="env > setup_env.txt")],
                solver=[use_tools(bash()), generate()], sandbox="local")
    printed = _printed_env(rk.tasks_from(task))
    lines = dict(line.split("=", 1) for line in printed.splitlines() if "=" in line)
    # rollkit's clean environment (SubprocessRuntime's): harmless host variables (PATH is /etc/profile's:
    # inspect's bash() runs a login shell), HOME in the sandbox's folder.
    assert lines["LANG"] == "C.UTF-8"
    assert lines["HOME"] == lines["PWD"] and lines["TMPDIR"] == f"{lines['PWD']}/.tmp"
    assert not any(value in printed for value in keys.values()) and not set(keys) & set(lines)
    opted = _printed_env(rk.tasks_from(task, pass_env=["OPENAI_API_KEY", "ROLLKIT_TEST_TOKEN"]))
    assert "OPENAI_API_KEY=sk-fake-openai-4711" in opted and "ROLLKIT_TEST_TOKEN=fake-token-4713" in opted
    assert "sk-ant-fake-4712" not in opted and "fake-secret-4714" not in opted
    with pytest.raises(rk.UsageError, match=r"pass_env is a list of variable names, e\.g\. pass_env=\['OPENAI_API_KEY'\]"):
        rk.tasks_from(task, pass_env="OPENAI_API_KEY")


def _reasoning_gym_native(dataset, client) -> dict[int, float]:
    """reasoning-gym's own loop: ask, extract the answer, the dataset's score."""
    from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

    scores = {}
    for index, entry in enumerate(dataset):
        completion = client.chat.completions.create(model="scripted", messages=[
            {"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": entry["question"]}])
        scores[index] = dataset.score_answer(extract_answer(completion.choices[0].message.content), entry)
    return scores


def _gym_replies(datasets) -> dict[str, str]:
    """Per question: right, wrong, the answer among other words (partial credit), no tags."""
    replies = {}
    for dataset in datasets:
        for index, entry in enumerate(dataset):
            answer = str(entry["answer"])
            replies[entry["question"]] = [f"<answer>{answer}</answer>", "<answer>0</answer>",
                                          f"<answer>I think {answer}</answer>", answer][index % 4]
    return replies


def test_reasoning_gym_scores_are_its_own_for_datasets_with_different_scorers():
    import openai

    names = ["leg_counting", "word_sorting", "chain_sum", "fraction_simplification"]  # default, own, own, own scorer
    datasets = [reasoning_gym.create_dataset(name, size=8, seed=11) for name in names]
    replies = _gym_replies(datasets)
    with ScriptedProvider(lambda messages: replies[messages[-1]["content"]]) as provider:
        client = openai.OpenAI(base_url=provider.url, api_key=provider.secret)
        agent = rk.Agent(rk.OpenAIModel("scripted", base_url=provider.url, api_key=provider.secret))
        for name, dataset in zip(names, datasets):
            native = _reasoning_gym_native(dataset, client)
            tasks = rk.tasks_from(f"reasoning_gym:{name}", size=8, seed=11)
            result = rk.evaluate(agent, tasks, progress=False)
            ours = {t.info["source"]["index"]: t.rewards["score_answer"] for t in result.traces}
            assert ours == native, name
            assert {t.task.key for t in result.traces} == {f"{name}:11:{i}" for i in range(8)}
        client.close()
    # The raw reply changes the score: the default scorer gives partial credit on a substring.
    leg = _reasoning_gym_native(datasets[0], _Replay(replies))
    assert [leg[i] for i in range(4)][:2] == [1.0, 0.0] and 0.0 < leg[2] < 1.0 and leg[3] == 0.0


class _Replay:
    """An openai-client stand-in answering from the reply table (for the expectations only)."""

    def __init__(self, replies):
        self.chat = self
        self.completions = self
        self.replies = replies

    def create(self, model, messages):
        class Reply:
            choices = [type("C", (), {"message": type("M", (), {"content": self.replies[messages[-1]["content"]]})})]

        return Reply


def test_a_dataset_object_and_its_name_give_the_same_tasks_and_keys():
    dataset = reasoning_gym.create_dataset("chain_sum", size=5, seed=4)
    by_object = rk.tasks_from(dataset)
    by_name = rk.tasks_from("reasoning_gym:chain_sum", size=5, seed=4)
    assert [t.key for t in by_object] == [t.key for t in by_name] == [f"chain_sum:4:{i}" for i in range(5)]
    assert [t.data.prompt for t in by_object] == [e["question"] for e in dataset]
    assert by_object[0].data.system_prompt == reasoning_gym.utils.SYSTEM_PROMPTS["default"]
    assert rk.tasks_from(dataset, system_prompt=None)[0].data.system_prompt is None


def test_inspect_keys_prompts_and_provenance_follow_the_source():
    tasks = rk.tasks_from(byo.qa)
    assert [t.key for t in tasks] == ["qa:0", "qa:1", "qa:2", "tool-add", "qa:4"]
    assert [t.data.sample_id for t in tasks] == [1, 2, 3, "tool-add", 5]  # inspect's own numbering
    assert tasks[0].data.system_prompt == "Answer briefly."
    assert tasks[0].data.prompt == "Question: What is 2+2?"  # prompt_template applied
    assert tasks[4].data.metadata == {"kind": "arith"} and tasks[4].data.target == "7"
    assert [t.name for t in tasks[0].all_toolsets()[0].tools.values()] == ["add"]
    assert tasks[0].data.source == f"{TASKS_FILE.resolve()}@qa"
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import generate, system_message, user_message

    set_up = rk.tasks_from(Task(name="setup", dataset=[Sample(input="Hi")], setup=system_message("From setup."),
                                solver=[system_message("Then the solver."), generate()]))
    assert set_up[0].data.system_prompt == "From setup.\n\nThen the solver."  # inspect runs the setup first
    two_turns = Task(name="two", dataset=[Sample(input="Hi", id="h", metadata={"who": "Ann"})],
                     solver=[user_message("I am {who}."), generate()])
    with pytest.raises(rk.UsageError, match=r"sample 'h' of task 'two' opens with the messages \(user, user\)"):
        rk.tasks_from(two_turns)
    mcq = rk.tasks_from(byo.mcq)
    assert mcq.repeats == 2 and mcq[0].data.choices == ["Rome", "Paris", "Oslo"]
    assert "A) Rome\nB) Paris\nC) Oslo" in mcq[0].data.prompt


def test_by_hand_stepping_scores_and_records_where_the_task_came_from():
    async def run():
        task = rk.tasks_from(f"{TASKS_FILE}@qa")[3]
        rollout = _scripted_agent().rollout(task)
        await rollout.open()
        await rollout.step()
        return await rollout.close()

    trace = asyncio.run(run())
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trace.rewards == {} and trace.metrics["match"] == 1.0 and trace.metrics["includes"] == 1.0
    assert trace.info["source"] == {"framework": "inspect-ai", "version": trace.task.data["framework_version"],
                                    "task": "qa", "sample_id": "tool-add", "source": f"{TASKS_FILE.resolve()}@qa"}


def test_a_custom_scorer_counts_and_a_raising_scorer_is_a_signal_error_on_that_trace():
    graded = rk.evaluate(_scripted_agent(), rk.tasks_from(byo.graded), progress=False)
    values = sorted((t.metrics["includes"], t.metrics["reply_length"]) for t in graded.traces)
    assert values == [(0.0, 3.0), (1.0, 1.0)]
    broken = rk.evaluate(_scripted_agent(), rk.tasks_from(byo.broken), progress=False).traces[0]
    assert broken.ok and broken.metrics == {**broken.metrics, "explodes": None, "match": 1.0}
    assert broken.signal_errors == {"explodes": "inspect scorer 'explodes' raised RuntimeError: the grader fell over"}


_FORK_IN_A_NEW_PROCESS = textwrap.dedent("""
    import asyncio, json, sys
    import rollkit as rk
    sys.path.insert(0, sys.argv[2])
    from test_tasks_from import _scripted_agent

    async def main():
        out = {}
        for trace in rk.load(sys.argv[1]):
            rollout = await rk.fork(trace, 1, agent=_scripted_agent())
            if not rollout.waiting_for_user:
                await rollout.step()
            fork = await rollout.close()
            out[trace.task.key] = [fork.rewards, {k: v for k, v in fork.metrics.items() if k != "tool_call_success_rate"},
                                   [m.role for m in fork.messages], fork.info["source"]]
        print(json.dumps(out))

    asyncio.run(main())
""")


def test_saved_traces_fork_and_score_in_a_new_process(tmp_path):
    tasks = [*rk.tasks_from(f"{TASKS_FILE}@qa")[3:4], *rk.tasks_from("reasoning_gym:leg_counting", size=2, seed=5)]
    traces = rk.evaluate(_scripted_agent(), tasks, progress=False).traces
    path = tmp_path / "traces.jsonl"
    rk.save(traces, path)
    done = subprocess.run([sys.executable, "-c", _FORK_IN_A_NEW_PROCESS, str(path), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    forks = json.loads(done.stdout.strip().splitlines()[-1])
    rewards, metrics, roles, source = forks["tool-add"]
    assert metrics == {"match": 1.0, "includes": 1.0} and roles == ["system", "user", "assistant", "tool", "assistant"]
    assert source["task"] == "qa" and source["sample_id"] == "tool-add"
    for index in range(2):  # the scripted model never answers in tags: 0, found by the rebuilt dataset's scorer
        assert forks[f"leg_counting:5:{index}"][:2] == [{"score_answer": 0.0}, {"answer_found": 0.0}]
        assert forks[f"leg_counting:5:{index}"][3] == {"framework": "reasoning-gym", "version": forks[
            f"leg_counting:5:{index}"][3]["version"], "dataset": "leg_counting", "seed": 5, "index": index,
            "sample_id": f"5:{index}"}


def test_a_run_mixing_both_frameworks_groups_by_source_in_frames_and_in_the_run_folders_tables(tmp_path):
    tasks = [*rk.tasks_from(f"{TASKS_FILE}@qa"), *rk.tasks_from("reasoning_gym:leg_counting", size=3, seed=5)]
    result = rk.evaluate(_scripted_agent(), tasks, out=tmp_path / "run", progress=False)
    eager = rk.frames.rollouts(result.traces)
    stored = rk.frames.rollouts(tmp_path / "run")  # the run folder's columnar tables (native or Python build)
    for frame in (eager, stored):
        counts = frame.groupby("source_task").size().to_dict()
        assert counts == {"qa": 5, "leg_counting": 3}
        by_framework = frame.groupby("source_framework")["task_key"].apply(sorted).to_dict()
        assert by_framework == {"inspect-ai": ["qa:0", "qa:1", "qa:2", "qa:4", "tool-add"],
                                "reasoning-gym": [f"leg_counting:5:{i}" for i in range(3)]}
        samples = dict(zip(frame["task_key"], frame["source_sample"]))
        assert samples["qa:0"] == "1" and samples["tool-add"] == "tool-add" and samples["leg_counting:5:2"] == "5:2"
        import inspect_ai

        assert set(frame["source_version"]) == {inspect_ai.__version__, tasks[-1].data.framework_version}
    rows = rk.open_run(tmp_path / "run").sql(
        "select source_framework, count(*) as n from rollouts group by 1 order by 1")
    assert list(zip(rows["source_framework"], rows["n"])) == [("inspect-ai", 5), ("reasoning-gym", 3)]


def test_a_task_built_in_memory_is_refused_when_a_new_process_rebuilds_it(tmp_path):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample

    tasks = rk.tasks_from(Task(name="inline", dataset=[Sample(input="What is 2+2?", target="4")]))
    assert tasks[0].data.source.startswith("memory:inline#")
    path = tmp_path / "traces.jsonl"
    rk.save(rk.evaluate(_scripted_agent(), tasks, progress=False).traces, path)
    script = "import sys, rollkit as rk\nfrom rollkit.core.prefix import task_of\ntask_of(rk.load(sys.argv[1])[0])"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "the inspect task inline" in done.stderr and "built in memory in another process" in done.stderr
    assert "'file.py@name'" in done.stderr


_DEMO_TASKS = textwrap.dedent("""
    from pathlib import Path

    from inspect_ai import Task, task
    from inspect_ai.dataset import hf_dataset, json_dataset
    from inspect_ai.scorer import match

    DATA = Path(__file__).parent / "addition.jsonl"


    @task
    def addition():
        return Task(dataset=json_dataset(str(DATA)), scorer=match())


    @task
    def hub_addition():  # a hub dataset (the datasets library's json builder): loaded once, then inspect's cache
        return Task(dataset=hf_dataset("json", split="train", data_files=str(DATA)), scorer=match())
""")

_REGISTERED_IN_A_NEW_PROCESS = textwrap.dedent("""
    import json, os, sys
    import rollkit as rk
    from rollkit.core.prefix import task_of
    from rollkit.interop.tasks import inspect_tasks

    agent = rk.Agent(rk.ScriptedModel(lambda request: "4"))
    tasks = rk.tasks_from("rk_demo_evals/addition")
    traces = rk.evaluate(agent, tasks, progress=False).traces
    out = {"keys": [t.key for t in tasks], "rewards": {t.task.key: t.reward for t in traces},
           "source": traces[0].info["source"]["source"]}
    hub = rk.tasks_from("rk_demo_evals/hub_addition")
    trace = rk.evaluate(agent, hub[1:], progress=False).traces[0]
    os.remove(sys.argv[1])  # gone: the rebuilt hub task reads inspect's cache, the file task cannot load
    inspect_tasks._LOADED.clear()
    rebuilt = task_of(trace)
    out["hub"] = [[t.key, t.data.prompt] for t in hub] + [[rebuilt.key, rebuilt.data.prompt]]
    try:
        rk.tasks_from("rk_demo_evals/nope")
    except rk.UsageError as e:
        out["nope"] = str(e)
    print(json.dumps(out))
""")


def test_a_task_an_installed_package_registers_loads_by_name_and_its_hub_dataset_from_the_cache_offline(tmp_path):
    # An installed package with an inspect entry point, as inspect_evals is one: a site-packages folder on the
    # path (inspect namespaces the tasks of packages installed there) holding it and its dist-info.
    site = tmp_path / "site-packages"
    (site / "rk_demo_evals").mkdir(parents=True)
    (site / "rk_demo_evals" / "__init__.py").write_text("")
    (site / "rk_demo_evals" / "tasks.py").write_text(_DEMO_TASKS)
    (site / "rk_demo_evals" / "_registry.py").write_text("from .tasks import addition, hub_addition\n")
    data = site / "rk_demo_evals" / "addition.jsonl"
    data.write_text('{"input": "What is 2+2?", "target": "4", "id": "a"}\n'
                    '{"input": "What is 3+3?", "target": "6", "id": "b"}\n')
    (site / "rk_demo_evals-0.1.dist-info").mkdir()
    (site / "rk_demo_evals-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rk-demo-evals\nVersion: 0.1\n")
    (site / "rk_demo_evals-0.1.dist-info" / "entry_points.txt").write_text(
        "[inspect_ai]\nrk_demo_evals = rk_demo_evals._registry\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _REGISTERED_IN_A_NEW_PROCESS, str(data)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["keys"] == ["a", "b"] and out["rewards"] == {"a": 1.0, "b": 0.0}
    assert out["source"] == "rk_demo_evals/addition"
    assert out["hub"] == [["a", "What is 2+2?"], ["b", "What is 3+3?"], ["b", "What is 3+3?"]]
    assert done.stdout.count("Loading dataset json from Hugging Face") == 1  # then inspect's cache
    assert out["nope"] == ("the package 'rk_demo_evals' registers no inspect task named 'nope'; its tasks are "
                           "listed by `inspect list tasks` or the package's documentation")


def test_a_registry_name_whose_package_is_not_installed_names_the_package_to_install():
    with pytest.raises(rk.UsageError) as caught:
        rk.tasks_from("inspect_evals_not_here/gsm8k")
    assert str(caught.value) == (
        "the inspect task 'inspect_evals_not_here/gsm8k' is in the package 'inspect_evals_not_here', which is not "
        "installed here: pip install inspect_evals_not_here (it registers its tasks with inspect when installed)")


# ---- bad input ----------------------------------------------------------------


def test_something_that_is_no_source_is_refused_naming_its_type_and_what_is_accepted():
    with pytest.raises(rk.UsageError) as caught:
        rk.tasks_from(42)
    message = str(caught.value)
    assert "cannot take a builtins.int" in message
    assert ("an inspect-ai Task, a @task function, 'file.py@name', or 'PACKAGE/NAME' (a task an installed package "
            "registers, e.g. 'inspect_evals/gsm8k')") in message
    assert "'reasoning_gym:NAME' (with size= and seed=) or a reasoning-gym dataset" in message
    with pytest.raises(rk.UsageError, match=r"cannot take 'gsm8k'"):
        rk.tasks_from("gsm8k")


def test_an_unknown_reasoning_gym_name_is_refused_naming_it():
    with pytest.raises(rk.UsageError) as caught:
        rk.tasks_from("reasoning_gym:leg_countin", size=3)
    assert "reasoning-gym has no dataset 'leg_countin' (did you mean leg_counting" in str(caught.value)


def test_samples_rollkit_cannot_run_are_refused_by_id_with_the_reason():
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser, ContentAudio, ContentText

    docker = Task(name="boxed", dataset=[Sample(input="ls", id="s1"), Sample(input="ls", id="s2", sandbox="docker")])
    with pytest.raises(rk.UsageError, match=r"inspect sample 's2' of task 'boxed' needs a 'docker' sandbox"):
        rk.tasks_from(docker)
    assert rk.tasks_from(Task(name="local", dataset=[Sample(input="ls", sandbox="local")]))[0].data.prompt == "ls"
    audio = Task(name="heard", dataset=[Sample(id="a1", input=[ChatMessageUser(content=[
        ContentText(text="transcribe"), ContentAudio(audio="clip.mp3", format="mp3")])])])
    with pytest.raises(rk.UsageError, match=r"inspect sample 'a1' of task 'heard' has audio input"):
        rk.tasks_from(audio)


def test_an_agent_solver_is_replaced_and_said_once():
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import basic_agent

    agentic = Task(name="agentic", dataset=[Sample(input="What is 2+2?", target="4")] * 3, solver=basic_agent())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tasks = rk.tasks_from(agentic)
    said = [str(w.message) for w in seen if "replaced by the rollkit agent" in str(w.message)]
    assert said == ["inspect task 'agentic': its agent solver inspect_ai/basic_agent is replaced by the rollkit agent "
                    "under test (the solver's own tools and prompt are not used)"]
    assert tasks[0].data.prompt == "What is 2+2?" and tasks[0].data.system_prompt is None


def test_time_limits_rollkit_does_not_check_are_said_with_why_and_cost_limit_needs_a_price():
    from inspect_ai import Task
    from inspect_ai.dataset import Sample

    timed = Task(name="timed", dataset=[Sample(input="Hi")], time_limit=30, working_limit=20, message_limit=9,
                 cost_limit=0.5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tasks = rk.tasks_from(timed)
    said = [str(w.message) for w in seen if "not checked by rollkit" in str(w.message)]
    assert said == ["inspect task 'timed': time_limit=30, working_limit=20 is not checked by rollkit: inspect ends a "
                    "sample out of time and scores it, interrupting a model or tool call in progress; rollkit's only "
                    "time budget, rk.Agent(..., timeouts=rk.RolloutTimeouts(agent=SECONDS)) (agent time, close to "
                    "working_limit), ends the rollout as a failure, unscored; set it on the agent if that is what "
                    "you want"]
    assert tasks[0].data.limits == {"message_limit": 9, "cost_limit": 0.5}
    # cost_limit needs a price, as inspect's eval refuses one without cost data: the rollout fails at setup.
    trace = rk.evaluate(rk.Agent(rk.ScriptedModel(lambda request: "hi")), tasks, progress=False).traces[0]
    assert not trace.ok and "cost_limit=0.5, which needs a price for model 'scripted'" in trace.error.message


def test_a_missing_framework_names_the_extra_to_install():
    script = ("import sys; sys.modules['reasoning_gym'] = None\nimport rollkit as rk\n"
              "try:\n    rk.tasks_from('reasoning_gym:leg_counting')\nexcept rk.Unavailable as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "pip install 'rollkit[reasoning-gym]'" in done.stdout, done.stderr


def test_turn_values_replays_and_the_inspect_export_work_on_these_tasks_unchanged(tmp_path):
    tasks = [*rk.tasks_from(f"{TASKS_FILE}@qa")[3:4], *rk.tasks_from(byo.mcq)[:1]]
    traces = {t.task.key: t for t in rk.evaluate(_scripted_agent(), tasks, progress=False).traces}
    tool_trace, mcq_trace = traces["tool-add"], traces["fr"]
    values = rk.turn_values(tool_trace, _scripted_agent(), n=2, progress=False,
                            success=lambda t: t.metrics.get("match") == 1.0)
    # From the start the continuations call the task's tool again; each is scored by inspect's match().
    assert [(row["action"], row["successes"], row["forked"]) for row in values.rows] == [
        ("(start)", 2, True), ('add({"x": 3, "y": 4})', 2, True), ("The tool says 7, so the answer is 7", 1, False)]
    @rk.stop
    def after_the_tool(request: rk.Request) -> bool:
        return any(m.role == "tool" for m in request.messages)

    rows = rk.replay_hooks([tool_trace, mcq_trace], [after_the_tool])
    assert sorted(zip(rows["task_key"], rows["turn"], rows["fired"])) == [
        ("fr", 1, False), ("tool-add", 1, False), ("tool-add", 2, True)]
    path = tmp_path / "run.eval"
    rk.save([tool_trace, mcq_trace], path, format="inspect")
    back = {t.task.key: t for t in rk.load(path)}
    assert back["tool-add"].metrics["match"] == 1.0 and back["fr"].reward == mcq_trace.reward == 1.0


def test_import_rollkit_and_reaching_tasks_from_load_neither_framework():
    script = ("import sys, rollkit as rk\nrk.tasks_from\n"
              "print(sorted(m for m in ('inspect_ai', 'reasoning_gym') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr
