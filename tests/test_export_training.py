"""Rows a trainer takes as they are (rk.export formats "sft", "tokens",
"preference", "prompts"), proven by the trainers' own code: TRL's data
preparation (`trl.data_utils`, and SFTTrainer's tokenization, the
tokenizer's `apply_chat_template(..., return_assistant_tokens_mask=True)`)
over every exported file, loaded by Hugging Face `datasets`, with a real
tokenizer built here (tests/helpers/chat_tokenizer.py). Rollouts run through the
real lifecycle with a model that samples through that tokenizer, as vLLM
would, so the trace's token ids are the template's. Also: the sampling
parameters a call was sent with are on the trace (through OpenAIModel and
through the interception server, against a fake vLLM on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import textwrap

import pytest

import rollkit as rk
from rollkit.core.messages import AssistantMessage
from rollkit.core.models import ScriptedModel
from rollkit.examples.arithmetic import _toy_reply, arithmetic_tasks, demo_agent

pytest.importorskip("transformers")
pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from helpers.chat_tokenizer import TemplateModel, build_tokenizer  # noqa: E402

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _flaky(request):  # type: ignore[no-untyped-def]
    """The toy calculator, whose final answer is off by one in the second
    repeat of each task (rollout id "<task>#1"): repeats score differently."""
    from rollkit.core.models import calling_rollout_key

    answer = _toy_reply(request, careful=True)
    if isinstance(answer, str) and answer.startswith("The answer is") and (calling_rollout_key.get() or "").endswith("#1"):
        return "The answer is " + str(int(answer.removeprefix("The answer is ").rstrip(".")) + 1) + "."
    return answer


def _confident(request):  # type: ignore[no-untyped-def]
    """Answers from the tool's result, with its thinking."""
    last = request.messages[-1]
    if last.role == "tool":
        return AssistantMessage(content=f"The answer is {last.content}.", reasoning="The tool computed it.")
    return _toy_reply(request)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run folder (3 tasks x 2 repeats, rewards differing within groups),
    and forks of its first rollout at turn 1 (one by the confident model,
    one by the flaky one) and of a fork (at turn 1 again)."""
    tokenizer = build_tokenizer()
    folder = tmp_path_factory.mktemp("training") / "run"
    flaky = TemplateModel(ScriptedModel(_flaky, name="flaky"), tokenizer)
    result = rk.evaluate(demo_agent(model=flaky), arithmetic_tasks(3), repeats=2, progress=False, out=folder)
    traces = sorted(result.traces, key=lambda t: (t.task.key, t.info["repeat"]))
    parent = next(t for t in traces if t.scored_reward == 0)

    async def fork(trace, reply, name):  # type: ignore[no-untyped-def]
        model = TemplateModel(ScriptedModel(reply, name=name), tokenizer)
        rollout = await rk.fork(trace, turn=1, agent=demo_agent(model=model))
        await rollout.step()
        return await rollout.close()

    good = asyncio.run(fork(parent, _confident, "confident"))
    again = asyncio.run(fork(parent, lambda r: "The answer is 0.", "wrong"))
    deeper = asyncio.run(fork(good, lambda r: "The answer is 1.", "wrong-again"))
    return folder, traces, [good, again, deeper], tokenizer


def _load(path, tmp_path):  # type: ignore[no-untyped-def]
    kind = "parquet" if str(path).endswith(".parquet") else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))


def _trl_tokenize(example, tokenizer):  # type: ignore[no-untyped-def]
    """SFTTrainer's tokenization of one conversational example with
    assistant_only_loss=True (trl 1.16, trainer/sft_trainer.py `tokenize_fn`,
    which imports torch; its steps, with trl.data_utils' own helpers), and
    the collator's rule: a token is trained where completion_mask (when
    there is one) and assistant_masks are both 1."""
    from trl.data_utils import common_prefix_length, is_conversational

    assert is_conversational(example)
    tools = example.get("tools")
    tools = json.loads(tools) if isinstance(tools, str) else tools
    kwargs = {"tools": tools, **(example.get("chat_template_kwargs") or {})}
    if "prompt" in example:
        prompt_ids = tokenizer.apply_chat_template(example["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, **kwargs)["input_ids"]
        whole = tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=True,
                                              return_dict=True, return_assistant_tokens_mask=True, **kwargs)
        prompt_length = common_prefix_length(prompt_ids, whole["input_ids"])
        assert prompt_length == len(prompt_ids)  # TRL warns otherwise: the template renders the prompt alike
        completion_mask = [0] * prompt_length + [1] * (len(whole["input_ids"]) - prompt_length)
    else:
        whole = tokenizer.apply_chat_template(example["messages"], tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True, **kwargs)
        completion_mask = [1] * len(whole["input_ids"])
    trained = [c and a for c, a in zip(completion_mask, whole["assistant_masks"])]
    return list(whole["input_ids"]), trained


def _own_ids(trace: rk.Trace) -> list[int]:
    """The token ids the branch sampled itself, call after call."""
    k = trace.info.get("forked_from", [None, 0])[1]
    return [i for c in [c for c in trace.model_calls if c.committed][k:] for i in c.tokens.ids]


def test_sft_rows_train_exactly_each_branchs_own_replies_under_trl(made, tmp_path):
    """The trained tokens of every row, as TRL tokenizes it, are exactly
    the reply tokens the branch's own calls sampled: never a tool result, a
    user or system message, nor a fork's shared prefix."""
    folder, traces, forks, tokenizer = made
    everything = traces + forks
    by_id = {t.id: t for t in everything}
    for path in (rk.export(everything, tmp_path / "rows.jsonl", format="sft"),
                 rk.export(everything, tmp_path / "rows.parquet", format="sft")):
        loaded = _load(path, tmp_path)
        assert loaded.num_rows == 9 and "messages" not in loaded.column_names
        for row in loaded:
            ids, trained = _trl_tokenize(row, tokenizer)
            assert [i for i, m in zip(ids, trained) if m] == _own_ids(by_id[row["id"]])
    # without forks, messages rows: every assistant turn is the branch's own
    loaded = _load(rk.export(folder, tmp_path / "run.jsonl", format="sft"), tmp_path)
    assert loaded.num_rows == 6 and "prompt" not in loaded.column_names
    for row in loaded:
        ids, trained = _trl_tokenize(row, tokenizer)
        assert [i for i, m in zip(ids, trained) if m] == _own_ids(by_id[row["id"]])
    # trl.data_utils renders each row through the template (the text SFT would see)
    from trl.data_utils import apply_chat_template

    text = apply_chat_template({"messages": loaded[0]["messages"]}, tokenizer, tools=loaded[0]["tools"])["text"]
    assert "<tools>" in text and '"arguments": {"expression":' in text and "null" not in text


