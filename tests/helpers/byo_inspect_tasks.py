"""inspect-ai tasks for tests/test_tasks_from.py and notebook 09, written as an
inspect user writes them (a file of @task functions, loaded as "file.py@name").

`qa` scores with match() and includes() and has a tool-using sample; `mcq`
is a multiple-choice task scored by choice(); `graded` adds a custom scorer
with a numeric value; `broken` has a scorer that raises; `judged` is scored by
model_graded_qa with a grader model the test names; `limited` loops on
a tool for two turns and answers on the third, unless one of inspect's
limits (its arguments) ends it first; `shell` has a sample in inspect's
local sandbox (a file, a setup script) read with inspect's bash() tool. `REPLIES` says what
the scripted model answers to each prompt (`reply(messages)`, the same for
inspect and for rollkit), right on some samples and wrong on others.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, accuracy, choice, includes, match, mean, scorer
from inspect_ai.solver import TaskState, generate, multiple_choice, prompt_template, system_message, use_tools
from inspect_ai.tool import bash, tool


@tool
def add() -> Any:
    async def execute(x: int, y: int) -> int:
        """Add two whole numbers.

        Args:
          x: the first number
          y: the second number
        """
        return x + y

    return execute


@task
def qa() -> Task:
    return Task(
        dataset=[
            Sample(input="What is 2+2?", target="4"),
            Sample(input="What is the capital of Italy?", target="Rome"),
            Sample(input="Say hello to the reader.", target="hello"),
            Sample(input="Use the tool to add 3 and 4.", target="7", id="tool-add"),
            Sample(input="What is 10 minus 3?", target="7", metadata={"kind": "arith"}),
        ],
        solver=[system_message("Answer briefly."), prompt_template("Question: {prompt}"), use_tools(add()), generate()],
        scorer=[match(), includes()],
    )


@task
def mcq() -> Task:
    return Task(
        dataset=[
            Sample(input="Which city is the capital of France?", choices=["Rome", "Paris", "Oslo"], target="B", id="fr"),
            Sample(input="Which planet is the largest?", choices=["Jupiter", "Mars"], target="A", id="planet"),
            Sample(input="Which number is prime?", choices=["4", "6", "7"], target="C", id="prime"),
        ],
        solver=multiple_choice(),
        scorer=choice(),
        epochs=2,
    )


@scorer(metrics=[mean()])
def reply_length() -> Any:
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=len(state.output.completion.split()), answer=state.output.completion)

    return score


@task
def graded() -> Task:
    return Task(dataset=[Sample(input="What is 2+2?", target="4"), Sample(input="Say hello to the reader.", target="hi")],
                scorer=[includes(), reply_length()])


@scorer(metrics=[accuracy()])
def explodes() -> Any:
    async def score(state: TaskState, target: Target) -> Score:
        raise RuntimeError("the grader fell over")

    return score


@task
def broken() -> Task:
    return Task(dataset=[Sample(input="What is 2+2?", target="4")], scorer=[explodes(), match()])


# What the scripted model says, by a phrase of the prompt (inspect and rollkit send the same prompts).
REPLIES = {
    "2+2": "4",
    "capital of Italy": "I believe it is Paris.",
    "Say hello": "Well, hello there.",
    "10 minus 3": "It is 6",
    "capital of France": "ANSWER: B",
    "largest": "ANSWER: B",
    "prime": "ANSWER: C",
}


def reply(messages: list[dict[str, Any]]) -> Any:
    """The scripted answer to an OpenAI-shaped conversation: a tool call for
    the tool sample, then the tool's result read back; else by REPLIES."""
    last = messages[-1]
    content = last.get("content")
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
    if any("Keep adding" in str(m.get("content")) for m in messages if m["role"] == "user"):
        # Three turns (11, 12 and 13 tokens as the server counts them), unless a limit ends them first.
        done = sum(1 for m in messages if m["role"] == "tool") >= 2
        return "The sum is 3" if done else {"tool": "add", "arguments": {"x": 1, "y": 2}}
    if last["role"] == "tool":
        return f"The tool says {text}, so the answer is {text}"
    if "[Criterion]:" in text:
        return grade(text)
    if "Read the note" in text:
        return {"tool": "bash", "arguments": {"command": "cat note.txt setup.txt; pwd"}}
    if "add 3 and 4" in text:
        return {"tool": "add", "arguments": {"x": 3, "y": 4}}
    return next((answer for phrase, answer in REPLIES.items() if phrase in text), "I do not know.")


@task
def judged() -> Task:
    """Graded by a model: the grader is "openai/gpt-4o-mini" by name (the test points
    OPENAI_BASE_URL and OPENAI_API_KEY at its scripted server)."""
    from inspect_ai.scorer import model_graded_qa

    return Task(dataset=[Sample(input="What is 2+2?", target="4", id="sum"),
                         Sample(input="What is the capital of Italy?", target="Rome", id="capital")],
                scorer=model_graded_qa(model="openai/gpt-4o-mini"))


def grade(prompt: str) -> str:
    """The scripted grader: correct when the submission holds the criterion's answer."""
    submission = prompt.split("[Submission]:", 1)[-1].split("***", 1)[0]
    criterion = prompt.split("[Criterion]:", 1)[-1].split("***", 1)[0].strip()
    return "GRADE: C" if criterion and criterion in submission else "GRADE: I"


@task
def limited(message_limit: int | None = None, token_limit: int | str | None = None,
            turn_limit: int | None = None, cost_limit: float | None = None) -> Task:
    """The model calls add() twice, then answers: inspect's limits may end it first."""
    return Task(dataset=[Sample(input="Keep adding 1 and 2.", target="3", id="loop")],
                solver=[system_message("Use the tool."), use_tools(add()), generate()], scorer=includes(),
                message_limit=message_limit, token_limit=token_limit, turn_limit=turn_limit, cost_limit=cost_limit)


@task
def shell() -> Task:
    return Task(dataset=[Sample(input="Read the note with the shell.", target="hello from the file", id="note",
                                files={"note.txt": "hello from the file"}, setup="echo set up > setup.txt")],
                solver=[use_tools(bash()), generate()], scorer=includes(), sandbox="local")
