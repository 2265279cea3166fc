"""Forks: a new rollout from where another stood after turn k (rollkit.core.forks)."""

from __future__ import annotations

import pytest

import rollkit as rk
from rollkit.notebook.stepping import NotebookRollout
from rollkit.examples import support_agent, support_tasks, toy_customer
from rollkit.programs.subprocess_runtime import SubprocessRuntime


async def _original() -> rk.Trace:
    return await support_agent().run(support_tasks(3)[2], user=toy_customer())


def _budgets(trace: rk.Trace) -> tuple:
    return trace.num_turns, trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens


@pytest.mark.parametrize("turn", [1, 2, 3, 4])
async def test_L9_budgets_after_a_fork_equal_those_at_turn_k_and_the_original_is_untouched(turn):
    original = await _original()
    before = original.model_dump_json()
    call = original.turns[turn - 1]
    fork = await original_fork(original, turn)
    trace = fork.trace
    assert _budgets(trace) == (call.cum_turns, call.cum_input_tokens, call.cum_output_tokens, call.cum_total_tokens)
    assert fork.agent_time == pytest.approx(call.cum_agent_time)  # agent time charged so far, carried over
    assert trace.info["forked_from"] == [original.id, turn]
    assert trace.messages[: original.sampled[turn - 1] + 1] == original.messages[: original.sampled[turn - 1] + 1]
    assert original.model_dump_json() == before
    await fork.close()


async def original_fork(original: rk.Trace, turn: int, agent: rk.Agent | None = None) -> rk.Rollout:
    return await rk.fork(original, turn, agent=agent or support_agent())


async def test_a_fork_after_a_tool_call_keeps_its_result_and_lets_the_agent_go_on():
    original = await _original()
    fork = await original_fork(original, 2)  # turn 2 called lookup_order
    assert fork.trace.messages[-1].role == "tool" and not fork.waiting_for_user
    await rk.converse(fork, toy_customer())
    trace = await fork.close()
    assert trace.num_turns == 4 and trace.transcript == original.transcript


async def test_a_fork_stepped_with_another_message_or_model_takes_another_branch():
    original = await _original()  # the careless model looked up the wrong order: reward 0
    assert original.reward == 0.0
    careful = await original_fork(original, 1, agent=support_agent(careful=True))
    assert careful.waiting_for_user  # turn 1 asked for the number: the user's move
    await rk.converse(careful, toy_customer())
    careful_trace = await careful.close()
    other = await original_fork(original, 1)
    await other.step(f"It's {support_tasks(3)[2].data.order}.")
    other_trace = await other.close()
    assert careful_trace.reward == 1.0 and careful_trace.agent["model"] == "toy-support-careful"
    assert other_trace.reward == 1.0
    frame = rk.frames.branches([original, careful_trace, other_trace])
    assert list(frame["branch"]) == ["original", "original/fork@1#1", "original/fork@1#2"]
    assert list(frame["split_turn"].fillna(0)) == [0, 1, 1]
    assert list(frame["reward"]) == [0.0, 1.0, 1.0]
    assert list(frame["turns_after_split"]) == [4, 3, 2]
    fig = rk.plots.branches([original, careful_trace, other_trace])
    assert fig.layout.title.text == "branches · 3 rollouts from 1 original(s)"
    assert len(fig.data) == 5  # the original's line, and each fork's shared part and own part


async def test_rollout_fork_works_on_an_open_rollout_and_both_go_on():
    rollout = support_agent().rollout(support_tasks(1)[0], user=True)
    await rollout.open()
    await rollout.step()
    fork = await rollout.fork(1)
    await rollout.step("It's 1.")
    await fork.step("It's 2.")
    assert rollout.trace.user_turns[0].messages[0].content == "It's 1."
    assert fork.trace.user_turns[0].messages[0].content == "It's 2."
    assert fork.trace.segments[0].index == 0 and len(fork.trace.segments) == 2
    await rollout.close()
    await fork.close()


