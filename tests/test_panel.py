"""The rollout panel's buttons say what is possible, and why not.

Send and Step are off once a limit leaves no next turn (the core would
refuse it), with the limit named in their tooltip and the status line;
they are off with the reason once the exchange ended or the rollout
closed; a fork from an earlier turn has turns left and its panel's
buttons are on again. The transcript is a widget of its own that scrolls
to the newest message in the browser (tests/test_panel_browser.py checks
the scrolling itself).
"""

from __future__ import annotations

import rollkit as rk
from rollkit.notebook.stepping import NotebookRollout

_SEND_DOES = "Send the message as the user and step"
_STEP_DOES = "Let the agent run one more segment without a new message"


async def _opened(agent: rk.Agent, task: rk.Task) -> NotebookRollout:
    ro = NotebookRollout(agent, task)
    assert await ro.open_async()
    return ro


async def test_send_and_step_are_off_at_6_of_6_turns_naming_the_limit() -> None:
    ro = await _opened(rk.Agent(model="echo", limits={"max_turns": 6}), rk.Task())
    panel = ro.panel(chart=False)
    for k in range(1, 6):
        await ro.step_async(f"message {k}")
    assert not panel.send_button.disabled and not panel.step_button.disabled
    assert panel.send_button.tooltip == _SEND_DOES and panel.step_button.tooltip == _STEP_DOES

    await ro.step_async("message 6")  # 6 of 6: the core would refuse the next call
    reason = "max_turns reached (6 of 6 turns used): the next turn would be refused"
    assert panel.send_button.disabled and panel.step_button.disabled and panel.text.disabled
    assert panel.send_button.tooltip == reason and panel.step_button.tooltip == reason
    assert 'data-kind="no-turn-left"' in panel.status.value
    assert f"{reason}: close to score it, or fork from an earlier turn</div>" in panel.status.value
    assert not panel.close_button.disabled and panel.close_button.tooltip == "Finalize, score and tear down"
    assert ro.rollout.state == "open"  # nothing was refused: the panel foresaw it

    await ro.close_async()
    assert panel.send_button.disabled
    assert panel.send_button.tooltip == "the rollout is closed: nothing more can run in it"
    assert panel.abort_button.disabled and panel.abort_button.tooltip == "the rollout is closed already"
    panel.close()


async def test_a_token_limit_reached_turns_send_and_step_off() -> None:
    ro = await _opened(rk.Agent(model="echo", limits={"max_total_tokens": 10}), rk.Task(prompt="hello there friend"))
    panel = ro.panel(chart=False)
    assert not panel.step_button.disabled
    await ro.step_async()
    used = ro.trace.num_total_tokens
    assert used >= 10
    assert panel.step_button.disabled
    assert panel.step_button.tooltip == (
        f"max_total_tokens reached ({used} of 10 tokens used): the next turn would be refused")
    await ro.close_async()
    panel.close()


class OneTurn(rk.Task):
    @rk.stop
    def after_one(self, trace: rk.Trace) -> bool:
        return trace.num_turns >= 1


async def test_after_a_refused_step_the_buttons_say_the_exchange_is_over() -> None:
    # A @stop on the trace cannot be foreseen: the step that asks is refused,
    # and then the status names the stop.
    ro = await _opened(rk.Agent(model="echo"), OneTurn())
    panel = ro.panel(chart=False)
    await ro.step_async("one")
    assert not panel.send_button.disabled
    assert not await ro.step_async("two")
    assert panel.send_button.disabled and panel.step_button.disabled
    assert panel.send_button.tooltip == "stopped by after_one after 1 turn: close to score it"
    await ro.close_async()
    panel.close()


def test_a_fork_from_an_earlier_turn_has_its_buttons_on_again() -> None:
    ro = rk.notebook.open(rk.Agent(model="echo", limits={"max_turns": 2}), rk.Task())
    ro.step("one")
    ro.step("two")
    panel = ro.panel(chart=False)
    assert panel.send_button.disabled and "max_turns reached (2 of 2" in panel.send_button.tooltip
    panel.fork_turn.value = 1
    panel.fork_button.click()
    [child] = panel.forks.children
    assert child.ro.trace.num_turns == 1
    assert not child.send_button.disabled and child.send_button.tooltip == _SEND_DOES
    assert 'data-kind="waiting"' in child.status.value
    child.ro.step("two again")
    assert child.send_button.disabled and "max_turns reached (2 of 2" in child.send_button.tooltip
    child.ro.close()
    ro.close()


async def test_the_transcript_holds_the_escaped_chat_in_a_self_scrolling_widget() -> None:
    ro = await _opened(rk.Agent(model="echo"), rk.Task())
    panel = ro.panel(chart=False)
    await ro.step_async("<script>x</script>")
    assert "&lt;script&gt;x&lt;/script&gt;" in panel.transcript.value
    assert "<script>" not in panel.transcript.value
    # Its front end scrolls the box to the bottom whenever the value changes.
    assert "box.scrollTop = box.scrollHeight" in panel.transcript._esm and "ResizeObserver" in panel.transcript._esm
    assert "rk-transcript" in panel.transcript._dom_classes
    await ro.close_async()
    panel.close()
