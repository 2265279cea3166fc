"""The interception server's Gemini dialect, driven by the google-genai SDK over real HTTP.

Plain, streamed (server-sent events and the JSON-array stream), a function
call round trip (parallel calls, ids dropped by a client), function calling
modes, countTokens, the model list, Google's error shape for wrong keys,
malformed bodies and refusals, and the key as Google's clients send it
(`x-goog-api-key`, `?key=`). The limit/@stop/@intercept parity with the other
dialects is the parametrized test in test_dialects.py.
"""

from __future__ import annotations

import json

import aiohttp
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

import rollkit as rk
from rollkit.programs.dialects import GEMINI

from test_dialects import ADD, ADD_CALL, run

ADD_DECLARATION = types.FunctionDeclaration(name="add", description="Add two numbers.", parameters_json_schema=ADD)
NO_AUTO_CALLS = types.AutomaticFunctionCallingConfig(disable=True)


class Seen(rk.ScriptedModel):
    """A ScriptedModel that keeps every request it was sent."""

    def __init__(self, replies) -> None:
        super().__init__(replies)
        self.requests: list[rk.Request] = []

    async def complete(self, request):
        self.requests.append(request)
        return await super().complete(request)


def gemini_client(ctx, key=None):
    # No retries: a refusal must be answered once, and the test sees each call.
    options = types.HttpOptions(base_url=ctx.services["gemini"], retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=key or ctx.secret, http_options=options)


def tool_config(**config) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(tools=[types.Tool(function_declarations=[ADD_DECLARATION])],
                                       automatic_function_calling=NO_AUTO_CALLS, **config)


async def test_gemini_plain_answer_with_system_instruction_and_usage_metadata():
    async def body(ctx):
        client = gemini_client(ctx)
        config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.5, max_output_tokens=50)
        ctx.state["out"] = await client.aio.models.generate_content(model="gemini-x", contents="say hello", config=config)

    model = Seen(["hello there"])
    trace, response = await run(body, [], model=model)
    assert response.text == "hello there" and response.candidates[0].finish_reason == types.FinishReason.STOP
    usage = response.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.total_token_count) == (6, 3, 9)
    assert response.model_version == "scripted"  # the model that answered, as other dialects report it
    assert trace.transcript == "system: Be brief.\nuser: say hello\nassistant: hello there"
    assert [c.dialect for c in trace.model_calls] == ["gemini"]
    [request] = model.requests
    assert request.model == "gemini-x" and request.params == {"temperature": 0.5, "max_tokens": 50}


async def test_gemini_stream_over_server_sent_events_arrives_in_pieces():
    long = "word " * 40

    async def body(ctx):
        client = gemini_client(ctx)
        stream = await client.aio.models.generate_content_stream(model="m", contents="talk")
        ctx.state["out"] = [chunk async for chunk in stream]

    trace, chunks = await run(body, [long])
    assert len(chunks) == 4 and "".join(c.text for c in chunks) == long
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 41 and chunks[0].usage_metadata is None
    assert trace.num_turns == 1 and trace.model_calls[0].dialect == "gemini"


async def test_gemini_function_call_round_trip_keeps_the_ledger_to_the_character():
    async def body(ctx):
        client = gemini_client(ctx)
        history = [types.Content(role="user", parts=[types.Part(text="add 2 and 3")])]
        first = await client.aio.models.generate_content(model="m", contents=history, config=tool_config())
        [call] = first.function_calls
        history += [first.candidates[0].content,
                    types.Content(role="user", parts=[types.Part.from_function_response(name="add", response={"result": "5"})])]
        second = await client.aio.models.generate_content(model="m", contents=history, config=tool_config())
        ctx.state["out"] = (call.name, call.args, call.id, first.text, second.text)

    compact = rk.AssistantMessage(content="adding", tool_calls=[rk.ToolCall(id="c", name="add", arguments='{"a":2,"b":3}')])
    model = Seen([compact, "it is 5"])
    trace, out = await run(body, [], model=model)
    assert out == ("add", {"a": 2, "b": 3}, "call_0_0", "adding", "it is 5")  # ScriptedModel's id for the call
    # The model wrote '{"a":2,"b":3}'; the SDK sent back an object: the ledger
    # still holds what the model wrote, so the second turn extends it.
    assert trace.messages[1].tool_calls[0].arguments == '{"a":2,"b":3}'
    assert (trace.messages[2].tool_call_id, trace.messages[2].content, trace.messages[2].name) == ("call_0_0", "5", "add")
    assert trace.turns[1].new_input_tokens == 2 and len(trace.messages) == 4
    assert model.requests[0].tools == [
        {"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": ADD}}]