async def test_fork_refuses_a_turn_out_of_range_a_failed_trace_and_a_runtime_it_cannot_copy():
    original = await _original()
    with pytest.raises(rk.ForkError, match=f"cannot fork trace {original.id} at turn 5: it has turns 1 to 4"):
        await rk.fork(original, 5, agent=support_agent())
    with pytest.raises(rk.ForkError, match="turn must be a whole number from 1 to 4"):
        await rk.fork(original, "2", agent=support_agent())
    failed = await rk.Agent(model=rk.ScriptedModel(["hi", 1]), limits={}).run(rk.Task(prompt="x"), user=rk.ScriptedUser(["y"]))
    assert failed.failed
    with pytest.raises(rk.ForkError, match=rf"cannot fork trace {failed.id}: it failed \(ProviderError: .*\); a failed trajectory is incomplete"):
        await rk.fork(failed, 1, agent=rk.Agent())
    sub = rk.Agent(model="echo", runtime=SubprocessRuntime)
    with pytest.raises(rk.ForkError, match="into a SubprocessRuntime: its working folder holds the files as the last turn left them"):
        await rk.fork(original, 1, agent=sub)
    rollout = sub.rollout(rk.Task(prompt="x"))
    await rollout.open()
    await rollout.step()
    with pytest.raises(rk.ForkError, match=f"cannot fork rollout {rollout.id}: it runs in a SubprocessRuntime, and its working folder holds"):
        await rollout.fork(1)
    await rollout.close()


async def test_rk_fork_rebuilds_the_task_of_a_saved_trace_or_asks_for_it(tmp_path):
    original = await _original()
    rk.save([original], tmp_path / "t.jsonl")
    [loaded] = rk.load(tmp_path / "t.jsonl")
    fork = await rk.fork(loaded, 1, agent=support_agent(careful=True))
    assert type(fork.task).__name__ == "OrderStatus" and fork.task.data == support_tasks(3)[2].data
    await fork.close()

    class Local(rk.Task):
        pass

    local = await rk.Agent(model="echo").run(Local(prompt="x"))
    with pytest.raises(rk.ForkError, match=r"cannot rebuild the task of trace .*pass it: rk.fork\(trace, turn=k, agent=..., task=...\)"):
        await rk.fork(local, 1, agent=rk.Agent(model="echo"))
    fork = await rk.fork(local, 1, agent=rk.Agent(model="echo"), task=Local(prompt="x"))
    await fork.step("again")
    assert [m.content for m in (await fork.close()).messages] == ["x", "You said: x", "again", "You said: again"]


async def test_a_fork_keeps_the_original_agent_budget_and_runs_out_of_it():
    agent = rk.Agent(model="echo", limits={"max_turns": 2})
    original = await agent.run(rk.Task(prompt="a"), user=rk.ScriptedUser(["b", "c"]))
    assert original.stop_condition == "max_turns"
    fork = await rk.fork(original, 2, agent=agent)
    assert await fork.step("d") is False  # turn 3 would pass max_turns, as in the original
    assert (await fork.close()).stop_condition == "max_turns"


async def test_the_notebook_facade_forks_too():
    ro = NotebookRollout(support_agent(), support_tasks(1)[0])  # async: no nest-asyncio in the test process
    await ro.open_async()
    await ro.step_async()
    fork = await ro.fork_async(1)
    assert fork.trace.info["forked_from"] == [ro.id, 1] and fork.rollout.is_open
    reply = (await fork.step_async("It's 42.")).reply
    assert reply == "Order 42: no order with number 42. Anything else I can help with?"
    await fork.close_async()
    await ro.close_async()


def test_the_panel_forks_here_and_shows_the_forks_panel_below():
    ro = rk.notebook.open(support_agent(), support_tasks(1)[0])
    ro.step()
    ro.step("It's 7.")
    panel = ro.panel(chart=False)
    assert [value for _, value in panel.fork_turn.options] == [1, 2, 3] and panel.fork_turn.value == 3
    panel.fork_turn.value = 1
    panel.fork_button.click()
    [child] = panel.forks.children
    assert child.ro.trace.info["forked_from"] == [ro.id, 1] and child.ro.trace.num_turns == 1
    child.ro.step("It's 8.")
    assert ro.trace.num_turns == 3 and child.ro.trace.num_turns == 3  # each went its own way
    assert ro.trace.user_turns[0].messages[0].content == "It's 7."
    assert child.ro.trace.user_turns[0].messages[0].content == "It's 8."
    ro.close()
    child.ro.close()


