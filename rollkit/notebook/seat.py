"""The agent's seat: a person answers as the model, in the rollout panel.

`AgentSeat(ro)` is the part of `ro.panel(seat="agent")` that shows what the
model (a `rk.HumanModel` answered by this rollout) is asked, the task's
tools with their JSON schemas, a reply box, and a tool-call form generated
from each tool's schema (`$ref`s and `Optional[...]` resolved): a text
field for a string, a number field for an integer or a number, a check box
for a boolean, a drop-down for an enum, JSON for anything else; an optional
argument's field can be left alone (then the tool's default applies). A call is checked against the tool's own argument
model before it is sent (the facade's `answer` / `call`): a bad argument is shown
in the form, and nothing goes to the rollout.

Like the panel, the seat is thin: it types against the facade's protocol
(rollkit.notebook._view), forwards the answer to it and redraws when it says something changed. Every text
from the task or the conversation is escaped.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .display import error_html

if TYPE_CHECKING:
    from ._view import RolloutView

__all__ = ["AgentSeat", "field_for"]


# What an optional field left alone gives: no argument, so the tool's default.
_UNSET: Any = type("Unset", (), {"__repr__": lambda self: "(default)"})()


def _resolved(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one argument with `$ref`s looked up in the tool's
    `$defs` and `Optional[X]` (`anyOf` X or null) taken as X."""
    for _ in range(8):  # refs to refs, bounded
        if "$ref" in schema:
            target = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches:
            kept = [b for b in branches if b.get("type") != "null"]
            if len(kept) == 1:
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                schema = {**kept[0], **rest}
                continue
        if isinstance(schema.get("type"), list):  # {"type": ["integer", "null"]}
            kinds = [t for t in schema["type"] if t != "null"]
            schema = {**schema, "type": kinds[0] if len(kinds) == 1 else kinds}
        break
    return schema


def field_for(name: str, schema: dict[str, Any], required: bool, defs: dict[str, Any] | None = None) -> widgets.Widget:
    """The input widget for one argument of a tool, from its JSON schema
    (`defs`: the tool's `$defs`, for enums and models it refers to). An
    optional argument's field can be left alone, and then is not sent."""
    schema = _resolved(schema, defs or {})
    label = f"{name}{' *' if required else ''}"
    kind = schema.get("type")
    default = schema.get("default")
    hint = schema.get("description", "")
    parse: Any = None
    if "enum" in schema:
        options = [(str(v), v) for v in schema["enum"]]
        widget: widgets.Widget = widgets.Dropdown(options=options if required else [("(default)", _UNSET), *options],
                                                  description=label)
    elif kind == "boolean" and required:
        widget = widgets.Checkbox(description=label, value=bool(default or False))
    elif kind == "boolean":
        widget = widgets.Dropdown(options=[("(default)", _UNSET), ("true", True), ("false", False)], description=label)
    elif kind in ("integer", "number") and required:
        box = widgets.IntText if kind == "integer" else widgets.FloatText
        widget = box(description=label, value=default if default is not None else 0)
    elif kind in ("integer", "number"):
        # A number box cannot be empty: an optional number is typed as text.
        widget = widgets.Text(description=label, continuous_update=False,
                              placeholder=f"{kind}, optional" + (f" (default {default})" if default is not None else ""))
        parse = int if kind == "integer" else float
    elif kind == "string":
        widget = widgets.Text(description=label, value=default or "", continuous_update=False, placeholder=hint)
    else:
        widget = widgets.Text(description=label, continuous_update=False, placeholder="JSON")
        parse = json.loads
    widget.rk_parse = parse  # type: ignore[attr-defined]
    widget.add_class(f"rk-arg-{name}")
    return widget


def _value(name: str, widget: widgets.Widget) -> Any:
    """What the field holds, `_UNSET` when left empty; ValueError naming
    the field when its text is not what the schema asks."""
    value = widget.value
    if isinstance(value, str) and not value.strip():
        return _UNSET
    parse = getattr(widget, "rk_parse", None)
    if parse is None or not isinstance(value, str):
        return value
    try:
        return parse(value)
    except ValueError as exc:
        wanted = {int: "an integer", float: "a number", json.loads: "JSON"}[parse]
        raise ValueError(f"{name}: {value!r} is not {wanted} ({exc})") from None