def test_token_sequences_are_the_templates_tokens_with_labels_on_sampled_ids(made, tmp_path):
    """One merged sequence per branch: the same ids TRL makes of the sft
    row, labels -100 except the recorded completion ids, logprobs where
    sampled and 0.0 elsewhere; a fork's prefix never trained."""
    _, traces, forks, tokenizer = made
    everything = traces + forks
    by_id = {t.id: t for t in everything}
    sft = {row["id"]: row for row in _load(rk.export(everything, tmp_path / "rows.jsonl", format="sft"), tmp_path)}
    for path in (rk.export(everything, tmp_path / "seqs.jsonl", format="tokens"),
                 rk.export(everything, tmp_path / "seqs.parquet", format="tokens")):
        loaded = _load(path, tmp_path)
        assert loaded.num_rows == 9
        for row in loaded:
            trace = by_id[row["id"]]
            ids, trained = _trl_tokenize(sft[row["id"]], tokenizer)
            assert row["input_ids"] == ids and row["assistant_masks"] == trained
            assert [i for i in row["labels"] if i != -100] == _own_ids(trace)
            assert row["labels"] == [i if m else -100 for i, m in zip(ids, trained)]
            assert row["prompt_ids"] + row["completion_ids"] == row["input_ids"]
            assert row["completion_mask"] == row["assistant_masks"][len(row["prompt_ids"]):]
            k = trace.info.get("forked_from", [None, 0])[1]
            own = [c for c in trace.model_calls if c.committed][k:]
            assert row["prompt_ids"] == own[0].tokens.prompt_ids  # a fork's prefix: all prompt, never trained
            sampled = [p for c in own for p in c.tokens.logprobs]
            assert [p for p, m in zip(row["completion_logprobs"], row["completion_mask"]) if m] == sampled
            assert all(p == 0.0 for p, m in zip(row["completion_logprobs"], row["completion_mask"]) if not m)
            assert (row["sample"], row["prefix_broken"], row["turns"]) == (0, False, len(own))
            assert (row["reward"], row["group_id"], row["branch_id"]) == (
                trace.scored_reward, trace.info.get("example_id", trace.task.key), trace.id)