def test_the_panel_offers_no_fork_where_the_runtime_cannot_be_copied():
    ro = rk.notebook.open(rk.Agent(model="echo", runtime=SubprocessRuntime), rk.Task(prompt="hi"))
    ro.step()
    panel = ro.panel(chart=False)
    assert panel.fork_button.disabled
    ro.close()


def test_a_fork_cuts_at_the_kth_call_to_end_not_the_kth_started():
    """Calls that ran side by side end out of index order: the prefix is cut
    by position, and the fork's next call takes a fresh index."""
    from rollkit.core.forks import prefix_of
    from rollkit.core.trace import ModelCall

    def call(index: int, turns: int) -> ModelCall:
        return ModelCall(index=index, segment=0, start=0.0, end=1.0, committed=True, cum_turns=turns,
                         usage=rk.Usage(input_tokens=1, output_tokens=1), cum_total_tokens=2 * turns)

    trace = rk.Trace(
        task=rk.core.trace.TaskRef(type="Task", key="k"),
        messages=[rk.UserMessage(content="go"), rk.AssistantMessage(content="fast"), rk.AssistantMessage(content="slow")],
        sampled=[1, 2], model_calls=[call(1, 1), call(0, 2)],
        segments=[rk.core.trace.Segment(index=0, start=0.0, end=2.0, turns_added=2, charged=0.5)],
    )
    prefix = prefix_of(trace, 1)
    assert [c.index for c in prefix.model_calls] == [1] and prefix.next_call == 2
    assert [m.content for m in prefix.messages] == ["go", "fast"]


async def test_a_trace_whose_parallel_calls_do_not_line_up_is_refused_clearly():
    import asyncio

    class Parallel(rk.Harness):
        name = "parallel"

        async def segment(self, ctx, messages):
            ctx.messages.extend(messages)
            await asyncio.gather(*(ctx.complete(rk.Request(messages=[*ctx.messages, rk.UserMessage(content=w)]))
                                   for w in ("left", "right")))

    agent = rk.Agent(model="echo", harness=Parallel())
    original = await agent.run(rk.Task(prompt="go"))
    with pytest.raises(rk.ForkError, match="its harness rewrote the conversation's history"):
        await rk.fork(original, 1, agent=agent)


async def test_a_fork_recounts_the_tool_calls_of_its_prefix():
    original = await _original()
    assert original.metrics["tool_call_success_rate"] == 1.0  # the lookup ran (it found no order, cleanly)
    fork = await original_fork(original, 3)
    assert (fork.ctx.tool_calls, fork.ctx.tool_failures) == (1, 0)
    trace = await fork.close()
    assert trace.metrics["tool_call_success_rate"] == original.metrics["tool_call_success_rate"]


async def test_a_recorded_user_continues_a_fork_of_its_own_recording():
    original = await _original()
    fork = await original_fork(original, 3, agent=support_agent())
    await rk.converse(fork, rk.RecordedUser(original))
    trace = await fork.close()
    assert [m.content for m in trace.messages if m.role == "user"] == [m.content for m in original.messages if m.role == "user"]
    assert [u.diverged for u in trace.user_turns] == [None, False]  # the prefix's turn, then the replayed one


async def test_a_stop_that_fired_on_the_last_turn_is_carried_into_a_fork_there():
    class Halts(rk.Task):
        @rk.stop
        def enough(self, response: rk.Response) -> bool:
            return "enough" in (response.message.content or "")

    agent = rk.Agent(model=rk.ScriptedModel(["one", "enough"]))
    original = await agent.run(Halts(prompt="a"), user=rk.ScriptedUser(["b", "c"]))
    assert original.stop_condition == "enough" and original.num_turns == 2
    at_stop = await rk.fork(original, 2, agent=agent, task=Halts(prompt="a"))
    before = await rk.fork(original, 1, agent=agent, task=Halts(prompt="a"))
    assert at_stop.trace.stop_condition == "enough" and await at_stop.step("more") is False
    assert before.trace.stop_condition is None and await before.step("more") is False  # "enough" fires again
    assert before.trace.stop_condition == "enough"
    await at_stop.close()
    await before.close()