class AgentSeat(widgets.VBox):
    """Answer as the model: text, or a call of one of the task's tools."""

    def __init__(self, ro: RolloutView) -> None:
        self.ro = ro
        tools = ro.tools
        self.asked = widgets.HTML()
        self.asked.add_class("rk-asked")
        specs = "".join(
            f"<details><summary><code>{html.escape(name)}</code> {html.escape(tool.description)}</summary>"
            f"<pre>{html.escape(json.dumps(tool.spec['function']['parameters'], indent=1))}</pre></details>"
            for name, tool in tools.items()
        ) or "<i>this task has no tools</i>"
        self.tools_view = widgets.HTML(f"<b>tools</b>{specs}")
        self.reply = widgets.Textarea(placeholder="Reply as the model, then press Send reply",
                                      continuous_update=False, layout=widgets.Layout(width="100%", height="56px"))
        self.reply.add_class("rk-reply")
        self.send_reply = widgets.Button(description="Send reply", button_style="primary")
        self.send_reply.add_class("rk-send-reply")
        self.send_reply.on_click(self._on_reply)
        self.tool = widgets.Dropdown(options=list(tools), description="tool")
        self.tool.add_class("rk-tool-pick")
        self.tool.observe(lambda change: self._build_form(), names="value")
        self.form = widgets.VBox()
        self.call_button = widgets.Button(description="Call tool", button_style="info")
        self.call_button.add_class("rk-call-tool")
        self.call_button.on_click(self._on_call)
        self.error = widgets.HTML()
        self.error.add_class("rk-form-error")
        self.fields: dict[str, widgets.Widget] = {}
        self._build_form()
        calls = [widgets.HBox([self.tool, self.call_button]), self.form] if tools else []
        super().__init__([widgets.HTML("<b>the agent's seat: you answer as the model</b>"), self.asked,
                          self.reply, self.send_reply, *calls, self.error, self.tools_view])
        self.add_class("rk-agent-seat")
        self.refresh()

    def _build_form(self) -> None:
        tool = self.ro.tools.get(self.tool.value) if self.tool.value else None
        if tool is None:
            self.fields, self.form.children = {}, ()
            return
        parameters = tool.spec["function"]["parameters"]
        required = set(parameters.get("required", []))
        defs = parameters.get("$defs") or parameters.get("definitions") or {}
        self.fields = {name: field_for(name, schema, name in required, defs)
                       for name, schema in (parameters.get("properties") or {}).items()}
        self.form.children = tuple(self.fields.values())

    def _arguments(self) -> dict[str, Any]:
        arguments = {}
        for name, widget in self.fields.items():
            value = _value(name, widget)
            if value is not _UNSET:
                # Left empty: an optional argument takes the tool's default; a
                # required one is missing, which the check reports.
                arguments[name] = value
        return arguments

    def _deliver(self, action: Any, *args: Any, **kwargs: Any) -> bool:
        self.error.value = ""
        try:
            action(*args, **kwargs)
        except (ValueError, RuntimeError) as exc:  # a bad argument, or nothing asked: say it, send nothing
            self.error.value = error_html(str(exc))
            return False
        return True

    def _on_reply(self, _button: Any = None) -> None:
        if self._deliver(self.ro.answer, self.reply.value):
            self.reply.value = ""

    def _on_call(self, _button: Any = None) -> None:
        try:
            arguments = self._arguments()
        except ValueError as exc:  # a field whose text is not what its schema asks
            self.error.value = error_html(str(exc))
            return
        self._deliver(self.ro.call, self.tool.value, **arguments)

    def refresh(self) -> None:
        request = self.ro.asked
        waiting = request is None
        if waiting and self.ro.closed:
            self.asked.value = '<i class="rk-not-asked">the rollout is closed: nothing more to answer</i>'
        elif waiting:
            self.asked.value = '<i class="rk-not-asked">not asked yet: press Step, and answer when the model is asked</i>'
        else:
            last = request.messages[-1]
            said = html.escape(f"{last.role}: {getattr(last, 'content', '') or ''}")
            self.asked.value = f'<div class="rk-asked-now"><b>asked</b> after <code>{said}</code></div>'
        for control in (self.reply, self.send_reply, self.call_button):
            control.disabled = waiting
