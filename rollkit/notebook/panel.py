"""The rollout panel: one rollout as an ipywidgets app.

Transcript as chat that scrolls to the newest message as messages arrive
(unless the reader scrolled up to read older ones), a text box with Send,
Step / Close / Abort buttons that are enabled only when they make sense
(Send and Step also not once a limit leaves no turn: 6 of 6 turns used, a
token limit reached; a disabled button's tooltip and the status line say
why), a status line, budget gauges (turns, tokens, agent time against
their limits, the current phase), by default a live budget burn chart,
and "Fork here": a new rollout from where this one stood after a turn
picked, whose own panel appears below. With `seat="agent"` it also holds
the agent's seat (rollkit.notebook.seat): a person answers as the model.

The panel is thin. A button forwards intent to the `NotebookRollout`
(`step_soon`, `close_soon`, `abort_soon`), which schedules the async work on
the running loop and returns at once, so a click never blocks the kernel.
The view changes only when the rollout says something happened (its events)
or an action starts or ends; it never decides anything about the lifecycle.
It types against the facade's protocol (rollkit.notebook._view) and asks
the facade, never the core, whether an action can run now.
All text shown goes through `html.escape` (see `display`).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as widgets
import traitlets

from .display import STYLE, error_html, message_html

if TYPE_CHECKING:
    from ._view import RolloutView

__all__ = ["RolloutPanel"]

_STATUS_COLOURS = {
    "waiting": "#1a73e8", "asked": "#1a73e8", "running": "#8a6d00", "opening": "#8a6d00", "closing": "#8a6d00",
    "stopped": "#8a6d00", "ended": "#8a6d00", "closed": "#1e7e34", "failed": "#b00020",
    "aborted": "#b00020", "new": "#555", "no-turn-left": "#8a6d00",
}

# The transcript's own front end: ipywidgets' HTML and Output never scroll,
# so a long conversation would leave the newest reply below the fold. It
# follows the newest message while the reader is at the bottom; one who
# scrolled up to read is left where they are until they scroll back down.
_TRANSCRIPT_ESM = """
function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "rk-transcript-scroll";
  box.style.cssText = "max-height:420px;overflow:auto;border:1px solid #ddd;padding:4px";
  const chat = document.createElement("div");
  box.appendChild(chat);
  el.appendChild(box);
  let following = true;
  box.addEventListener("scroll", () => {
    following = box.scrollHeight - box.scrollTop - box.clientHeight < 16;
  });
  // Scroll when the chat's laid-out size changes, not when its HTML is set:
  // on the first render the box is not in the page yet and has no height.
  const follow = () => { if (following) box.scrollTop = box.scrollHeight; };
  new ResizeObserver(follow).observe(chat);
  const draw = () => { chat.innerHTML = model.get("value"); follow(); };
  model.on("change:value", draw);
  draw();
}
export default { render };
"""


class _Transcript(anywidget.AnyWidget):
    """The chat, as escaped HTML in `value`, in a box that scrolls itself."""

    _esm = _TRANSCRIPT_ESM
    value = traitlets.Unicode("").tag(sync=True)


_EMPTY_MESSAGE = (
    "Nothing to send: type what the user says first. "
    "To let the agent go on without a message, press Step."
)


def _gauge(label: str, used: float | None, limit: float | None, unit: str = "", digits: int = 0) -> str:
    shown = "NA" if used is None else f"{used:.{digits}f}{unit}"  # a count a turn did not report: unknown
    if limit is None or used is None:
        return (f'<tr><td>{label}</td><td class="rk-gauge-value">{shown}</td><td></td>'
                '<td class="rk-nolimit">no limit</td></tr>')
    fraction = 0.0 if limit <= 0 else min(1.0, used / limit)
    colour = "#e15759" if fraction >= 1.0 else "#f28e2b" if fraction >= 0.8 else "#4e79a7"
    return (
        f'<tr><td>{label}</td><td class="rk-gauge-value">{shown} / {limit:.{digits}f}{unit}</td>'
        f'<td><span class="rk-bartrack"><span class="rk-bar" style="width:{int(120 * fraction)}px;'
        f'background:{colour}"></span></span></td><td>{fraction:.0%}</td></tr>'
    )


def _why_not_step(ro: Any, no_turn_left: str | None) -> str | None:
    """Why neither Send nor Step can run now, or None when they can
    (`no_turn_left`: what `ro.no_turn_left` said)."""
    if ro.can_step:
        return no_turn_left
    if ro.busy:
        return f"wait: {ro.status.text}"
    if ro.closed:
        return "the rollout is closed: nothing more can run in it"
    return ro.status.text


class RolloutPanel(widgets.VBox):
    """A widget for one rollout. Build it with `ro.panel()` and show it by
    leaving it as the last expression of a cell."""

    def __init__(self, ro: RolloutView, *, chart: bool = True, seat: str = "user") -> None:
        self.ro = ro
        self.options = {"chart": chart, "seat": seat}  # what it was built with; ro.panel() compares
        self._closed = False
        self._rendered: list[str] = []  # escaped HTML per message, so a refresh renders only new ones
        self._rendered_from: list[Any] | None = None  # the message list `_rendered` was made from
        trace = ro.trace
        self.header = widgets.HTML(
            f"{STYLE}<b>{html.escape(ro.task_name)}</b> · task {html.escape(trace.task.key)} · "
            f"agent {html.escape(ro.agent_name)} · rollout {html.escape(ro.id)}"
        )
        self.status = widgets.HTML()
        self.status.add_class("rk-status")
        self.transcript = _Transcript()
        self.transcript.add_class("rk-transcript")
        self._build_controls()
        self.gauges = widgets.HTML()
        self.gauges.add_class("rk-gauges")
        self.chart = None
        right: list[Any] = [self.gauges]
        if chart:
            from .plots import LiveBudgetBurn

            self.chart = LiveBudgetBurn(ro, width=460, height=420)  # ro: its events reach the kernel's thread
            self.chart.figure.add_class("rk-chart")
            right.append(self.chart.figure)
        self.seat = None
        if seat == "agent":
            from .seat import AgentSeat

            self.seat = AgentSeat(ro)
        left = widgets.VBox(
            [self.transcript, *([self.seat] if self.seat is not None else []), self.text,
             widgets.HBox([self.send_button, self.step_button, self.close_button, self.abort_button]),
             widgets.HBox([self.fork_turn, self.fork_button]),
             self.error],
            layout=widgets.Layout(width="55%", min_width="360px"),
        )
        super().__init__(
            [self.header, self.status, widgets.HBox([left, widgets.VBox(right)], layout=widgets.Layout(flex_flow="row wrap")),
             self.forks]
        )
        self.add_class("rk-panel")
        self._unsubscribe = ro.subscribe(self._on_event)
        self._unwatch = ro.watch(self.refresh)
        self.refresh()

    def _build_controls(self) -> None:
        """The input box, the lifecycle buttons and the fork picker."""
        # continuous_update=False: the text reaches the kernel in one piece when
        # the box loses focus, which a click on Send does before the click itself
        # is sent (typing and clicking at once otherwise race).
        self.text = widgets.Textarea(
            placeholder="Type the user's message, then press Send",
            continuous_update=False,
            layout=widgets.Layout(width="100%", height="60px"),
        )
        self.text.add_class("rk-input")
        self.send_button = self._button("Send", "primary", "rk-send", "Send the message as the user and step")
        self.step_button = self._button("Step", "", "rk-step", "Let the agent run one more segment without a new message")
        self.close_button = self._button("Close", "success", "rk-close", "Finalize, score and tear down")
        self.abort_button = self._button("Abort", "danger", "rk-abort", "Free everything; no finalize, no score")
        self.send_button.on_click(self._on_send)
        self.step_button.on_click(self._on_step)
        self.close_button.on_click(self._on_close)
        self.abort_button.on_click(self._on_abort)
        self.error = widgets.HTML()
        self.error.add_class("rk-error")
        # Fork here: a new rollout from where this one stood after the turn
        # picked; its own panel appears below this one.
        self.fork_turn = widgets.Dropdown(description="after turn", options=[], layout=widgets.Layout(width="160px"))
        self.fork_turn.add_class("rk-fork-turn")
        self.fork_button = self._button("Fork here", "", "rk-fork", "A new rollout from where this one stood after the turn picked")
        self.fork_button.on_click(self._on_fork)
        self.forks = widgets.VBox()
        self.forks.add_class("rk-forks")

    @staticmethod
    def _button(label: str, style: str, css: str, tooltip: str) -> widgets.Button:
        button = widgets.Button(description=label, button_style=style, tooltip=tooltip,
                                layout=widgets.Layout(width="auto"))
        button.add_class(css)
        button.rk_does = tooltip  # type: ignore[attr-defined]  # the tooltip while it is enabled
        return button

    @staticmethod
    def _enable(button: widgets.Button, why_not: str | None) -> None:
        """Enable `button`, or disable it with the reason as its tooltip."""
        button.disabled = why_not is not None
        button.tooltip = button.rk_does if why_not is None else why_not  # type: ignore[attr-defined]

    # ---- intent: forward to the rollout, never decide ----------------------
    def _act(self, action: Any, *args: Any) -> bool:
        self.error.value = ""
        try:
            action(*args)
        except Exception as exc:  # a user mistake: say it, keep the panel alive
            self._show_error(exc)
            self.refresh()
            return False
        self.refresh()
        return True

    def _on_send(self, _button: Any = None) -> None:
        text = self.text.value
        if not text.strip():
            self.error.value = error_html(_EMPTY_MESSAGE)
            return
        if self._act(self.ro.step_soon, text):
            self.text.value = ""  # only once sent: a refused message stays to retry

    def _on_step(self, _button: Any = None) -> None:
        self._act(self.ro.step_soon)

    def _on_close(self, _button: Any = None) -> None:
        self._act(self.ro.close_soon)

    def _on_abort(self, _button: Any = None) -> None:
        self._act(self.ro.abort_soon)

    def _on_fork(self, _button: Any = None) -> None:
        turn = self.fork_turn.value
        if not turn:
            self.error.value = error_html("No turn to fork after yet: step the rollout first.")
            return
        self.error.value = ""
        try:
            future = self.ro.fork_soon(turn)
        except Exception as exc:
            self._show_error(exc)
            return
        if future.done():  # no running loop: it ran to its end already
            self._forked(future)
        else:
            future.add_done_callback(self._forked)

    def _forked(self, future: Any) -> None:
        if future.cancelled():
            return
        if future.exception() is not None:
            self._show_error(future.exception())
            return
        fork = future.result()
        self.forks.children = (*self.forks.children, fork.panel(**self.options))  # the same seat and chart

    def _show_error(self, exc: BaseException) -> None:
        self.error.value = error_html(f"{type(exc).__name__}: {exc}")

    # ---- view: redrawn from the rollout's state -----------------------------
    def _on_event(self, event: Any) -> None:
        self.refresh()

    def refresh(self) -> None:
        ro = self.ro
        kind, text = ro.status.kind, ro.status.text
        no_turn_left = ro.no_turn_left
        if no_turn_left is not None:
            kind, text = "no-turn-left", f"{no_turn_left}: close to score it, or fork from an earlier turn"
        colour = _STATUS_COLOURS.get(kind, "#555")
        self.status.value = (
            f'<div class="rk-status-line" data-kind="{kind}" style="color:{colour};font-weight:600">'
            f"{html.escape(text)}</div>"
        )
        why_not = _why_not_step(ro, no_turn_left)
        self._enable(self.send_button, why_not)
        if why_not is None and ro.needs_message:
            why_not = "this task has no prompt: type the user's opening message and press Send"
        self._enable(self.step_button, why_not)
        self.text.disabled = (not ro.can_step and not ro.busy) or no_turn_left is not None
        self._enable(self.close_button, None if ro.can_close else f"not now: {text}")
        self._enable(self.abort_button, None if ro.can_abort else "the rollout is closed already")
        turns = ro.trace.num_turns
        if len(self.fork_turn.options) != turns:
            self.fork_turn.options = [(str(k), k) for k in range(1, turns + 1)]
            self.fork_turn.value = turns or None
        self.fork_button.disabled = not ro.can_fork
        if ro.last_error is not None:
            self._show_error(ro.last_error)
        if self.seat is not None:
            self.seat.refresh()
        self._refresh_transcript()
        self._refresh_gauges()

    def _refresh_transcript(self) -> None:
        messages = self.ro.trace.messages
        # A harness that rewrote history makes the trace replace its message
        # list (Trace.record_conversation), possibly with one as long or
        # longer: the cached bubbles then belong to another conversation.
        if messages is not self._rendered_from or len(messages) < len(self._rendered):
            self._rendered = []
            self._rendered_from = messages
        if len(messages) == len(self._rendered) and self.transcript.value:
            return
        self._rendered.extend(message_html(m) for m in messages[len(self._rendered):])
        body = "".join(self._rendered) or '<i class="rk-missing">no messages yet</i>'
        self.transcript.value = f'<div class="rk-chat">{body}</div>'

    def _refresh_gauges(self) -> None:
        ro, trace = self.ro, self.ro.trace
        limits = trace.limits
        phase = ro.current_phase
        if phase is None:
            phase = "none: waiting for the user" if ro.is_open else "none"
        self.gauges.value = (
            '<table class="rk-table rk-gauge-table">'
            + _gauge("turns", trace.num_turns, limits.get("max_turns"))
            + _gauge("input tokens", trace.num_input_tokens, limits.get("max_input_tokens"))
            + _gauge("output tokens", trace.num_output_tokens, limits.get("max_output_tokens"))
            + _gauge("total tokens", trace.num_total_tokens, limits.get("max_total_tokens"))
            + _gauge("agent time", ro.agent_time, trace.timeouts.get("agent"), " s", 3)
            + f'<tr><td>phase</td><td class="rk-phase" colspan="3">{html.escape(phase)}</td></tr>'
            + f'<tr><td>forecast</td><td class="rk-forecast" colspan="3">{html.escape(ro.forecast)}</td></tr>'
            + "</table>"
        )

    @property
    def closed(self) -> bool:
        """Whether `close()` was called: a closed panel shows nothing any more."""
        return self._closed

    def close(self) -> None:
        """Stop listening to the rollout and close the widgets."""
        self._closed = True
        self._unsubscribe()
        self._unwatch()
        if self.chart is not None:
            self.chart.close()
        super().close()