async def test_gemini_parallel_calls_answered_without_ids_match_by_name_and_order():
    """A client that drops the ids (older Gemini clients do) still lands each
    result on its call, and the calls on what the model wrote."""
    two = rk.AssistantMessage(content=None, tool_calls=[
        rk.ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),
        rk.ToolCall(id="c2", name="add", arguments='{"a": 3, "b": 4}')])

    async def body(ctx):
        url = f"{ctx.services['gemini']}/v1beta/models/m:generateContent"
        history = [{"role": "user", "parts": [{"text": "two sums"}]}]
        tools = [{"functionDeclarations": [{"name": "add", "parameters": {
            "type": "OBJECT", "properties": {"a": {"type": "INTEGER"}, "b": {"type": "INTEGER"}}}}]}]
        async with aiohttp.ClientSession(headers={"x-goog-api-key": ctx.secret}) as http:
            async with http.post(url, json={"contents": history, "tools": tools}) as answer:
                first = await answer.json()
            calls = [p["functionCall"] for p in first["candidates"][0]["content"]["parts"]]
            history += [{"role": "model", "parts": [{"functionCall": {"name": c["name"], "args": c["args"]}} for c in calls]},
                        {"role": "user", "parts": [{"functionResponse": {"name": "add", "response": {"output": "3"}}},
                                                   {"functionResponse": {"name": "add", "response": {"output": "7"}}}]}]
            async with http.post(url, json={"contents": history, "tools": tools}) as answer:
                second = await answer.json()
        ctx.state["out"] = (calls, second["candidates"][0]["content"]["parts"][0]["text"])

    model = Seen([two, "3 and 7"])
    trace, (calls, text) = await run(body, [], model=model)
    assert calls == [{"id": "call_0_0", "name": "add", "args": {"a": 1, "b": 2}},
                     {"id": "call_0_1", "name": "add", "args": {"a": 3, "b": 4}}]
    assert text == "3 and 7"
    assert [c.arguments for c in trace.messages[1].tool_calls] == ['{"a": 1, "b": 2}', '{"a": 3, "b": 4}']
    assert [(m.tool_call_id, m.content) for m in trace.messages[2:4]] == [("call_0_0", "3"), ("call_0_1", "7")]
    assert trace.turns[1].new_input_tokens == 4  # the two results (2 tokens each) and nothing else: the ledger held
    # Google's upper-case OpenAPI types reach the model as JSON Schema's.
    assert model.requests[0].tools[0]["function"]["parameters"] == {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}


async def test_gemini_function_calling_modes_become_tool_choices():
    async def body(ctx):
        client = gemini_client(ctx)
        for mode, names in (("ANY", ["add"]), ("ANY", None), ("NONE", None), ("AUTO", None)):
            calling = types.FunctionCallingConfig(mode=mode, allowed_function_names=names)
            await client.aio.models.generate_content(
                model="m", contents=f"{mode} {names}", config=tool_config(tool_config=types.ToolConfig(function_calling_config=calling)))

    model = Seen(lambda request: "ok")
    await run(body, [], model=model)
    assert [r.params["tool_choice"] for r in model.requests] == [
        {"type": "function", "function": {"name": "add"}}, "required", "none", "auto"]