def test_advantage_is_normalised_within_each_group(made, tmp_path):
    folder, traces, _, _ = made
    rows = [json.loads(line) for line in rk.export(folder, tmp_path / "a.jsonl", format="tokens",
                                                   advantage="mean_std").open()]
    means = [json.loads(line) for line in rk.export(folder, tmp_path / "m.jsonl", format="tokens",
                                                    advantage="mean").open()]
    for row, centred in zip(rows, means):
        group = [t.scored_reward for t in traces if t.task.key == row["group_id"]]
        mean = sum(group) / len(group)
        std = (sum((r - mean) ** 2 for r in group) / len(group)) ** 0.5
        assert centred["advantage"] == pytest.approx(row["reward"] - mean)
        assert row["advantage"] == (pytest.approx((row["reward"] - mean) / std) if std else 0.0)
    assert sorted({row["advantage"] for row in rows}) == [-1.0, 1.0]  # each group: one right, one wrong
    plain = json.loads(rk.export(folder, tmp_path / "p.jsonl", format="tokens").open().readline())
    assert plain["advantage"] is None


def test_preference_pairs_from_forks_and_groups_tokenize_in_trl(made, tmp_path):
    from trl.data_utils import apply_chat_template, is_conversational

    _, traces, forks, tokenizer = made
    good, again, deeper = forks
    parent = next(t for t in traces if t.id == good.info["forked_from"][0])
    loaded = _load(rk.export(traces + forks, tmp_path / "pairs.jsonl", format="preference"), tmp_path)
    rows = list(loaded)
    by_source = {s: [r for r in rows if r["pair_source"] == s] for s in ("fork", "group")}
    # groups: each task's two repeats, one right and one wrong, best against worst
    assert sorted(r["group_id"] for r in by_source["group"]) == sorted({t.task.key for t in traces})
    for row in by_source["group"]:
        chosen = next(t for t in traces if t.id == row["branch_id"])
        rejected = next(t for t in traces if t.id == row["rejected_branch_id"])
        assert (row["score_chosen"], row["score_rejected"]) == (chosen.scored_reward, rejected.scored_reward) == (1, 0)
        # the repeats part at the final answer: the shared tool call and result are the prompt
        assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool"]
        task = chosen.task
        assert row["chosen"] == [{"role": "assistant", "content": f"The answer is {task.data['answer']}."}]
        assert row["rejected"] == [{"role": "assistant", "content": f"The answer is {task.data['answer'] + 1}."}]
    # forks: at turn 1 of the parent, the confident fork (right) against the parent (wrong) and the wrong fork
    at_parent = [r for r in by_source["fork"] if r["parent_id"] == parent.id]
    assert len(at_parent) == 1 and at_parent[0]["forked_at_turn"] == 1
    (pair,) = at_parent
    assert pair["branch_id"] == good.id and pair["rejected_branch_id"] in (parent.id, again.id)
    assert pair["chosen"] == [{"role": "assistant", "content": f"The answer is {good.messages[3].content}.",
                               "reasoning_content": "The tool computed it."}]
    assert [m["role"] for m in pair["prompt"]] == ["system", "user", "assistant", "tool"]
    assert pair["tools"] == good.info["tools"]
    (below,) = [r for r in by_source["fork"] if r["parent_id"] == good.id]  # the fork of a fork
    assert (below["branch_id"], below["rejected_branch_id"]) == (good.id, deeper.id)
    # every pair: TRL reads it as a conversational preference example and renders each part
    for row in rows:
        example = {k: row[k] for k in ("prompt", "chosen", "rejected")}
        assert is_conversational(example)
        text = apply_chat_template(example, tokenizer, tools=row["tools"])
        assert text["prompt"].endswith("<|im_start|>assistant\n")
        assert text["chosen"].startswith("The answer is") and text["chosen"].endswith("<|im_end|>")
        assert text["chosen"] != text["rejected"]
    # the same pairs from the saved file, read a group at a time (forks found by a first pass over its lines)
    saved = rk.save(traces + forks, tmp_path / "all_traces.jsonl")
    from_file = [json.loads(line) for line in rk.export(saved, tmp_path / "f.jsonl", format="preference").open()]
    key = lambda row: (row["pair_source"], row["branch_id"], row["rejected_branch_id"])  # noqa: E731
    assert sorted(from_file, key=key) == sorted(rows, key=key)
    # every pair over a margin: all three at the parent's turn 1, none over a margin of 1
    every = [json.loads(line) for line in rk.export(traces + forks, tmp_path / "all.jsonl", format="preference",
                                                    pairs="all").open()]
    assert len([r for r in every if r["parent_id"] == parent.id]) == 2  # right vs each wrong; the wrongs tie
    none = rk.export(traces + forks, tmp_path / "none.jsonl", format="preference", margin=1.0)
    assert none.read_text() == ""


