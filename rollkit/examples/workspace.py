"""An example task set for agent programs that work in a folder: write the answer to a file.

`answer_file_tasks(n)` asks for the value of an arithmetic expression written
into `answer.txt` in the working folder; `finalize` reads the file from the
runtime (a `SubprocessRuntime`) and the reward is 1 when it holds the value.

`toy_shell_model()` is the embedded model for shell-using programs: it finds
the shell tool in the request, whatever the program calls it (`bash`,
`shell`, `exec_command`, `Bash`, ...), fills its command argument in the
shape the tool's schema asks for (a string, or an argv list), writes the
answer with one command, then ends the way the program expects (the
mini-swe-agent submit command when the prompt asks for it, otherwise a short
final reply). It is wrong on purpose on every third task (off by one), so
rewards vary. Nothing here needs a network or a key.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.hooks import reward
from ..core.messages import AssistantMessage, Request, ToolCall
from ..core.models import ScriptedModel
from ..core.task import Task, TaskData

__all__ = ["AnswerFile", "AnswerFileData", "answer_file_tasks", "toy_shell_model", "SHELL_TOOLS"]

# The shell tool of well-known agent programs, by the name each gives it.
SHELL_TOOLS = ("bash", "shell", "exec_command", "Bash", "local_shell", "container.exec", "run_shell_command")
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class AnswerFileData(TaskData):
    expression: str
    answer: int


class AnswerFile(Task):
    """Write the value of an expression into answer.txt."""

    Data = AnswerFileData

    async def finalize(self, ctx: Any) -> None:
        try:
            ctx.state["answer.txt"] = ctx.runtime.read("answer.txt")
        except (FileNotFoundError, AttributeError):
            ctx.state["answer.txt"] = None

    @reward(weight=1.0)
    def wrote_answer(self, ctx: Any) -> float:
        """1 when answer.txt holds the answer (and nothing else)."""
        text = ctx.state.get("answer.txt")
        return float(text is not None and text.strip() == str(self.data.answer))


def answer_file_tasks(n: int = 6) -> list[AnswerFile]:
    """n tasks: the value of a * b + c into answer.txt."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    tasks = []
    for i in range(n):
        a, b, c = 7 + i, 3 + i % 4, i
        expression = f"{a} * {b} + {c}"
        tasks.append(AnswerFile(
            id=f"answer-file-{i:03d}",
            prompt=f"Compute {expression} and write just the number into the file answer.txt in the current folder.",
            expression=expression, answer=a * b + c,
        ))
    return tasks


def _shell_tool(request: Request) -> dict[str, Any] | None:
    for tool in request.tools:
        function = tool.get("function", tool)
        if function.get("name") in SHELL_TOOLS:
            return function
    return None


def _arguments(tool: dict[str, Any], command: str) -> str:
    properties = (tool.get("parameters") or {}).get("properties") or {}
    key = next((k for k in ("command", "cmd", "commands") if k in properties), "command")
    kind = properties.get(key, {}).get("type")
    value: Any = ["bash", "-lc", command] if kind == "array" else command
    arguments: dict[str, Any] = {key: value}
    if "description" in (tool.get("parameters") or {}).get("required", []):
        arguments["description"] = "write the answer"
    return json.dumps(arguments)


def _toy_shell_reply(request: Request) -> Any:
    tool = _shell_tool(request)
    prompt = " ".join(m.content or "" for m in request.messages if m.role in ("system", "user"))
    found = re.search(r"Compute (\d+) \* (\d+) \+ (\d+)", prompt)
    if tool is None or found is None:
        return "I need a shell tool and an expression to compute."
    ran = [m for m in request.messages if m.role == "tool"]
    turn = sum(1 for m in request.messages if m.role == "assistant")
    if not ran:
        a, b, c = (int(g) for g in found.groups())
        value = a * b + c + (1 if a % 3 == 0 else 0)  # the toy's flaw: off by one when a is a multiple of 3
        command = f"echo {value} > answer.txt"
    elif _SUBMIT in prompt and len(ran) == 1:
        command = f"echo {_SUBMIT}"
    else:
        return "Done: the answer is in answer.txt."
    call = ToolCall(id=f"call_{turn}_0", name=tool["name"], arguments=_arguments(tool, command))
    return AssistantMessage(content=None, tool_calls=[call])


def toy_shell_model() -> ScriptedModel:
    """The embedded model for shell-using agent programs (see the module docstring)."""
    return ScriptedModel(_toy_shell_reply, name="toy-shell")
