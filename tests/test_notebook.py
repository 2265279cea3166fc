"""The notebook facade and the rollout panel.

The sync facade is exercised where it must work: a plain script and a
script inside a running loop (both in a subprocess, so nest-asyncio never
patches this test process's loop), and its async twin here. The panel is
driven the way the browser drives it: button clicks, whose step runs on the
running loop while the click returns at once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
from conftest import virtual_time

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.notebook import RolloutEnded, RolloutPanel
from rollkit.notebook.stepping import NotebookRollout


async def _opened(agent: rk.Agent, task: rk.Task) -> NotebookRollout:
    ro = NotebookRollout(agent, task)
    assert await ro.open_async()
    return ro


def _script(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# ---- the sync facade -----------------------------------------------------------


def test_sync_facade_in_a_plain_script() -> None:
    out = _script(
        """
        import rollkit as rk
        ro = rk.notebook.open(rk.Agent(model="echo"), rk.Task())
        first = ro.step("hello")
        second = ro.step("again")
        panel = ro.panel(chart=False)
        panel.text.value = "from the panel"
        panel.send_button.click()  # no loop runs here: the step runs to its end at once
        trace = ro.close()
        print(first.reply, "|", second.reply, "|", trace.last_reply, "|", trace.num_turns, trace.ok, ro.status.kind)
        """
    )
    assert out.strip() == "You said: hello | You said: again | You said: from the panel | 3 True closed"


def test_sync_facade_inside_a_running_loop() -> None:
    """What a notebook cell does: synchronous calls while the kernel's loop runs."""
    out = _script(
        """
        import asyncio
        import rollkit as rk
        from rollkit.examples import arithmetic_tasks, demo_agent

        async def main():
            loop = asyncio.get_running_loop()
            ro = rk.notebook.open(demo_agent(), arithmetic_tasks(1)[0])
            reply = ro.step().reply
            trace = ro.close()
            # the same loop kept running, and other tasks still run on it
            await asyncio.sleep(0)
            return reply, trace.reward, asyncio.get_running_loop() is loop

        print(asyncio.run(main()))
        """
    )
    assert out.strip() == "('The answer is 42.', 1.0, True)"


def test_core_import_loads_no_notebook_dependencies() -> None:
    out = _script(
        """
        import asyncio, sys
        import rollkit as rk
        from rollkit.examples import arithmetic_tasks, demo_agent
        asyncio.run(demo_agent().run(arithmetic_tasks(1)[0]))
        print(sorted(m for m in ("ipywidgets", "plotly", "pandas", "nest_asyncio", "anywidget", "ipykernel",
                                 "rollkit.notebook.stepping", "rollkit.notebook.panel", "rollkit.analysis.frames",
                                 "rollkit.notebook.plots") if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


async def test_async_form_and_step_results() -> None:
    ro = await _opened(demo_agent(), arithmetic_tasks(3)[2])
    assert ro.status.text == "open: step to let the agent answer the prompt"
    result = await ro.step_async()
    assert bool(result) is True
    assert result.reply == "The answer is 378."
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert ro.status.kind == "waiting"
    trace = await ro.close_async()
    assert trace.reward == 1.0
    assert ro.status.text == "closed: ok, reward 1.000"


def test_spellings_never_released_are_gone_not_deprecated() -> None:
    """0.1.0 was never released, so its early spellings were changed, not
    kept as shims (the README's deprecation policy)."""
    import rollkit.notebook.whatif as whatif

    assert [n for n in ("aopen", "astep", "afork", "aclose", "aabort") if hasattr(NotebookRollout, n)] == []
    assert not hasattr(whatif, "areplay_hooks") and not hasattr(rk.core, "InteractionEnded")


async def test_step_result_html_escapes_the_reply_once() -> None:
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(["a < b & <b>c</b>"])), rk.Task(prompt="hi"))
    page = (await ro.step_async())._repr_html_()
    assert "a &lt; b &amp; &lt;b&gt;c&lt;/b&gt;" in page  # escaped, and only once
    assert "<b>c" not in page
    await ro.close_async()


async def test_prompt_less_task_needs_the_users_opening_message() -> None:
    ro = await _opened(rk.Agent(model="echo"), rk.Task())
    assert ro.needs_message
    assert ro.status.text == "waiting for the user: this task has no prompt, so type the opening message"
    with pytest.raises(ValueError, match=r"no prompt, so the user speaks first: pass the opening message"):
        await ro.step_async()
    result = await ro.step_async("hi there")
    assert result.reply == "You said: hi there"
    assert not ro.needs_message
    await ro.close_async()