def test_prompts_are_one_per_task_with_its_data_for_grpo(made, tmp_path):
    from trl.data_utils import apply_chat_template

    folder, traces, forks, tokenizer = made
    loaded = _load(rk.export(traces + forks, tmp_path / "prompts.jsonl", format="prompts"), tmp_path)
    assert sorted(loaded["group_id"]) == sorted({t.task.key for t in traces})
    for row in loaded:
        task = next(t for t in traces if t.task.key == row["group_id"]).task
        assert row["answer"] == task.data["answer"] and row["operation"] == task.data["operation"]
        assert row["task_prompt"] == task.data["prompt"]  # a data field named like a column
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        text = apply_chat_template({"prompt": row["prompt"]}, tokenizer, tools=row["tools"])["prompt"]
        assert text.endswith("<|im_start|>assistant\n") and task.data["prompt"] in text


def test_rows_whose_tool_schemas_differ_come_back_exactly(tmp_path):
    """Each row's tools and tool-call arguments, read back by datasets from
    JSON lines and from Parquet, are exactly the row's: no field of another
    row's schema appears (as null) in the prompt."""
    tokenizer = build_tokenizer()

    class Lookup(rk.Task):
        @rk.tool
        def lookup(self, city: str) -> str:
            """Look a city up."""
            return "sunny"

    class Calc(rk.Task):
        @rk.tool
        def calculator(self, expression: str, precision: int = 2) -> str:
            """Compute."""
            return "4"

    async def run(task, name, call):  # type: ignore[no-untyped-def]
        script = ScriptedModel([ScriptedModel.call(name, **call), "done"], name="s")
        return await rk.Agent(model=TemplateModel(script, tokenizer)).run(task(prompt="go"))

    traces = [asyncio.run(run(Lookup, "lookup", {"city": "Oslo"})),
              asyncio.run(run(Calc, "calculator", {"expression": "2+2"}))]
    assert [[t["function"]["name"] for t in trace.info["tools"]] for trace in traces] == [["lookup"], ["calculator"]]
    for path in (rk.export(traces, tmp_path / "rows.jsonl", format="sft"),
                 rk.export(traces, tmp_path / "rows.parquet", format="sft")):
        loaded = _load(path, tmp_path)
        for row, trace in zip(loaded, traces):
            assert row["tools"] == trace.info["tools"]
            assert row["messages"][1]["tool_calls"][0]["function"]["arguments"] == trace.messages[1].tool_calls[0].args()
            text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
            assert "null" not in text and "None" not in text
    strings = _load(rk.export(traces, tmp_path / "s.jsonl", format="sft", tools_as="string"), tmp_path)
    assert [json.loads(row["tools"]) for row in strings] == [t.info["tools"] for t in traces]


