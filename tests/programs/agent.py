"""A small agent program for rollkit's tests.

Written against the openai SDK and the MCP client only: it imports nothing
from rollkit, and reads only what any program run by ProgramHarness gets:
OPENAI_BASE_URL and OPENAI_API_KEY (the SDK reads them itself),
ROLLKIT_MODEL, ROLLKIT_MCP_SERVERS, ROLLKIT_PERSISTENT, and the conversation
as JSON lines on stdin.

Its loop: ask the model; run the tool calls it asks for on the MCP servers;
repeat until it answers without tool calls; write the answer to answer.txt.
In persistent mode it then writes {"yield": answer} and waits for the next
line. AGENT_MODE picks behaviours for the tests (comma-separated):

- "tools" (default): the loop above.
- "stream": the same, with streamed completions.
- "crash": raises after the model's first reply.
- "ignore-refusal": catches every error status and calls again, forever.
- "spawn": first starts a grandchild (`sleep 300`) and writes its pid to
  child.pid, to prove nothing it leaves behind survives the rollout.
"""

import asyncio
import contextlib
import json
import os
import subprocess
import sys

import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MODES = set(os.environ.get("AGENT_MODE", "tools").split(","))
MODEL = os.environ.get("ROLLKIT_MODEL", "default")


async def connect_tools(stack):
    """Open every MCP server; return OpenAI tool specs and name -> client."""
    servers = json.loads(os.environ.get("ROLLKIT_MCP_SERVERS", "{}"))
    headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
    specs, owners = [], {}
    for url in servers.values():
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
        client = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
        for tool in (await client.list_tools()).tools:
            specs.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description or "", "parameters": tool.input_schema}})
            owners[tool.name] = client
    return specs, owners


async def ask(client, conversation, specs):
    """One model call; returns the assistant message as a dict."""
    options = {"model": MODEL, "messages": conversation}
    if specs:
        options["tools"] = specs
    if "stream" not in MODES:
        completion = await client.chat.completions.create(**options)
        return completion.choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    async for chunk in await client.chat.completions.create(**options, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": call.id, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                entry["function"]["name"] += call.function.name or ""
                entry["function"]["arguments"] += call.function.arguments or ""
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


async def run_turn(client, conversation, specs, owners):
    while True:
        try:
            reply = await ask(client, conversation, specs)
        except openai.APIStatusError:
            if "ignore-refusal" in MODES:
                continue
            raise
        conversation.append(reply)
        if "crash" in MODES:
            raise RuntimeError("the agent crashed on purpose after its first reply")
        if not reply.get("tool_calls"):
            return reply.get("content") or ""
        for call in reply["tool_calls"]:
            name = call["function"]["name"]
            result = await owners[name].call_tool(name, json.loads(call["function"]["arguments"] or "{}"))
            text = "".join(part.text for part in result.content if getattr(part, "text", None) is not None)
            conversation.append({"role": "tool", "tool_call_id": call["id"], "content": text})


async def main():
    if "spawn" in MODES:
        child = subprocess.Popen(["sleep", "300"])
        with open("child.pid", "w") as f:
            f.write(str(child.pid))
    persistent = os.environ.get("ROLLKIT_PERSISTENT") == "1"
    client = openai.AsyncOpenAI(max_retries=1)
    conversation = []
    async with contextlib.AsyncExitStack() as stack:
        specs, owners = await connect_tools(stack)
        while line := await asyncio.to_thread(sys.stdin.readline):
            conversation += json.loads(line)["messages"]
            answer = await run_turn(client, conversation, specs, owners)
            with open("answer.txt", "w") as f:
                f.write(answer)
            if not persistent:
                break
            print(json.dumps({"yield": answer}), flush=True)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
