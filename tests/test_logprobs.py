"""Token ids and logprobs: the fake provider (tests/helpers/fake_provider.py, a real
aiohttp server on 127.0.0.1) answering in vLLM's documented chat-completions
response shape (`choices[].logprobs.content[]` with token/logprob/bytes/
top_logprobs, `choices[].token_ids`, top-level `prompt_token_ids`; tokens
"token_id:N" under `return_tokens_as_token_ids`) stands in for vLLM. A real rollout with
`OpenAIModel(logprobs=True)` keeps what it sent on the trace; a real
subprocess program asking through the interception server with the openai
SDK gets them back; the calls frame and both columnar builds agree; the
"rl" export writes them back out, value for value; the transcript colours a
reply by them, escaped; bad input gets errors naming the fix."""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.fake_provider import FakeProvider

import rollkit as rk
from rollkit.core.errors import UsageError
from rollkit.notebook.display import trace_html
from rollkit.programs.openai_model import OpenAIModel, close_pools
from rollkit.tables import columns

# Replies by turn (the number of assistant messages in the request), token by
# token, with logprobs that are exact binary fractions (sums are exact).
_REPLIES = [
    [("Paris", -0.5), (" is", -0.25), (" <b>", -1.0), ("big", -2.0), ("</b>", -0.125)],
    [("You", -0.0625), ("'re", -0.5), (" welcome", -0.75)],
]


@pytest.fixture
async def vllm():
    server = await FakeProvider(replies=_REPLIES).start()
    yield server
    await close_pools()
    await server.stop()


class Capital(rk.Task):
    @rk.reward
    def answered(self, trace) -> float:
        return float(any("Paris" in (m.content or "") for m in trace.messages if m.role == "assistant"))


class Shout(rk.Task):
    @rk.intercept
    def shout(self, response: rk.Response) -> rk.Response:
        return response.model_copy(update={"message": rk.AssistantMessage(content="PARIS")})


async def _rollout(vllm: FakeProvider, **options: Any) -> rk.Trace:
    model = OpenAIModel("qwen-test", base_url=vllm.url, api_key="none", **options)
    return await rk.Agent(model=model).run(Capital(prompt="What is the capital of France?"),
                                            user=rk.ScriptedUser(["thanks"]))


async def test_a_rollout_keeps_the_ids_and_logprobs_vllm_sent(vllm, tmp_path):
    trace = await _rollout(vllm, logprobs=True, top_logprobs=2, token_ids=True)
    assert trace.ok and trace.num_turns == 2
    for sent in vllm.requests:  # what OpenAIModel asked for
        assert (sent["logprobs"], sent["top_logprobs"], sent["return_token_ids"]) == (True, 2, True)
    for call, answer, reply in zip(trace.model_calls, vllm.answers, _REPLIES):
        tokens = call.tokens
        assert tokens.prompt_ids == answer["prompt_token_ids"] and tokens.prompt_ids[0] == 1
        assert tokens.ids == answer["choices"][0]["token_ids"] == [vllm.vocab[t] for t, _ in reply]
        assert tokens.text == [t for t, _ in reply] and tokens.logprobs == [p for _, p in reply]
        assert tokens.top_logprobs == [[p, p - 1] for _, p in reply]
        assert tokens.top_text == [[t, "alt1"] for t, _ in reply] and tokens.top_ids is None
    # The second prompt holds the first turn: its ids extend the first's prompt.
    first, second = trace.model_calls
    assert second.tokens.prompt_ids[:len(first.tokens.prompt_ids)] == first.tokens.prompt_ids
    # Saved and loaded, they are the same; a trace without them writes no "tokens".
    path = rk.save([trace], tmp_path / "t.jsonl")
    assert rk.load(path) == [trace]
    calls = json.loads(path.read_text())["model_calls"]
    assert calls[0]["tokens"]["ids"] == first.tokens.ids and "top_ids" not in calls[0]["tokens"]
    # On disk the second prompt leaves out what the first prompt and reply hold (its prompt, then "Paris").
    shared = len(first.tokens.prompt_ids) + 1
    assert "prompt_shared" not in calls[0]["tokens"] and calls[0]["tokens"]["prompt_ids"] == first.tokens.prompt_ids
    assert calls[1]["tokens"]["prompt_shared"] == shared
    assert calls[1]["tokens"]["prompt_ids"] == second.tokens.prompt_ids[shared:]
    assert second.tokens.prompt_shared is None and len(second.tokens.prompt_ids) > shared