def test_every_format_records_what_it_was_made_from_and_takes_where(made, tmp_path):
    folder, traces, _, tokenizer = made
    right = sorted(t.id for t in traces if t.scored_reward == 1)
    options = {"sft": {}, "tokens": {}, "preference": {}, "prompts": {}}
    for fmt in options:
        path = rk.export(folder, tmp_path / f"{fmt}.jsonl", format=fmt, where="reward = 1",
                         tokenizer="test/bpe", chat_template=tokenizer.chat_template)
        rows = [json.loads(line) for line in path.open()]
        if fmt == "preference":
            assert rows == []  # one reward left: nothing to prefer
        else:
            assert sorted(r["branch_id"] for r in rows) == (right if fmt != "prompts" else sorted(
                {next(t.id for t in traces if t.scored_reward == 1 and t.task.key == k)
                 for k in {t.task.key for t in traces}}))
            import hashlib

            digest = hashlib.sha256(tokenizer.chat_template.encode()).hexdigest()
            assert {(r["tokenizer"], r["chat_template_sha256"]) for r in rows} == {("test/bpe", digest)}
    meta = json.loads((tmp_path / "export_meta.json").read_text())["files"]
    assert sorted(meta) == [f"{fmt}.jsonl" for fmt in sorted(options)]
    assert {m["format"] for m in meta.values()} == set(options)
    assert {m["rollkit_version"] for m in meta.values()} == {rk.__version__}
    assert {m["filters"]["where"] for m in meta.values()} == {"reward = 1"}
    assert meta["sft.jsonl"]["rows"] == len(right) and meta["preference.jsonl"]["rows"] == 0


def test_a_reply_a_hook_rewrote_breaks_the_prefix_and_starts_a_new_sample(tmp_path):
    tokenizer = build_tokenizer()

    class Shouted(rk.Task):
        @rk.intercept
        def shout(self, response: rk.Response) -> rk.Response:
            if response.message.tool_calls:
                return response
            return response.model_copy(update={"message": AssistantMessage(content=response.message.content.upper())})

    script = ScriptedModel(["first", "second"], name="s")
    trace = asyncio.run(rk.Agent(model=TemplateModel(script, tokenizer)).run(
        Shouted(prompt="hi"), user=rk.ScriptedUser(["more"])))
    rows = [json.loads(line) for line in rk.export([trace], tmp_path / "t.jsonl", format="tokens").open()]
    assert [(r["sample"], r["prefix_broken"], r["turns"]) for r in rows] == [(0, False, 1), (1, True, 1)]
    # the rewritten replies' sampled ids are kept but not trained
    assert [sum(r["assistant_masks"]) for r in rows] == [0, 0]
    assert [r["completion_ids"] for r in rows] == [c.tokens.ids for c in trace.model_calls]


def test_bad_options_are_refused_with_what_to_do(made, tmp_path):
    folder, traces, _, _ = made
    cases = [
        ({"format": "tokens", "advantage": "z"}, "advantage is None, 'mean' or 'mean_std', got 'z'"),
        ({"format": "tokens", "mask_truncated": 1}, "mask_truncated is True or False, got 1"),
        ({"format": "preference", "pairs": "some"}, "pairs is 'best_worst' or 'all', got 'some'"),
        ({"format": "preference", "margin": -1}, r"margin is a reward difference >= 0, got -1"),
        ({"format": "prompts", "tools_as": "x"}, "tools_as is 'objects' or 'string', got 'x'"),
    ]
    cases.append(({"format": "preference", "advantage": "mean"},
                  r"format='preference'\) has no option advantage; its options are pairs, margin, tools_as, "
                  r"tokenizer, chat_template"))
    for options, message in cases:
        with pytest.raises(rk.UsageError, match=message):
            rk.export(traces, tmp_path / "x.jsonl", **options)
    with pytest.raises(rk.UsageError, match=r"'x.parquet' ends in \.parquet; name the file with one of \.jsonl"):
        rk.export(traces, tmp_path / "x.parquet", format="preference")
    with pytest.raises(rk.UsageError, match=r"format='prompts'\) writes a file: give a path ending in \.jsonl"):
        rk.export(traces, format="prompts")
    untokened = asyncio.run(demo_agent().run(arithmetic_tasks(1)[0]))
    with pytest.raises(rk.UsageError, match=r"no call kept its token ids \(1 rollouts, 2 own turns\).*token_ids=True"):
        rk.export([untokened], tmp_path / "t.jsonl", format="tokens")
    with pytest.warns(UserWarning, match=r"2 of 14 turns kept no token ids and were left out"):
        rk.export(traces + [untokened], tmp_path / "t.jsonl", format="tokens")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export_meta.json", "t.jsonl"]