async def test_empty_message_is_refused_before_anything_runs() -> None:
    ro = await _opened(rk.Agent(model="echo"), rk.Task())
    for empty in ("", "   \n"):
        with pytest.raises(ValueError, match=r"empty message: type what the user says"):
            await ro.step_async(empty)
    assert ro.trace.segments == [] and ro.trace.messages == []
    await ro.close_async()


async def test_step_on_a_closed_rollout_says_so() -> None:
    ro = await _opened(demo_agent(), arithmetic_tasks(1)[0])
    await ro.step_async()
    await ro.close_async()
    with pytest.raises(RolloutEnded, match=r"is closed \(closed: ok, reward 1.000\).*rk.notebook.open\(agent, task\)"):
        await ro.step_async("more")
    with pytest.raises(RolloutEnded, match="is closed"):
        ro.step_soon()
    assert len(ro.trace.segments) == 1  # nothing ran


async def test_step_after_a_limit_ended_the_exchange_says_close() -> None:
    ro = await _opened(demo_agent(limits={"max_turns": 1}), arithmetic_tasks(1)[0])
    assert not await ro.step_async()
    assert ro.status.text == "stopped by max_turns after 1 turn: close to score it"
    with pytest.raises(RolloutEnded, match=r"is over \(stopped by max_turns.*call ro.close\(\) to finalize and score it"):
        await ro.step_async()
    await ro.close_async()


class BrokenSetup(rk.Task):
    async def setup(self, ctx) -> None:  # type: ignore[no-untyped-def]
        raise OSError("the fixture file is missing")


async def test_open_that_failed_says_why_and_refuses_steps() -> None:
    ro = NotebookRollout(demo_agent(), BrokenSetup(prompt="hi"))
    assert not await ro.open_async()
    assert ro.status.kind == "failed"
    assert ro.status.text.startswith("failed in setup: TaskError: task.setup: OSError: the fixture file is missing")
    panel = ro.panel(chart=False)
    assert panel.send_button.disabled and panel.step_button.disabled
    assert not panel.close_button.disabled
    with pytest.raises(RolloutEnded, match="is over"):
        await ro.step_async("hello")
    trace = await ro.close_async()
    assert trace.ok is False and trace.rewards == {}
    panel.close()


async def test_failed_status_names_the_error() -> None:
    with virtual_time():  # the model would answer after 5 s; the agent's budget ends at 0.25 s
        agent = rk.Agent(model=rk.ScriptedModel(["x"], delay=5), timeouts={"agent": 0.25})
        ro = await _opened(agent, rk.Task(prompt="hi"))
        assert not await ro.step_async()
    assert ro.status.kind == "failed"
    assert ro.status.text.startswith("failed in agent: HarnessError: agent timeout")
    await ro.close_async()
    assert ro.status.text.startswith("failed in agent: HarnessError: agent timeout")


# ---- the panel ---------------------------------------------------------------------