async def test_without_logprobs_nothing_is_asked_or_kept_and_token_id_strings_are_read_as_ids(vllm, tmp_path):
    plain = await _rollout(vllm)
    assert all("logprobs" not in sent and "return_token_ids" not in sent for sent in vllm.requests)
    assert [c.tokens for c in plain.model_calls] == [None, None]
    path = rk.save([plain], tmp_path / "plain.jsonl")
    assert all("tokens" not in call for call in json.loads(path.read_text())["model_calls"])
    # vLLM's return_tokens_as_token_ids writes each token "token_id:N": read as ids, no text.
    as_ids = await _rollout(vllm, logprobs=True, top_logprobs=2,
                            params={"extra_body": {"return_tokens_as_token_ids": True}})
    tokens = as_ids.model_calls[0].tokens
    assert tokens.ids == [vllm.vocab[t] for t, _ in _REPLIES[0]] and tokens.text is None
    assert tokens.prompt_ids is None and tokens.top_text is None
    assert tokens.top_ids == [[vllm.vocab[t], vllm.vocab["alt1"]] for t, _ in _REPLIES[0]]
    # SGLang sends the prompt's ids on the choice, beside the reply's.
    vllm.prompt_ids_on_the_choice = True
    sglang = await _rollout(vllm, logprobs=True, token_ids=True)
    assert sglang.model_calls[0].tokens.prompt_ids == vllm.answers[-2]["choices"][0]["prompt_token_ids"]
    assert sglang.model_calls[1].tokens.ids == vllm.answers[-1]["choices"][0]["token_ids"]


async def test_calls_frame_and_both_columnar_builds_carry_the_logprob_sums(vllm, tmp_path, monkeypatch):
    from test_columns import _same_frames
    from test_nativebuild import _same_tables

    with_tokens = await _rollout(vllm, logprobs=True, token_ids=True)
    logprobs_only = await _rollout(vllm, logprobs=True)
    plain = await _rollout(vllm)
    traces = [with_tokens, logprobs_only, plain]
    calls = rk.frames.calls(traces)
    assert list(calls["completion_logprob_sum"][:2]) == [-3.875, -1.3125]
    assert list(calls["completion_logprob_mean"][:2]) == [-3.875 / 5, -1.3125 / 3]
    assert list(calls["completion_logprob_sum"][2:4]) == [-3.875, -1.3125]
    assert calls["completion_logprob_sum"][4:].isna().all()
    assert list(calls["has_token_ids"]) == [True, True, False, False, False, False]
    path = rk.save(traces, tmp_path / "run.jsonl")
    _same_frames(path, traces)  # the Python build of the columnar store
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)
    _same_tables(path, tmp_path / "builds", monkeypatch)  # DuckDB's build against the Python one


async def test_rl_export_round_trips_per_turn_in_parquet_and_json_lines(vllm, tmp_path):
    traces = [await _rollout(vllm, logprobs=True, token_ids=True) for _ in range(2)]
    expected = []
    for trace in traces:
        for turn, call in enumerate(trace.model_calls, 1):
            expected.append({
                "id": trace.id, "rollout_id": trace.id, "task_key": trace.task.key, "turn": turn, "call": call.index,
                "prompt_ids": call.tokens.prompt_ids, "completion_ids": call.tokens.ids,
                "completion_logprobs": call.tokens.logprobs, "loss_mask": [1] * len(call.tokens.ids),
                "reward": 1.0, "finish_reason": "stop", "truncated": False, "model": "qwen-test",
                "group_id": trace.task.key, "repetition_id": None, "branch_id": trace.id, "sampling": None,
                "tokenizer": None, "chat_template_sha256": None})
    parquet = rk.export(traces, tmp_path / "rl.parquet", format="rl")
    assert pq.read_table(parquet).to_pylist() == expected
    lines = rk.export(traces, tmp_path / "rl.jsonl", format="rl")
    assert [json.loads(line) for line in lines.read_text().splitlines()] == expected
    assert expected[0]["completion_logprobs"] == [-0.5, -0.25, -1.0, -2.0, -0.125]
    # From a run folder with where=: only the rollouts it selects, in batches of one row.
    run = rk.save(traces, tmp_path / "run.jsonl")
    only = rk.export(run, tmp_path / "one.parquet", format="rl", where=f"id = '{traces[1].id}'", batch_rows=1)
    assert pq.read_table(only).to_pylist() == expected[2:]
    assert pq.ParquetFile(only).metadata.num_row_groups == 2


async def test_rl_export_masks_rewritten_and_optionally_truncated_replies_and_warns_about_turns_without_ids(
        vllm, tmp_path):
    trace = await _rollout(vllm, logprobs=True, token_ids=True)
    plain = await _rollout(vllm)

    model = OpenAIModel("qwen-test", base_url=vllm.url, api_key="none", logprobs=True, token_ids=True)
    rewritten = await rk.Agent(model=model).run(Shout(prompt="capital?"))
    assert [r.call for r in rewritten.response_rewrites] == [0]
    with pytest.warns(UserWarning, match=r"2 of 5 turns kept no token ids and were left out; record them with "
                                         r"OpenAIModel\(\.\.\., logprobs=True, token_ids=True\)"):
        path = rk.export([trace, plain, rewritten], tmp_path / "rl.jsonl", format="rl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["id"], r["loss_mask"]) for r in rows] == [(trace.id, [1] * 5), (trace.id, [1] * 3),
                                                         (rewritten.id, [0] * 5)]
    assert rewritten.model_calls[0].tokens.text == [t for t, _ in _REPLIES[0]]  # what the model sampled


