"""Write the inspect-ai logs in tests/fixtures/inspect/ with inspect itself,
offline (its mockllm provider): a tool-using agent with a tool that fails
(a ToolCallError), a message limit, two scorers (a match and a model-graded
one whose grader is a second mock model), and cache-read tokens.

    PYTHONPATH=. python scripts/make_inspect_fixtures.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, includes, scorer
from inspect_ai.solver import TaskState
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolError, tool


@tool
def add():
    async def execute(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first number
            b: the second number
        """
        if a < 0:
            raise ToolError("negative numbers are not supported")
        return a + b

    return execute


@scorer(metrics=[accuracy()])
def graded(grader_outputs: int = 3):
    """A model-graded scorer: a second (mock) model reads the answer and
    replies with a grade."""
    grader = get_model("mockllm/model", custom_outputs=[
        ModelOutput.from_content("mockllm/model", "The answer is right. GRADE: C") for _ in range(grader_outputs)])

    async def score(state: TaskState, target: Target) -> Score:
        verdict = await grader.generate(f"Is {state.output.completion!r} right for {target.text!r}? Say GRADE: C or I.")
        return Score(value=CORRECT if "GRADE: C" in verdict.completion else INCORRECT, explanation=verdict.completion)

    return score


def _out(content: str | None = None, call: tuple[str, dict] | None = None, cached: int | None = None) -> ModelOutput:
    if call:
        out = ModelOutput.for_tool_call("mockllm/model", call[0], call[1])
    else:
        out = ModelOutput.from_content("mockllm/model", content or "")
    out.usage = ModelUsage(input_tokens=40, output_tokens=12, total_tokens=52 + (cached or 0),
                           input_tokens_cache_read=cached)
    return out


def _task() -> Task:
    return Task(
        dataset=[Sample(id="s1", input="What is 2 + 3?", target="5"),
                 Sample(id="s2", input="What is -1 + 3?", target="2"),
                 Sample(id="s3", input="Add 1 and 1, then 1 and 2.", target="3")],
        solver=[use_tools(add()), generate()],
        scorer=[includes(), graded()],
        message_limit=4, name="adding",
    )


def _agent():
    return get_model("mockllm/model", custom_outputs=[
        _out(call=("add", {"a": 2, "b": 3})), _out("The answer is 5.", cached=30),      # s1
        _out(call=("add", {"a": -1, "b": 3})), _out("I could not add them.", cached=30),  # s2: the tool fails
        _out(call=("add", {"a": 1, "b": 1})), _out(call=("add", {"a": 1, "b": 2})),      # s3: message limit
        _out("unused"), _out("unused"),
    ])


def _offline_token_counts() -> None:
    """inspect estimates a mock model's token counts with tiktoken, which
    downloads its vocabulary on first use; this machine has no network, so
    the estimate counts words instead (it only sizes the mock's requests)."""
    import inspect_ai.model._model as model_module

    model_module.count_text_tokens = lambda text: max(1, len(text.split()))  # type: ignore[attr-defined]


def main(folder: Path) -> None:
    _offline_token_counts()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("eval", "json"):
            log = inspect_eval(_task(), model=_agent(), log_dir=tmp, log_format=fmt, display="none", max_samples=1,
                               fail_on_error=False)[0]
            shutil.copy(log.location, folder / f"adding.{fmt}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/inspect"))
