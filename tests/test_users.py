"""Users: whoever speaks between segments (rollkit.core.users).

ScriptedUser, RecordedUser (with its divergence flags), AgentUser (its own
trace, charged apart: L9 on both sides), a person in the notebook recorded
for replay, bad users failing the run as a TaskError, the max_user_turns
limit, evaluate(user=...) with a run folder and with resume after SIGKILL,
and `rollkit eval --user`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import pytest
from helpers.evaluate_helpers import HERE, chat_agent, chat_user, said_tasks, sigkill, start_gated, wait_blocked

import rollkit as rk
from conftest import ticking
from rollkit.core.clock import FakeClock
from rollkit.notebook.stepping import NotebookRollout
from rollkit.examples import (
    customer_persona, support_agent, support_tasks, toy_customer, toy_customer_model,
)

ALL_12 = sorted(f"said-{i}#{r}" for i in range(6) for r in range(2))


def echo() -> rk.Agent:
    return rk.Agent(model="echo")


def texts(trace: rk.Trace, role: str = "user") -> list[str]:
    return [m.content for m in trace.messages if m.role == role]


# ---- ScriptedUser ---------------------------------------------------------------


async def test_scripted_user_speaks_its_turns_in_order_and_each_is_recorded():
    trace = await echo().run(rk.Task(prompt="hi"), user=rk.ScriptedUser(["a", "b"]))
    assert texts(trace) == ["hi", "a", "b"]
    assert texts(trace, "assistant") == ["You said: hi", "You said: a", "You said: b"]
    assert [(u.index, u.segment, u.by, u.messages[0].content, u.replying_to) for u in trace.user_turns] == [
        (0, 1, "scripted-user", "a", "You said: hi"),
        (1, 2, "scripted-user", "b", "You said: a"),
    ]
    assert trace.ok and trace.stop_condition is None and len(trace.segments) == 3


async def test_a_none_in_the_list_ends_the_conversation_and_a_promptless_task_lets_the_user_open():
    trace = await echo().run(rk.Task(), user=rk.ScriptedUser(["open", None, "never said"]))
    assert texts(trace) == ["open"]
    assert trace.user_turns[0].segment == 0 and trace.user_turns[0].replying_to == ""


async def test_a_function_user_sync_or_async_sees_the_trace():
    def sync_user(trace: rk.Trace) -> str | None:
        return None if trace.num_turns >= 2 else f"turn {trace.num_turns}"

    async def async_user(trace: rk.Trace) -> str | None:
        return None if trace.num_turns >= 3 else rk.UserMessage(content=f"async {trace.num_turns}")

    one = await echo().run(rk.Task(prompt="hi"), user=rk.ScriptedUser(sync_user))
    two = await echo().run(rk.Task(prompt="hi"), user=rk.ScriptedUser(async_user))
    assert texts(one) == ["hi", "turn 1"]
    assert texts(two) == ["hi", "async 1", "async 2"]


async def test_one_user_object_serves_many_rollouts_at_once():
    import asyncio

    user = rk.ScriptedUser(["x", "y"])
    traces = await asyncio.gather(*(echo().run(rk.Task(prompt=f"p{i}"), user=user) for i in range(20)))
    assert all(texts(t) == [f"p{i}", "x", "y"] for i, t in enumerate(traces))


# ---- limits and bad users -------------------------------------------------------


async def test_max_user_turns_refuses_the_turn_past_it_as_a_clean_stop():
    agent = rk.Agent(model="echo", limits=rk.RolloutLimits(max_user_turns=2))
    trace = await agent.run(rk.Task(prompt="hi"), user=rk.ScriptedUser(["a", "b", "c", "d"]))
    assert texts(trace) == ["hi", "a", "b"]
    assert trace.stop_condition == "max_user_turns" and trace.stop == "max_user_turns"
    assert trace.ok and trace.scored  # a stop is scored (L24)
    assert trace.limits["max_user_turns"] == 2


async def test_the_cap_refuses_before_the_user_is_asked_so_an_agent_user_spends_nothing_undelivered():
    agent = support_agent(limits=rk.RolloutLimits(max_turns=10, max_user_turns=1))
    trace = await agent.run(support_tasks(1)[0], user=customer())
    [user_trace] = trace.user_traces
    assert trace.stop_condition == "max_user_turns" and len(trace.user_turns) == 1
    # The customer was asked once and said one thing: both traces agree.
    assert texts(user_trace, "assistant") == [u.messages[0].content for u in trace.user_turns]


async def test_a_user_stop_ends_the_conversation_as_a_scored_clean_stop():
    trace = await echo().run(Rewarded(prompt="hi"), user=rk.ScriptedUser(["a", rk.UserStop("satisfied")]))
    assert trace.stop_condition == "satisfied" and trace.ok and trace.rewards == {"said_something": 1.0}
    assert len(trace.user_turns) == 1


class Rewarded(rk.Task):
    @rk.reward
    def said_something(self, trace: rk.Trace) -> float:
        return 1.0


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (rk.ScriptedUser(["fine", 5]), "user 'scripted-user' returned int 5, which is not a turn"),
        (rk.ScriptedUser(["   "]), "user 'scripted-user' returned an empty message; return None to end the conversation"),
        (rk.ScriptedUser([[]]), "user 'scripted-user' returned no messages; return None to end the conversation"),
        (rk.ScriptedUser(lambda trace: 1 / 0, name="divider"), "user 'divider' raised ZeroDivisionError: division by zero"),
        (rk.ScriptedUser(lambda trace: (_ for _ in ()).throw(rk.ProviderError("its model is down", status=503)), name="typed"),
         "user 'typed' raised ProviderError: its model is down"),
        (rk.ScriptedUser([[{"role": "assistant", "content": "I am the agent now"}]]),
         "user 'scripted-user' returned a message with role 'assistant'; a user speaks user messages only"),
        (rk.ScriptedUser([rk.SystemMessage(content="obey")]), "returned a message with role 'system'"),
    ],
)
async def test_a_user_that_raises_or_returns_no_turn_fails_the_run_unscored(user, message):
    trace = await echo().run(Rewarded(prompt="hi"), user=user)
    assert trace.error.type == "TaskError" and trace.error.phase == "user"
    assert message in trace.error.message
    assert trace.ok is False and not trace.scored and trace.rewards == {}  # L23: not scored
    assert texts(trace, "assistant")[0] == "You said: hi"  # what ran is kept


async def test_a_promptless_task_whose_user_opens_with_a_wrong_role_fails_as_a_task_error():
    trace = await echo().run(rk.Task(), user=rk.ScriptedUser([rk.SystemMessage(content="x")]))
    assert trace.error.type == "TaskError" and "role 'system'" in trace.error.message


async def test_wrong_kinds_of_user_are_refused_before_anything_runs():
    with pytest.raises(TypeError, match="ScriptedUser takes a list of turns or a function of the trace"):
        rk.ScriptedUser("just one string")
    with pytest.raises(TypeError, match=r"user must be a rk.User \(e.g. rk.ScriptedUser\(\[...\]\)\), got list"):
        await echo().run(rk.Task(prompt="hi"), user=["a"])
    with pytest.raises(TypeError, match="user=ScriptedUser is a class; pass a rk.User instance"):
        rk.evaluate(echo(), [rk.Task(prompt="hi")], user=rk.ScriptedUser)
    rollout = echo().rollout(rk.Task(prompt="hi"), user=True)
    await rollout.open()
    with pytest.raises(TypeError, match=r"user must be a rk.User \(e.g. rk.ScriptedUser\(\[...\]\)\), got str"):
        await rk.converse(rollout, "not a user")
    await rollout.close()


# ---- RecordedUser ---------------------------------------------------------------


async def _recorded(chatty_index: int = 2) -> tuple[rk.Task, rk.Trace]:
    task = support_tasks(3)[chatty_index]
    return task, await support_agent().run(task, user=toy_customer())


async def test_recorded_user_replays_the_same_turns_and_flags_nothing_against_the_same_agent():
    task, recorded = await _recorded()
    replay = await support_agent().run(task, user=rk.RecordedUser(recorded))
    assert texts(replay) == texts(recorded)
    assert [(u.similarity, u.diverged) for u in replay.user_turns] == [(1.0, False), (1.0, False)]
    assert replay.info["replayed_from"] == recorded.id and replay.info["diverged_at"] is None


async def test_recorded_user_flags_where_another_agent_diverged_and_goes_on():
    recorded = await support_agent(careful=True).run(support_tasks(3)[2], user=toy_customer())
    replay = await support_agent().run(support_tasks(3)[2], user=rk.RecordedUser(recorded))
    flags = [(u.diverged, u.similarity is not None and u.similarity < 0.8) for u in replay.user_turns]
    assert flags == [(False, False), (True, True)]  # the careless model looked up the wrong order
    assert replay.info["diverged_at"]["user_turn"] == 1
    assert replay.info["diverged_at"]["similarity"] == replay.user_turns[1].similarity
    assert len(replay.user_turns) == 2  # flag: it replayed every turn


async def test_on_divergence_stop_ends_the_replay_at_the_divergence():
    recorded = await support_agent(careful=True).run(support_tasks(3)[2], user=toy_customer())
    replay = await support_agent().run(support_tasks(3)[2], user=rk.RecordedUser(recorded, on_divergence="stop"))
    assert len(replay.user_turns) == 1 and replay.info["diverged_at"]["user_turn"] == 1
    assert replay.ok and replay.stop_condition == "diverged" and replay.scored  # a clean stop, scored


async def test_on_divergence_a_user_takes_over_from_that_turn():
    recorded = await support_agent(careful=True).run(support_tasks(3)[2], user=toy_customer())
    fallback = rk.ScriptedUser(["That is not my order."], name="fallback")
    replay = await support_agent().run(support_tasks(3)[2], user=rk.RecordedUser(recorded, on_divergence=fallback))
    assert [u.by for u in replay.user_turns] == ["recorded-user", "fallback"]
    assert replay.user_turns[1].messages[0].content == "That is not my order."
    assert replay.user_turns[1].diverged is True and replay.user_turns[1].similarity < 0.8  # the turn that diverged
    assert replay.info["handed_over_to"] == "fallback"


async def test_the_threshold_decides_what_counts_as_diverged():
    recorded = await support_agent(careful=True).run(support_tasks(3)[2], user=toy_customer())
    lenient = await support_agent().run(support_tasks(3)[2], user=rk.RecordedUser(recorded, threshold=0.5))
    assert [u.diverged for u in lenient.user_turns] == [False, False] and lenient.info["diverged_at"] is None


async def test_one_agent_user_and_one_handing_over_recorded_user_serve_many_rollouts_at_once():
    import asyncio

    recorded = await support_agent(careful=True).run(support_tasks(3)[2], user=toy_customer())
    shared_customer = customer()
    replayer = rk.RecordedUser(recorded, on_divergence=toy_customer())
    chatty = support_tasks(3)[2]
    played = await asyncio.gather(*(support_agent().run(t, user=shared_customer) for t in support_tasks(9)))
    replays = await asyncio.gather(*(support_agent(careful=i % 2 == 0).run(chatty, user=replayer) for i in range(8)))
    assert [t.reward for t in played] == [1.0, 1.0, 0.0] * 3
    assert len({t.info["user_trace_id"] for t in played}) == 9  # one user rollout per conversation
    assert all(t.user_traces[0].info["assistant_trace_id"] == t.id for t in played)
    # Careful replays match the recording; careless ones diverge and are handed over.
    assert [r.info.get("handed_over_to") for r in replays] == [None, "toy-customer"] * 4
    assert [r.reward for r in replays] == [1.0, 0.0] * 4


def test_similarity_is_documented_and_symmetric_enough():
    assert rk.core.similarity("Order 12: shipped", "order  12:   SHIPPED") == 1.0
    assert rk.core.similarity("", "") == 1.0
    assert 0.0 <= rk.core.similarity("abc", "xyz") < 0.2


async def test_recorded_user_refuses_a_trace_without_user_turns_and_bad_options():
    single = await echo().run(rk.Task(prompt="hi"))
    with pytest.raises(ValueError, match=f"trace {single.id} has no user turns to replay"):
        rk.RecordedUser(single)
    _, recorded = await _recorded()
    with pytest.raises(ValueError, match="on_divergence must be 'flag', 'stop' or a rk.User, got 'skip'"):
        rk.RecordedUser(recorded, on_divergence="skip")
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        rk.RecordedUser(recorded, threshold=1.5)
    with pytest.raises(TypeError, match="RecordedUser replays a rk.Trace, got dict"):
        rk.RecordedUser({})


async def test_a_person_stepping_in_the_notebook_is_recorded_and_replayable():
    task = support_tasks(1)[0]
    ro = NotebookRollout(support_agent(), task)  # the async form: no nest-asyncio in the test process
    await ro.open_async()
    await ro.step_async()
    await ro.step_async(f"It's {task.data.order}.")
    await ro.step_async("No, that's all, thanks!")
    person = await ro.close_async()
    assert [u.by for u in person.user_turns] == ["person", "person"]
    replay = await support_agent().run(task, user=rk.RecordedUser(person))
    assert texts(replay) == texts(person)
    assert replay.rewards == person.rewards == {"told_status": 1.0}


# ---- AgentUser ---------------------------------------------------------------------


def customer() -> rk.AgentUser:
    return rk.AgentUser(rk.Agent(model=toy_customer_model()), persona=customer_persona)


async def test_agent_user_plays_the_customer_in_its_own_linked_trace():
    task = support_tasks(1)[0]
    trace = await support_agent().run(task, user=customer())
    [user_trace] = trace.user_traces
    assert trace.rewards == {"told_status": 1.0}
    assert trace.info["user_trace_id"] == user_trace.id and user_trace.info["assistant_trace_id"] == trace.id
    assert [u.by for u in trace.user_turns] == ["agent-user", "agent-user"]
    # What the assistant said is what its user heard, and the other way round.
    assert texts(user_trace, "user") == [u.replying_to for u in trace.user_turns] + [trace.last_reply]
    assert texts(user_trace, "assistant")[:2] == [u.messages[0].content for u in trace.user_turns]
    assert user_trace.last_reply == "<<done>>"
    assert f"order number {task.data.order}" in user_trace.messages[0].content  # the persona


async def test_L9_agent_user_and_assistant_are_each_charged_only_their_own_time_and_tokens():
    # One fake clock: the assistant's model takes 1 s a call, the user's 0.25 s, nothing else takes time.
    clock = FakeClock()
    assistant = support_agent()
    assistant.clock = clock
    ticking(assistant.model, clock, 1.0)
    user = rk.AgentUser(rk.Agent(model=ticking(toy_customer_model(), clock, 0.25), clock=clock),
                        persona=customer_persona)
    trace = await assistant.run(support_tasks(1)[0], user=user)
    [user_trace] = trace.user_traces

    def inside(call: rk.core.trace.ModelCall, segments: list) -> bool:
        return any(s.start <= call.start and call.end <= s.end for s in segments)

    # Each side's model calls ran inside its own segments and outside the other's:
    # the assistant waited for its user for free, and the user for the assistant.
    assert all(inside(c, trace.segments) and not inside(c, user_trace.segments) for c in trace.model_calls)
    assert all(inside(c, user_trace.segments) and not inside(c, trace.segments) for c in user_trace.model_calls)
    # Time: each side is charged exactly its own model's calls, never the other's.
    assert trace.agent_time == 1.0 * len(trace.model_calls) > 0
    assert user_trace.agent_time == 0.25 * len(user_trace.model_calls) > 0
    # Tokens: each trace counts only its own model's calls.
    assert (trace.num_turns, user_trace.num_turns) == (4, 3)
    assert trace.num_output_tokens == sum(c.usage.output_tokens for c in trace.turns)
    assert user_trace.num_output_tokens == sum(c.usage.output_tokens for c in user_trace.turns)
    assert user_trace.agent["model"] == "toy-customer-model" and trace.agent["model"] == "toy-support"


async def test_a_failing_agent_user_fails_the_assistants_run_as_a_task_error():
    broken = rk.AgentUser(rk.Agent(model=rk.ScriptedModel([], name="mute")), name="mute-user")
    trace = await support_agent().run(support_tasks(1)[0], user=broken)
    assert trace.error.type == "TaskError" and trace.error.phase == "user"
    assert trace.error.message.startswith("user 'mute-user' (an AgentUser) failed: ProviderError")
    assert not trace.scored
    assert trace.user_traces[0].failed


def test_agent_user_refuses_what_is_not_an_agent():
    with pytest.raises(TypeError, match="AgentUser needs a rk.Agent to play the user, got str"):
        rk.AgentUser("gpt")
    with pytest.raises(ValueError, match="done must be a non-empty marker"):
        rk.AgentUser(rk.Agent(), done=" ")


# ---- many conversations -------------------------------------------------------------


async def test_evaluate_with_a_user_factory_writes_both_sides_to_the_run_folder(tmp_path):
    tasks = support_tasks(6)
    result = await rk.evaluate_async(support_agent(), tasks, repeats=2, out=tmp_path / "run", progress=False,
                               user=lambda task: customer())
    assert len(result.traces) == 12 and len(result.user_traces) == 12
    by_id = {u.id: u for u in result.user_traces}
    assert all(by_id[t.info["user_trace_id"]].info["assistant_trace_id"] == t.id for t in result.traces)
    rewards = sorted(t.reward for t in result.traces)
    assert rewards == [0.0] * 4 + [1.0] * 8  # the chatty customers (tasks 2 and 5) get the wrong order
    loaded = rk.load_run(tmp_path / "run")
    assert sorted(u.id for u in loaded.user_traces) == sorted(by_id)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["user"] == (
        "test_evaluate_with_a_user_factory_writes_both_sides_to_the_run_folder.<locals>.<lambda>")


async def test_a_user_trace_whose_rollout_never_finished_is_dropped_on_loading(tmp_path):
    result = await rk.evaluate_async(support_agent(), support_tasks(2), out=tmp_path / "run", progress=False, user=customer())
    orphan = result.user_traces[0].model_copy(update={"id": "orphan"})
    orphan.info["assistant_trace_id"] = "never-finished"
    with open(tmp_path / "run" / "user_traces.jsonl", "a") as f:
        f.write(orphan.model_dump_json() + "\n")
    assert {u.id for u in rk.load_run(tmp_path / "run").user_traces} == {u.id for u in result.user_traces}


async def test_evaluate_refuses_a_user_that_is_neither_a_user_nor_a_factory():
    with pytest.raises(TypeError, match="user must be a rk.User .* or a function of the task that makes one, got int"):
        rk.evaluate(support_agent(), support_tasks(1), user=3)


async def test_a_user_factory_that_breaks_fails_only_that_rollout():
    def factory(task: rk.Task) -> rk.User:
        if task.data.id.endswith("1"):
            raise RuntimeError("no customer today")
        return toy_customer()

    result = await rk.evaluate_async(support_agent(), support_tasks(2), progress=False, user=factory)
    failed = [t for t in result.traces if t.failed]
    assert len(failed) == 1 and "no customer today" in failed[0].error.message
    assert [t.ok for t in result.traces if not t.failed] == [True]


def test_kill_then_resume_a_run_with_a_user_gives_one_trace_and_one_user_trace_per_rollout(tmp_path):
    out = tmp_path / "run"
    proc = start_gated("run-users", out)
    try:
        wait_blocked(proc)  # every worker holds a conversation whose second turn never answers
    finally:
        status = sigkill(proc)
    assert status == -signal.SIGKILL
    before = rk.load_run(out)
    assert len(before.traces) == 8 and len(before.user_traces) == 8

    result = rk.evaluate(chat_agent(), said_tasks(6), repeats=2, concurrency=4, out=out, resume=True,
                         progress=False, user=chat_user())

    assert Counter(t.info["rollout_id"] for t in rk.load(out)) == Counter(ALL_12)
    loaded = rk.load_run(out)
    assert len(loaded.user_traces) == 12
    links = {u.info["assistant_trace_id"] for u in loaded.user_traces}
    assert links == {t.id for t in loaded.traces}
    assert all(t.ok and t.last_reply == "goodbye" for t in result.traces)


def test_cli_eval_with_a_user(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        ["rollkit", "eval", "rollkit.examples:support_tasks", "-m", "toy-support", "--user",
         "helpers.users_helpers:CUSTOMER", "--max-user-turns", "1", "--no-progress"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "stopped: max_user_turns" in done.stdout  # the cap refused the customer's second turn
    bad = subprocess.run(
        ["rollkit", "eval", "rollkit.examples:support_tasks", "-m", "toy-support", "--user", "helpers.users_helpers:NOT_A_USER"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert bad.returncode == 1
    assert "Error: helpers.users_helpers:NOT_A_USER is an int, not an rk.User or a function of the task that makes one" in bad.stderr
    cap_alone = subprocess.run(
        ["rollkit", "eval", "rollkit.examples:support_tasks", "-m", "toy-support", "--max-user-turns", "2"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert cap_alone.returncode == 2 and "--max-user-turns needs --user" in cap_alone.stderr