async def test_rl_export_errors_name_the_fix(vllm, tmp_path):
    scripted = await rk.Agent(model=rk.ScriptedModel(["hi"])).run(rk.Task(prompt="hello"))
    with pytest.raises(UsageError) as caught:
        rk.export([scripted], tmp_path / "rl.parquet", format="rl")
    assert str(caught.value) == (
        "rk.export(format='rl'): the traces hold no token ids (1 rollouts, 1 turns); record them with "
        "OpenAIModel(..., logprobs=True, token_ids=True) against an endpoint that returns token ids (vLLM answers "
        "return_token_ids with them; OpenAI's own API returns logprobs but no ids)")
    assert not (tmp_path / "rl.parquet").exists()
    logprobs_only = await _rollout(vllm, logprobs=True)
    with pytest.raises(UsageError, match=r"the traces hold logprobs but no token ids \(1 rollouts, 2 turns, 2 with "
                                         r"logprobs only\); an RL row needs the ids: record them with"):
        rk.export([logprobs_only], tmp_path / "rl.jsonl", format="rl")
    with pytest.raises(UsageError, match=r"rl.csv ends in '.csv'; give a path ending in .parquet or .jsonl"):
        rk.export([scripted], tmp_path / "rl.csv", format="rl")
    with pytest.raises(UsageError, match=r"writes a file: give a path ending in .parquet or .jsonl"):
        rk.export([scripted], format="rl")
    with pytest.raises(UsageError, match=r"batch_rows is a whole number of rows >= 1, got 0"):
        rk.export([scripted], tmp_path / "rl.jsonl", format="rl", batch_rows=0)
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no export_meta.json


def test_openai_model_token_options_are_checked():
    with pytest.raises(UsageError, match=r"top_logprobs=3 needs logprobs=True"):
        OpenAIModel("m", api_key="k", top_logprobs=3)
    with pytest.raises(UsageError, match=r"top_logprobs is how many alternatives to keep per token .* got -1"):
        OpenAIModel("m", api_key="k", logprobs=True, top_logprobs=-1)
    with pytest.raises(UsageError, match=r"logprobs is True or False, got 'yes'"):
        OpenAIModel("m", api_key="k", logprobs="yes")
    with pytest.raises(UsageError, match=r"token_ids is True or False, got 1"):
        OpenAIModel("m", api_key="k", token_ids=1)


async def test_logprobs_that_are_not_numbers_are_a_502_naming_the_endpoint(vllm):
    model = OpenAIModel("qwen-test", base_url=vllm.url, api_key="none", logprobs=True)
    with pytest.raises(rk.ProviderError) as caught:
        await model.complete(rk.Request(messages=[rk.UserMessage(content="fake:bad_logprobs")]))
    assert caught.value.status == 502
    assert str(caught.value).startswith(f"model endpoint {vllm.url} sent logprobs that are not OpenAI's shape "
                                        "(model 'qwen-test'): ValueError: could not convert string to float")


async def test_the_transcript_colours_a_reply_by_logprob_only_when_asked_and_escaped(vllm):
    trace = await _rollout(vllm, logprobs=True, token_ids=True)
    plain = trace_html(trace)
    assert 'class="rk-tok"' not in plain
    shaded = trace_html(trace, logprobs=True)
    assert shaded.count('<span class="rk-tok"') == 8  # every token of both replies
    assert ('title="logprob -1.000 (p 0.368)"> &lt;b&gt;</span>' in shaded) and "<b>big" not in shaded
    # p = 1 is clear, p = e^-2 is red.
    assert 'style="background: rgba(220,40,40,0.65)" title="logprob -2.000' in shaded
    # Tokens that do not spell the reply are shown below it, not instead of it.
    from rollkit.notebook.display import message_html

    odd = rk.AssistantMessage(content="something else")
    html = message_html(odd, trace.model_calls[0].tokens)
    assert "something else" in html and "<summary>tokens by logprob</summary>" in html