class Gate:
    """A model whose reply waits until the test opens the gate, so a step
    can be seen in flight."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.called = asyncio.Event()

    async def reply(self, request: rk.Request) -> str:
        self.called.set()
        await self.open.wait()
        return f"Echo: {request.messages[-1].content}"


async def test_send_schedules_the_step_and_returns_at_once() -> None:
    gate = Gate()
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(gate.reply), limits={"max_turns": 5}), rk.Task())
    panel = ro.panel()
    assert panel.step_button.disabled  # a prompt-less task cannot step before the user spoke
    assert not panel.send_button.disabled
    assert panel.status.value.endswith("type the opening message</div>")

    panel.text.value = "hello <b>there</b>"
    panel.send_button.click()  # returns while the step waits on the model
    await gate.called.wait()
    assert ro.busy
    assert 'data-kind="running"' in panel.status.value
    assert panel.send_button.disabled and panel.step_button.disabled and panel.close_button.disabled
    assert not panel.abort_button.disabled
    assert panel.text.value == ""
    assert "hello &lt;b&gt;there&lt;/b&gt;" in panel.transcript.value  # the user's words, shown at once

    gate.open.set()
    await ro.wait()
    assert "Echo: hello &lt;b&gt;there&lt;/b&gt;" in panel.transcript.value
    assert "waiting for the user after 1 turn" in panel.status.value
    assert '<td class="rk-gauge-value">1 / 5</td>' in panel.gauges.value
    assert panel.chart.points == 1
    assert panel.chart.figure.data[0].y == (1,)
    assert not panel.step_button.disabled and not panel.close_button.disabled

    panel.close_button.click()
    await ro.wait()
    assert ro.closed and ro.trace.ok
    assert 'data-kind="closed"' in panel.status.value
    assert all(b.disabled for b in (panel.send_button, panel.step_button, panel.close_button, panel.abort_button))
    panel.close()


async def test_a_second_click_before_the_step_ran_does_not_start_another() -> None:
    gate = Gate()
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(gate.reply)), rk.Task())
    panel = ro.panel(chart=False)
    panel.text.value = "first"
    panel.send_button.click()
    panel.text.value = "second"
    panel._on_send()  # a double click: the first step has not even started yet
    assert "is busy (step)" in panel.error.value
    assert panel.text.value == "second"  # kept, to send again
    gate.open.set()
    await ro.wait()
    assert len(ro.trace.segments) == 1
    assert ro.trace.last_reply == "Echo: first"
    await ro.close_async()
    panel.close()


async def test_send_with_an_empty_message_shows_an_error_and_runs_nothing() -> None:
    ro = await _opened(rk.Agent(model="echo"), rk.Task())
    panel = ro.panel(chart=False)
    panel.text.value = "   "
    panel.send_button.click()
    assert "Nothing to send: type what the user says first." in panel.error.value
    assert not ro.busy and ro.trace.segments == []
    panel.text.value = "ok now"
    panel.send_button.click()
    assert panel.error.value == ""
    await ro.wait()
    assert ro.trace.last_reply == "You said: ok now"
    await ro.close_async()
    panel.close()


async def test_step_button_on_a_closed_rollout_reports_instead_of_raising() -> None:
    ro = await _opened(demo_agent(), arithmetic_tasks(1)[0])
    panel = ro.panel(chart=False)
    await ro.close_async()
    assert panel.step_button.disabled
    panel._on_step()  # what a click that raced the close would do
    assert "RolloutEnded: rollout" in panel.error.value and "is closed" in panel.error.value
    panel.close()


async def test_abort_cancels_a_running_step() -> None:
    gate = Gate()
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(gate.reply)), rk.Task(prompt="go"))
    panel = ro.panel(chart=False)
    panel.step_button.click()
    await gate.called.wait()
    panel.abort_button.click()
    await ro.wait()
    assert ro.closed and ro.trace.aborted and ro.trace.ok is False
    assert ro.status.kind == "aborted"
    assert 'data-kind="aborted"' in panel.status.value
    panel.close()


async def test_panel_follows_steps_taken_from_code() -> None:
    """The view updates from the rollout's events, whoever drives it."""
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(["<script>alert(1)</script>"])), rk.Task(prompt="hi"))
    panel = ro.panel()
    assert panel.chart.points == 0
    await ro.rollout.step()  # the core, not the facade or the panel
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in panel.transcript.value
    assert "<script>" not in panel.transcript.value
    assert panel.chart.points == 1
    await ro.rollout.close()
    assert "closed: ok" in panel.status.value
    panel.close()


async def test_gauges_show_limits_budget_and_phase() -> None:
    agent = demo_agent(limits={"max_turns": 4, "max_total_tokens": 100}, timeouts={"agent": 30})
    ro = await _opened(agent, arithmetic_tasks(1)[0])
    panel = RolloutPanel(ro, chart=False)
    await ro.step_async()
    gauges = panel.gauges.value
    assert '<td class="rk-gauge-value">2 / 4</td>' in gauges
    assert f'<td class="rk-gauge-value">{ro.trace.num_total_tokens} / 100</td>' in gauges
    assert '<td class="rk-nolimit">no limit</td>' in gauges  # input and output tokens
    assert " / 30.000 s</td>" in gauges
    assert '<td class="rk-phase" colspan="3">none: waiting for the user</td>' in gauges
    await ro.close_async()
    panel.close()