_PROGRAM = textwrap.dedent('''
    import sys
    import openai

    sys.stdin.readline()
    client = openai.OpenAI()
    history = [{"role": "user", "content": "capital of France?"}]
    first = client.chat.completions.create(model="m", messages=history, temperature=0.3, seed=7,
                                           max_completion_tokens=50)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "thanks"}]
    client.chat.completions.create(model="m", messages=history)
''')


async def test_each_call_records_the_sampling_parameters_it_was_sent_with(tmp_path):
    """As sent upstream: the host model's defaults under a program's own
    (through the interception server); none set, nothing written."""
    from helpers.fake_provider import FakeProvider

    from rollkit.programs.openai_model import OpenAIModel, close_pools

    server = await FakeProvider().start()
    try:
        program = tmp_path / "program.py"
        program.write_text(_PROGRAM)
        model = OpenAIModel("m", base_url=server.url, api_key="none", params={"temperature": 0.9, "top_p": 0.5})
        harness = rk.ProgramHarness([sys.executable, str(program)])
        trace = await rk.Agent(model=model, harness=harness, runtime=rk.SubprocessRuntime).run(rk.Task(prompt="hi"))
        assert trace.ok, trace.error
        sent = [{k: r[k] for k in ("temperature", "top_p", "seed", "max_completion_tokens") if k in r}
                for r in server.requests]
        assert sent == [{"temperature": 0.3, "top_p": 0.5, "seed": 7, "max_completion_tokens": 50},
                        {"temperature": 0.9, "top_p": 0.5}]
        assert [c.sampling for c in trace.model_calls] == [{"temperature": 0.3, "top_p": 0.5, "max_tokens": 50,
                                                            "seed": 7}, {"temperature": 0.9, "top_p": 0.5}]
        assert rk.load(rk.save([trace], tmp_path / "t.jsonl")) == [trace]
        row = json.loads(rk.export([trace], tmp_path / "rows.jsonl", format="sft").read_text())
        assert row["sampling"] == {"temperature": 0.3, "top_p": 0.5, "max_tokens": 50, "seed": 7}
        plain = await rk.Agent(model=OpenAIModel("m", base_url=server.url, api_key="none")).run(rk.Task(prompt="hi"))
        assert plain.model_calls[0].sampling is None and '"sampling"' not in plain.model_dump_json()
    finally:
        await close_pools()
        await server.stop()


def test_one_sft_and_one_dpo_step_on_the_exported_files_with_trls_trainers(made, tmp_path):
    """TRL's own trainers, where a CPU torch is installed: SFTTrainer
    tokenizes the sft file (assistant_only_loss) into labels that are
    exactly each branch's own sampled ids, and takes a step; DPOTrainer
    tokenizes the pairs and takes a step. The model is built from a config
    (one layer, nothing downloaded)."""
    import copy
    import math

    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM, Qwen2Config
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    _, traces, forks, tokenizer = made
    everything = traces + forks
    by_id = {t.id: t for t in everything}
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=32, max_position_embeddings=2048,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    common = {"max_steps": 1, "report_to": [], "use_cpu": True, "save_strategy": "no", "logging_steps": 1}
    rows = _load(rk.export(everything, tmp_path / "rows.jsonl", format="sft"), tmp_path)
    sft = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=rows,
                     args=SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=2,
                                    assistant_only_loss=True, **common))
    assert sft.train_dataset.num_rows == 9
    for row in sft.train_dataset:
        assert [i for i in row["labels"] if i != -100] == _own_ids(by_id[row["id"]])
    trained = sft.train()
    assert trained.global_step == 1 and math.isfinite(trained.training_loss)
    pairs = _load(rk.export(everything, tmp_path / "pairs.jsonl", format="preference"), tmp_path)
    dpo = DPOTrainer(model=model, ref_model=copy.deepcopy(model), processing_class=tokenizer, train_dataset=pairs,
                     args=DPOConfig(output_dir=str(tmp_path / "dpo"), per_device_train_batch_size=1, **common))
    for row in dpo.train_dataset:
        assert tokenizer.decode(row["chosen_ids"]) == row["chosen"][0]["content"] + "<|im_end|>"
        assert tokenizer.decode(row["prompt_ids"]).endswith("<|im_start|>assistant\n")
    trained = dpo.train()
    assert trained.global_step == 1 and math.isfinite(trained.training_loss)