async def test_L9_a_fork_charges_what_is_left_of_the_agent_budget():
    agent = rk.Agent(model="echo", timeouts={"agent": 100.0})
    original = await agent.run(rk.Task(prompt="a"), user=rk.ScriptedUser(["b", "c"]))
    fork = await rk.fork(original, 2, agent=agent)
    carried = original.turns[1].cum_agent_time
    assert fork.trace.segments[-1].remaining == pytest.approx(100.0 - carried)
    await fork.step("d")
    spent = fork.trace.agent_time
    assert spent > carried
    assert fork.trace.segments[-1].remaining == pytest.approx(100.0 - spent)  # the budget kept counting down
    await fork.close()


async def test_a_fork_whose_setup_fails_is_a_fork_error_naming_it():
    class Fragile(rk.Task):
        broken = False

        async def setup(self, ctx):
            if Fragile.broken:
                raise RuntimeError("the world is gone")

    original = await rk.Agent(model="echo").run(Fragile(prompt="x"))
    Fragile.broken = True
    with pytest.raises(rk.ForkError, match=r"could not open: TaskError: task.setup: RuntimeError: the world is gone"):
        await rk.fork(original, 1, agent=rk.Agent(model="echo"), task=Fragile(prompt="x"))


async def test_a_rollout_is_built_from_the_agents_spec_which_says_what_it_runs():
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), limits={"max_turns": 3}, name="spec-agent")
    rollout = agent.rollout(rk.Task(rk.TaskData(prompt="hi")))
    assert rollout.spec.model is agent.model and rollout.spec.limits.max_turns == 3
    assert rollout.trace.agent["name"] == "spec-agent"
    assert not hasattr(rollout, "agent")  # an early spelling, never released: rollout.spec says what it runs
    with pytest.raises(TypeError, match=r"agent.rollout\(task\); Rollout\(\) takes a RolloutSpec, got Agent"):
        rk.Rollout(agent, rk.Task(rk.TaskData(prompt="hi")))
    with pytest.raises(TypeError, match="rk.fork needs agent=, the rk.Agent that runs the fork; got str"):
        await rk.fork(rollout.trace, 1, agent="gpt")


class _Counter(rk.Toolset):
    """A toolset with state across a rollout's calls, kept per turn on the trace."""

    def __init__(self) -> None:
        super().__init__([rk.Tool(self.tick)], name="counter")
        self.trace: rk.Trace | None = None

    async def start(self, ctx) -> None:
        self.trace = ctx.trace

    def tick(self) -> str:
        """Count one more."""
        count = self.trace.info.get("ticks", 0) + 1
        self.trace.record_turn_info({"ticks": count})
        return str(count)


class _Counts(rk.Task):
    def all_toolsets(self):
        return [_Counter(), *super().all_toolsets()]

    @rk.stop
    def three(self, trace: rk.Trace) -> bool:
        return trace.info.get("ticks") == 3


async def test_a_fork_and_a_replay_see_the_info_recorded_per_turn_as_it_stood_then_not_at_the_end():
    tick = rk.ScriptedModel.call("tick")
    agent = rk.Agent(model=rk.ScriptedModel([tick, tick, tick, "done"]))
    original = await agent.run(_Counts(prompt="count"))
    assert (original.info["ticks"], original.stop_condition, original.num_turns) == (3, "three", 3)
    fork = await rk.fork(original, 1, agent=agent, task=_Counts(prompt="count"))
    assert fork.trace.info["ticks"] == 1 and fork.trace.info["by_turn"] == {"ticks": [[1, 1]]}
    await fork.step()
    trace = await fork.close()
    # It went on from turn 1's count (not from none, nor the original's 3), so it stopped where the original did.
    assert trace.info["by_turn"] == original.info["by_turn"] == {"ticks": [[1, 1], [2, 2], [3, 3]]}
    assert (trace.stop_condition, trace.num_turns) == ("three", 3)
    rows = rk.replay_hooks(original, _Counts)
    assert rows[rows.hook == "three"].fired.tolist() == [False, False, False, True]  # before turns 1..3, then after