_PROGRAM = textwrap.dedent('''
    import json, sys
    import openai

    sys.stdin.readline()
    client = openai.OpenAI()
    asked = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "capital of France?"}],
        logprobs=True, top_logprobs=2, extra_body={"return_token_ids": True})
    history = [{"role": "user", "content": "capital of France?"},
               {"role": "assistant", "content": asked.choices[0].message.content},
               {"role": "user", "content": "thanks"}]
    unasked = client.chat.completions.create(model="m", messages=history)
    stream = client.chat.completions.create(model="m", messages=history, logprobs=True, stream=True)
    streamed = [chunk.choices[0].logprobs.model_dump() for chunk in stream
                if chunk.choices and chunk.choices[0].logprobs is not None]
    with open(sys.argv[1], "w") as out:
        json.dump({"asked": asked.model_dump(), "unasked": unasked.model_dump(), "streamed": streamed}, out)
''')


async def test_a_program_asking_for_logprobs_through_the_interception_server_gets_them(vllm, tmp_path):
    program = tmp_path / "program.py"
    program.write_text(_PROGRAM)
    received = tmp_path / "received.json"
    model = OpenAIModel("qwen-test", base_url=vllm.url, api_key="none", logprobs=True)  # the host keeps them all
    harness = rk.ProgramHarness([sys.executable, str(program), str(received)])
    trace = await rk.Agent(model=model, harness=harness, runtime=rk.SubprocessRuntime).run(
        rk.Task(prompt="capital of France?"))
    assert trace.ok, trace.error
    got = json.loads(received.read_text())
    # The first call asked: the upstream request asked too, and the answer came back in OpenAI's shape.
    assert vllm.requests[0]["logprobs"] is True and vllm.requests[0]["top_logprobs"] == 2
    assert vllm.requests[0]["return_token_ids"] is True
    content = got["asked"]["choices"][0]["logprobs"]["content"]
    assert [(c["token"], c["logprob"]) for c in content] == _REPLIES[0]
    assert [[(a["token"], a["logprob"]) for a in c["top_logprobs"]] for c in content] == [
        [(t, p), ("alt1", p - 1)] for t, p in _REPLIES[0]]
    assert content[2]["bytes"] == list(b" <b>")
    assert got["asked"]["choices"][0]["token_ids"] == vllm.answers[0]["choices"][0]["token_ids"]
    assert got["asked"]["prompt_token_ids"] == vllm.answers[0]["prompt_token_ids"]
    # The second did not ask: the host asked upstream for its trace, the program gets none.
    assert vllm.requests[1]["logprobs"] is True and "top_logprobs" not in vllm.requests[1]
    assert got["unasked"]["choices"][0]["logprobs"] is None and "token_ids" not in got["unasked"]["choices"][0]
    # The streamed one gets them with its finish chunk.
    [streamed] = got["streamed"]
    assert [(c["token"], c["logprob"]) for c in streamed["content"]] == _REPLIES[1]
    # And the trace kept each call's tokens as the endpoint sent them.
    assert [c.dialect for c in trace.model_calls] == ["chat"] * 3
    assert trace.model_calls[0].tokens.ids == vllm.answers[0]["choices"][0]["token_ids"]
    assert trace.model_calls[1].tokens.logprobs == [p for _, p in _REPLIES[1]] and trace.model_calls[1].tokens.ids is None
    assert trace.model_calls[2].tokens.logprobs == [p for _, p in _REPLIES[1]]
    frame = rk.frames.calls([trace])
    pd.testing.assert_series_equal(frame["has_token_ids"], pd.Series([True, False, False], name="has_token_ids"))


async def test_atif_carries_the_token_ids_and_logprobs_both_ways(vllm, tmp_path):
    trace = await _rollout(vllm, logprobs=True, token_ids=True)
    path = rk.save([trace], tmp_path / "t.json", format="atif")
    document = json.loads(path.read_text())
    agent_steps = [s for s in document["steps"] if s["source"] == "agent"]
    for step, call in zip(agent_steps, trace.model_calls):  # ATIF v1.3's per-step fields
        metrics = step["metrics"]
        assert metrics["prompt_token_ids"] == call.tokens.prompt_ids
        assert (metrics["completion_token_ids"], metrics["logprobs"]) == (call.tokens.ids, call.tokens.logprobs)
    # Another tool's trajectory (no rollkit extra): the calls get them from the steps, and the rl export works.
    del document["extra"]
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(document))
    [loaded] = rk.load(foreign)
    assert [(c.tokens.prompt_ids, c.tokens.ids, c.tokens.logprobs) for c in loaded.model_calls] == [
        (c.tokens.prompt_ids, c.tokens.ids, c.tokens.logprobs) for c in trace.model_calls]
    rows = pq.read_table(rk.export([loaded], tmp_path / "rl.parquet", format="rl")).to_pylist()
    assert [r["completion_ids"] for r in rows] == [c.tokens.ids for c in trace.model_calls]
    agent_steps[0]["metrics"]["completion_token_ids"] = [1, "two"]
    foreign.write_text(json.dumps(document))
    with pytest.raises(rk.TraceFileError, match=r"field steps\.\d+\.metrics\.completion_token_ids should be a list "
                                                r"of token ids"):
        rk.load(foreign)