def test_open_names_a_wrong_argument() -> None:
    with pytest.raises(TypeError, match=r"rk.notebook.open needs an rk.Agent first, got str"):
        rk.notebook.open("echo", rk.Task(prompt="hi"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"rk.notebook.open needs an rk.Task second, got dict"):
        rk.notebook.open(rk.Agent(model="echo"), {"prompt": "hi"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"TraceBrowser shows rk.Trace objects; item 0 is a str"):
        rk.notebook.TraceBrowser(["not a trace"])  # type: ignore[list-item]


# ---- text from the run is escaped in every widget ------------------------------


class BoldStop(rk.Task):
    @rk.stop(name="<b>x</b>")
    def after_the_first_reply(self, response: rk.Response) -> bool:
        return True


class BoldBoom(rk.Harness):
    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        raise ValueError("<b>boom</b>")


def _assert_escaped(value: str, raw: str) -> None:
    shown = raw.replace("<", "&lt;").replace(">", "&gt;")
    assert shown in value
    assert raw not in value


async def test_a_stop_condition_is_escaped_in_status_error_and_trace() -> None:
    from rollkit.notebook import trace_html

    ro = await _opened(rk.Agent(model="echo"), BoldStop(prompt="hi"))
    panel = ro.panel(chart=False)
    assert not await ro.step_async()
    assert ro.trace.stop_condition == "<b>x</b>"
    _assert_escaped(panel.status.value, "stopped by <b>x</b> after 1 turn")
    panel._on_step()  # a click that raced the end of the exchange
    assert "RolloutEnded" in panel.error.value
    _assert_escaped(panel.error.value, "(stopped by <b>x</b> after 1 turn")
    await ro.close_async()
    _assert_escaped(panel.status.value, "closed: ok, stopped by <b>x</b>")
    page = trace_html(ro.trace)
    assert '<span class="rk-stopped">stopped</span> by &lt;b&gt;x&lt;/b&gt;' in page
    assert "<b>x" not in page
    panel.close()


async def test_an_error_message_is_escaped_in_status_error_and_trace() -> None:
    from rollkit.notebook import trace_html

    ro = await _opened(rk.Agent(harness=BoldBoom()), rk.Task(prompt="hi"))
    panel = ro.panel(chart=False)
    assert not await ro.step_async()
    assert ro.trace.error.message.endswith("ValueError: <b>boom</b>")
    _assert_escaped(panel.status.value, "ValueError: <b>boom</b>")
    panel._on_step()
    assert "RolloutEnded" in panel.error.value
    _assert_escaped(panel.error.value, "ValueError: <b>boom</b>")
    await ro.close_async()
    _assert_escaped(panel.status.value, "ValueError: <b>boom</b>")
    _assert_escaped(trace_html(ro.trace), "ValueError: <b>boom</b>")
    panel.close()


# ---- the facade reads the core, and the panel follows it ----------------------


async def test_agent_time_is_the_rollouts_own_clock(monkeypatch) -> None:
    """The gauge shows what the rollout charges (perf_counter while a segment
    runs), not the wall clock since the segment started."""
    import time

    gate = Gate()
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(gate.reply)), rk.Task(prompt="go"))
    ro.step_soon()
    await gate.called.wait()
    wall = time.time()
    monkeypatch.setattr(time, "time", lambda: wall + 3600.0)  # the wall clock jumps an hour
    before = ro.rollout._agent_time()
    shown = ro.agent_time
    after = ro.rollout._agent_time()
    monkeypatch.undo()
    assert before <= shown <= after < 3600.0
    gate.open.set()
    await ro.wait()
    assert ro.agent_time == ro.trace.agent_time  # between segments: what was charged
    await ro.close_async()


async def test_an_awaited_abort_says_aborting_while_it_runs() -> None:
    gate = Gate()
    ro = await _opened(rk.Agent(model=rk.ScriptedModel(gate.reply)), rk.Task(prompt="go"))
    ro.step_soon()
    await gate.called.wait()
    seen: list[str] = []
    ro.watch(lambda: seen.append(ro.status.text))
    trace = await ro.abort_async()
    assert "aborting: cancelling and freeing resources" in seen
    assert seen[-1] == "aborted: resources freed, not finalized or scored"
    assert trace.aborted and ro.closed and not ro.busy
    assert trace.segments[0].end is not None  # the core cancelled the step and waited for it
    await ro.wait()


class Rewriter(rk.Harness):
    """Sends the model a history of its own instead of extending the
    conversation, so the trace replaces its message list."""

    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        await ctx.complete(rk.Request(messages=[rk.UserMessage(content="rewritten history")]))


async def test_transcript_is_redrawn_when_the_trace_replaces_its_message_list() -> None:
    ro = await _opened(rk.Agent(model="echo", harness=Rewriter()), rk.Task(prompt="original prompt"))
    panel = ro.panel(chart=False)
    first = ro.trace.messages
    await ro.step_async()
    assert ro.trace.messages is not first  # the ledger was replaced, and is longer
    assert [m.content for m in ro.trace.messages] == ["rewritten history", "You said: rewritten history"]
    assert "original prompt" not in panel.transcript.value
    assert "rewritten history" in panel.transcript.value
    await ro.close_async()
    panel.close()


async def test_panel_is_reused_until_closed_or_asked_with_other_options() -> None:
    ro = await _opened(rk.Agent(model="echo"), rk.Task(prompt="hi"))
    panel = ro.panel(chart=False)
    assert ro.panel(chart=False) is panel
    panel.close()
    assert panel.closed
    again = ro.panel(chart=False)
    assert again is not panel and not again.closed and again.chart is None
    charted = ro.panel(chart=True)
    assert charted is not again and charted.chart is not None
    assert ro.panel() is charted
    await ro.close_async()
    again.close()
    charted.close()
