"""The OpenAI Agents SDK as an agent program, run by `rollkit.programs.harnesses.agents_sdk`.

A subprocess of the rollout's runtime, speaking only the ProgramHarness
contract: the conversation arrives as one JSON line on stdin; the model is
reached through the openai SDK's defaults (`OPENAI_BASE_URL`,
`OPENAI_API_KEY`: the interception server and the rollout's secret) with
the Responses model (`ROLLKIT_AGENTS_API=responses`, the SDK's default) or
the chat-completions one (`chat`); the task's tools are the MCP servers of
`ROLLKIT_MCP_SERVERS`. The SDK's tracing export is off: it would call
OpenAI's servers. Prints the final output as one JSON line.

It imports the agents SDK, never rollkit.
"""

import asyncio
import contextlib
import json
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI


def input_items(messages):
    """rollkit's chat-shaped conversation as Responses input items."""
    items = []
    for m in messages:
        role = m["role"]
        if role == "system":
            continue  # the agent's instructions
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif role == "assistant":
            if m.get("content"):
                items.append({"role": "assistant", "content": m["content"]})
            for call in m.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
        else:
            items.append({"role": "user", "content": m["content"]})
    return items


async def main():
    messages = json.loads(sys.stdin.readline())["messages"]
    set_tracing_disabled(True)
    client = AsyncOpenAI(max_retries=0)
    name = os.environ.get("ROLLKIT_MODEL", "rollkit")
    if os.environ.get("ROLLKIT_AGENTS_API", "responses") == "chat":
        model = OpenAIChatCompletionsModel(model=name, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=name, openai_client=client)
    secret = os.environ["OPENAI_API_KEY"]
    servers = [
        MCPServerStreamableHttp(params={"url": url, "headers": {"Authorization": f"Bearer {secret}"}},
                                name=toolset, cache_tools_list=True)
        for toolset, url in json.loads(os.environ.get("ROLLKIT_MCP_SERVERS", "{}")).items()
    ]
    instructions = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)
        agent = Agent(name="assistant", instructions=instructions, model=model, mcp_servers=servers)
        result = await Runner.run(agent, input_items(messages), max_turns=int(os.environ.get("ROLLKIT_AGENTS_MAX_TURNS", "20")))
    print(json.dumps({"final_output": str(result.final_output)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
