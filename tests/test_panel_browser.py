"""The rollout panel in a real browser, near its turn limit: the transcript
follows the newest message, and Send and Step turn off at 6 of 6 turns with
the reason on them.

tests/browser_app/panel_long_chat.ipynb has taken 4 turns with long
messages, so the chat overflows its box. Voila serves it and headless
Chromium (the set-up of tests/test_browser.py) checks, from the DOM:

- on first render, and after each new message, the box is scrolled to its
  bottom (scrollTop + clientHeight == scrollHeight) while it overflows;
- a reader who scrolled up to read is left there when a message arrives,
  and followed again once back at the bottom;
- at 6 of 6 turns Send and Step are disabled, their tooltip (the button's
  title) and the status line say max_turns left no turn; Close is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import _page, _Voila, playwright_sync, pytestmark, voila  # noqa: F401  (pytestmark, fixture)

# How far the box is from showing its last line, and whether it overflows at all.
_GAP = "el => el.scrollHeight - el.scrollTop - el.clientHeight"
_OVERFLOWS = "el => el.scrollHeight > el.clientHeight + 50"


def _send(page, text: str, turns: int) -> None:  # type: ignore[no-untyped-def]
    page.locator(".rk-input textarea").fill(text)
    page.locator("button.rk-send").click()
    playwright_sync.expect(page.locator(".rk-transcript .rk-assistant").last).to_contain_text(f"You said: {text}")
    playwright_sync.expect(page.locator(".rk-gauges")).to_contain_text(f"{turns} / 6")


@pytest.mark.parametrize("voila", ["panel_long_chat.ipynb"], indirect=True)
def test_transcript_follows_the_newest_message_and_buttons_turn_off_at_the_limit(voila: _Voila, tmp_path: Path) -> None:
    expect = playwright_sync.expect
    with _page(voila, tmp_path, "panel-long-chat") as page:
        status = page.locator(".rk-status-line")
        expect(status).to_contain_text("waiting for the user after 4 turns")
        box = page.locator(".rk-transcript-scroll")
        expect(box.locator(".rk-assistant")).to_have_count(4)
        assert box.evaluate(_OVERFLOWS), "the chat must overflow its box for this test to mean anything"
        assert box.evaluate(_GAP) <= 1  # first render: at the newest message

        # A reader scrolled up to an older message is not pulled away from it.
        box.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
        send, step = page.locator("button.rk-send"), page.locator("button.rk-step")
        expect(send).to_have_attribute("title", "Send the message as the user and step")
        _send(page, "message 5 (sent while reading)", 5)
        assert box.evaluate("el => el.scrollTop") == 0

        # Back at the bottom, the newest message is followed again.
        box.evaluate("el => { el.scrollTop = el.scrollHeight; el.dispatchEvent(new Event('scroll')); }")
        _send(page, "message 6", 6)
        expect(status).to_contain_text("max_turns reached (6 of 6 turns used)")
        assert box.evaluate(_GAP) <= 1

        reason = "max_turns reached (6 of 6 turns used): the next turn would be refused"
        expect(status).to_have_attribute("data-kind", "no-turn-left")
        expect(status).to_contain_text("close to score it, or fork from an earlier turn")
        expect(send).to_be_disabled()
        expect(step).to_be_disabled()
        expect(send).to_have_attribute("title", reason)
        expect(step).to_have_attribute("title", reason)
        expect(page.locator("button.rk-close")).to_be_enabled()
