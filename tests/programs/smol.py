"""A smolagents ToolCallingAgent as a program run by ProgramHarness.

smolagents keeps its own memory of steps and rebuilds the prompt from it on
every call: the model's structured tool calls go back as assistant text
("Calling tools: ...") and their results as user text ("Observation: ..."),
so the model's own tool calls are in no later request. It imports nothing
from rollkit: OPENAI_BASE_URL, OPENAI_API_KEY and ROLLKIT_MODEL point it at
the rollout's interception server; the task is the last user message of the
conversation on stdin's first line. It has one local tool, `add`, and writes the final
answer to answer.txt.
"""

import json
import os
import sys

from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


def main() -> None:
    conversation = json.loads(sys.stdin.readline())["messages"]
    task = [m["content"] for m in conversation if m.get("role") == "user"][-1]
    model = OpenAIServerModel(model_id=os.environ.get("ROLLKIT_MODEL", "default"),
                              api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    agent = ToolCallingAgent(tools=[add], model=model, max_steps=4, verbosity_level=0)
    answer = agent.run(task)
    with open("answer.txt", "w") as f:
        f.write(str(answer))


if __name__ == "__main__":
    main()