async def test_gemini_json_array_stream_count_tokens_and_model_list():
    async def body(ctx):
        base = ctx.services["gemini"] + "/v1beta/models"
        out = []
        async with aiohttp.ClientSession() as http:
            # No alt=sse: one JSON array, as the API streams without it; the key as ?key=.
            async with http.post(f"{base}/m:streamGenerateContent", params={"key": ctx.secret},
                                 json={"contents": [{"parts": [{"text": "hi"}]}]}) as answer:
                out.append((answer.status, answer.content_type, json.loads(await answer.read())))
        client = gemini_client(ctx)
        out.append(await client.aio.models.count_tokens(model="m", contents="two words"))
        out.append([m.name async for m in await client.aio.models.list()])
        out.append((await client.aio.models.get(model="gemini-x")).name)
        ctx.state["out"] = out

    trace, (streamed, counted, listed, got) = await run(body, ["hello"])
    status, kind, chunks = streamed
    assert (status, kind) == (200, "application/json")
    assert [c["candidates"][0]["content"]["parts"] for c in chunks] == [[{"text": "hello"}]]
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 4
    assert counted.total_tokens == 3
    assert listed == ["models/m"] and got == "models/gemini-x"
    assert len(trace.model_calls) == 1


async def test_gemini_key_errors_malformed_bodies_and_refusals_in_googles_error_shape():
    async def body(ctx):
        out = []
        with pytest.raises(genai_errors.ClientError) as wrong:
            await gemini_client(ctx, key="wrong-key-123456789").aio.models.generate_content(model="m", contents="x")
        out.append((wrong.value.code, wrong.value.status, wrong.value.message))
        url = ctx.services["gemini"] + "/v1beta/models/m:generateContent"
        async with aiohttp.ClientSession(headers={"x-goog-api-key": ctx.secret}) as http:
            for case in ({"contents": []},
                         {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": ""}}]}]},
                         {"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]},
                         {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}}):
                async with http.post(url, json=case) as answer:
                    out.append((answer.status, await answer.json()))
            async with http.post(url.replace("generateContent", "embedContent"), json={}) as answer:
                out.append((answer.status, await answer.json()))
        client = gemini_client(ctx)
        await client.aio.models.generate_content(model="m", contents="one")
        with pytest.raises(genai_errors.ClientError) as refused:
            await client.aio.models.generate_content(model="m", contents="two")
        out.append((refused.value.code, refused.value.status, refused.value.message))
        ctx.state["out"] = out

    trace, (wrong, empty, image, search, many, nowhere, refused) = await run(body, ["a", "b"], limits={"max_turns": 1})
    assert wrong[:2] == (401, "UNAUTHENTICATED")
    assert wrong[2].startswith("a wrong API key (x-goog-api-key, ?key= or a bearer token): set GEMINI_API_KEY")
    assert empty == (400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                     "malformed generateContent request: contents: must be a non-empty list of contents",
                     "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INVALID_REQUEST_ERROR",
                                  "domain": "rollkit"}]}})
    assert image[0] == 400 and "contents[0].parts[0]: a inlineData part is not supported" in image[1]["error"]["message"]
    assert search[0] == 400 and "tools[0]: googleSearch is not served here" in search[1]["error"]["message"]
    assert many[0] == 400 and "generationConfig.candidateCount: 2" in many[1]["error"]["message"]
    assert nowhere[0] == 404 and nowhere[1]["error"]["status"] == "NOT_FOUND"
    assert "POST /v1beta/models/{model}:streamGenerateContent" in nowhere[1]["error"]["message"]
    assert refused[:2] == (410, "FAILED_PRECONDITION")
    assert "rollout stopped: max_turns" in refused[2]
    assert trace.stop_condition == "max_turns" and trace.num_turns == 1


async def test_a_gemini_path_without_a_route_answers_in_googles_shape():
    async def body(ctx):
        async with aiohttp.ClientSession(headers={"x-goog-api-key": ctx.secret}) as http:
            async with http.post(ctx.services["gemini"] + "/v1beta/cachedContents", json={}) as answer:
                ctx.state["out"] = (answer.status, await answer.json())

    _, (status, answer) = await run(body, [])
    assert status == 404 and answer["error"]["code"] == 404 and answer["error"]["status"] == "NOT_FOUND"


def test_gemini_thought_parts_are_skipped_and_a_string_system_instruction_is_read():
    parsed = GEMINI.parse({"systemInstruction": "base", "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "pondering", "thought": True}, {"text": "hello", "thoughtSignature": "xx"}]},
        {"role": "user", "parts": [{"text": "again"}]}]}, {}, model="m")
    assert [(m.role, m.content) for m in parsed.request.messages] == [
        ("system", "base"), ("user", "hi"), ("assistant", "hello"), ("user", "again")]
    assert parsed.request.model == "m" and not parsed.stream
