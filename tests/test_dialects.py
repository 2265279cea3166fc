"""The interception server's dialects, each driven by its official SDK over real HTTP.

OpenAI Responses through `openai.AsyncOpenAI().responses`, Anthropic Messages
through `anthropic.AsyncAnthropic().messages`, and chat completions'
streaming helpers: plain and streamed answers, a tool round trip, a limit
refusing a call, a @stop, an @intercept rewrite and a wrong key, and the
errors each dialect gives a malformed body. `Speaker` stands in for an agent
program inside the test process, registered like ProgramHarness does.
"""

from __future__ import annotations

import json

import aiohttp
import anthropic
import openai
import pytest

import rollkit as rk
from rollkit.core.models import count_tokens
from rollkit.programs import interception
from rollkit.programs.openai_model import OpenAIModel

from helpers.fake_provider import FakeProvider

ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
RESPONSES_TOOL = {"type": "function", "name": "add", "description": "Add two numbers.", "parameters": ADD}
ANTHROPIC_TOOL = {"name": "add", "description": "Add two numbers.", "input_schema": ADD}


class Speaker(interception.InterceptedHarness):
    """Runs `body(ctx)` as its segment; the body makes its own SDK calls."""

    name = "speaker"
    served_model = "m"

    def __init__(self, body) -> None:
        self.body = body

    async def segment(self, ctx, messages):
        await self.body(ctx)


def openai_client(ctx, **options):
    return openai.AsyncOpenAI(base_url=ctx.services["openai"], api_key=ctx.secret, max_retries=0, **options)


def anthropic_client(ctx, key=None):
    return anthropic.AsyncAnthropic(base_url=ctx.services["anthropic"], api_key=key or ctx.secret, max_retries=0)


async def run(body, replies, *, task=None, limits=None, model=None):
    """A rollout whose harness runs `body`; returns the trace and ctx.state['out']."""
    agent = rk.Agent(model=model or rk.ScriptedModel(replies), harness=Speaker(body), limits=limits)
    rollout = agent.rollout(task or rk.Task(prompt="hi"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    out = rollout.ctx.state.get("out")
    return await rollout.close(), out


ADD_CALL = rk.ScriptedModel.call("add", "adding", a=2, b=3)


def _assert_reply_kept(trace, dialect, sent):
    """The one streamed call keeps on the trace what the model returned and
    the request it answered, whatever the wire it went out on."""
    [call] = trace.model_calls
    assert (call.dialect, call.committed, call.finish_reason, call.request_messages) == (dialect, True, "tool_calls", 1)
    assert call.reply.content == sent.content
    assert [(c.name, json.loads(c.arguments)) for c in call.reply.tool_calls] == [
        ("add", {"a": 123456789, "b": 987654321})]
    assert [m.content for m in trace.request_of(call)] == ["add"]
    assert call.usage.input_tokens == count_tokens(rk.UserMessage(content="add")) and call.usage.output_tokens > 0


# ---- OpenAI Responses -------------------------------------------------------------


async def test_responses_plain_answer_with_instructions_and_usage():
    async def body(ctx):
        async with openai_client(ctx) as client:
            ctx.state["out"] = await client.responses.create(model="m", instructions="Be brief.", input="say hello")

    trace, response = await run(body, ["hello there"])
    assert response.output_text == "hello there" and response.status == "completed"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (6, 3)
    assert trace.transcript == "system: Be brief.\nuser: say hello\nassistant: hello there"
    assert [c.dialect for c in trace.model_calls] == ["responses"]


async def test_responses_tool_round_trip_with_previous_response_id():
    async def body(ctx):
        async with openai_client(ctx) as client:
            first = await client.responses.create(model="m", input="add 2 and 3", tools=[RESPONSES_TOOL])
            [call] = [item for item in first.output if item.type == "function_call"]
            second = await client.responses.create(
                model="m", previous_response_id=first.id, tools=[RESPONSES_TOOL],
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "5"}],
            )
            third = await client.responses.create(model="m", previous_response_id=second.id, input="thanks")
            ctx.state["out"] = (first.output_text, call.name, json.loads(call.arguments), second.output_text,
                                third.output_text)

    trace, out = await run(body, [ADD_CALL, "it is 5", "you are welcome"])
    assert out == ("adding", "add", {"a": 2, "b": 3}, "it is 5", "you are welcome")
    assert trace.transcript == (
        'user: add 2 and 3\nassistant: adding [calls add({"a": 2, "b": 3})]\ntool[call_0_0]: 5\nassistant: it is 5'
        "\nuser: thanks\nassistant: you are welcome"
    )
    # The later requests re-sent nothing: the history came from the chain of responses.
    assert trace.turns[1].new_input_tokens == 2 and trace.num_turns == 3


def test_responses_memory_keeps_one_link_per_response_not_a_copy_of_the_conversation():
    from rollkit.programs.dialects import RESPONSES

    memory: dict = {}
    previous = None
    for i in range(30):
        parsed = RESPONSES.parse({"model": "m", "input": f"turn {i}", "previous_response_id": previous}, memory)
        assert len(parsed.request.messages) == 2 * i + 1  # the whole conversation reaches the model
        reply = rk.Response(message=rk.AssistantMessage(content=f"reply {i}"))
        previous = RESPONSES.payload(reply, parsed, model="m", id=str(i), memory=memory)["id"]
    links = memory["responses.history"]
    assert len(links) == 30 and all(len(added) == 2 for _parent, added in links.values())
    assert links["resp_1"][0] == "resp_0" and links["resp_0"][0] is None


async def test_responses_stream_with_the_sdk_helper_and_argument_deltas():
    long_call = rk.ScriptedModel.call("add", "let me add these for you please", a=123456789, b=987654321)

    async def body(ctx):
        async with openai_client(ctx) as client:
            kinds, deltas = [], []
            async with client.responses.stream(model="m", input="add", tools=[RESPONSES_TOOL]) as stream:
                async for event in stream:
                    kinds.append(event.type)
                    if event.type == "response.function_call_arguments.delta":
                        deltas.append(event.delta)
                final = await stream.get_final_response()
            ctx.state["out"] = (kinds, deltas, final)

    trace, (kinds, deltas, final) = await run(body, [long_call])
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    assert len(deltas) > 1 and json.loads("".join(deltas)) == {"a": 123456789, "b": 987654321}
    [call] = [item for item in final.output if item.type == "function_call"]
    assert final.output_text == "let me add these for you please" and call.name == "add"
    assert trace.num_turns == 1
    _assert_reply_kept(trace, "responses", long_call)


async def test_responses_limit_stop_and_intercept_behave_as_on_every_route():
    # Guarded (below) redacts and halts; here the refusal body and a limit, in the Responses shape.
    async def body(ctx):
        async with openai_client(ctx) as client:
            first = await client.responses.create(model="m", input="go")
            with pytest.raises(openai.APIStatusError) as refused:
                await client.responses.create(model="m", input="again", previous_response_id=first.id)
            ctx.state["out"] = (first.output_text, refused.value.status_code, refused.value.body)

    trace, (text, status, error) = await run(body, ["the secret, then halt"], task=Guarded(prompt="hi"))
    assert text == "the [redacted], then halt"
    assert status == 410 and error["code"] == "halt" and error["type"] == "rollout_stopped"
    assert trace.stop_condition == "halt" and [r.hook for r in trace.response_rewrites] == ["redact"]

    async def twice(ctx):
        async with openai_client(ctx) as client:
            await client.responses.create(model="m", input="one")
            with pytest.raises(openai.APIStatusError) as refused:
                await client.responses.create(model="m", input="two")
            ctx.state["out"] = refused.value.status_code

    trace, status = await run(twice, ["a", "b"], limits={"max_turns": 1})
    assert status == 410 and trace.stop_condition == "max_turns" and trace.num_turns == 1


async def test_responses_errors_are_in_the_openai_shape_and_name_the_field():
    async def body(ctx):
        url = ctx.services["openai"] + "/responses"
        headers = {"Authorization": f"Bearer {ctx.secret}"}
        cases = [
            {"model": "m"},
            {"model": "m", "input": "x", "tools": [{"type": "teleport"}]},
            {"model": "m", "input": [{"type": "input_image", "image_url": "x"}]},
            {"model": "m", "input": "x", "previous_response_id": "resp_elsewhere"},
        ]
        out = []
        async with aiohttp.ClientSession() as http:
            for case in cases:
                async with http.post(url, json=case, headers=headers) as answer:
                    out.append((answer.status, await answer.json()))
            async with http.post(url, json={"model": "m", "input": "x"}, headers={"Authorization": "Bearer wrong-key-123456789"}) as answer:
                out.append((answer.status, await answer.json()))
        ctx.state["out"] = out

    trace, out = await run(body, [])
    messages = [(status, error["error"]["message"]) for status, error in out]
    assert messages[0] == (400, "malformed Responses request: 'input' is required: a string or a list of input items")
    assert messages[1] == (400, "malformed Responses request: tools[0]: tool type 'teleport' is not supported "
                                "(function, namespace and custom tools; hosted tools are left out)")
    assert messages[2][0] == 400 and "input[0]: input item type 'input_image' is not supported" in messages[2][1]
    assert messages[3] == (400, "malformed Responses request: 'previous_response_id' 'resp_elsewhere' is not a response of this rollout")
    assert messages[4][0] == 401 and messages[4][1].startswith("a wrong bearer token")
    # `param` names the field at fault, as OpenAI's errors do.
    assert [error["error"]["param"] for _status, error in out] == ["input", "tools[0].type", "input[0].type", "previous_response_id", None]
    assert trace.model_calls == []


async def test_responses_namespace_custom_and_hosted_tools_as_codex_sends_them():
    """Codex CLI sends namespaced functions, custom (free-form) tools and a
    hosted web search: the model sees the first two as functions, the third
    not at all, and its calls come back in the shape each tool was given in."""
    tools = [
        {"type": "namespace", "name": "agents", "description": "sub-agents",
         "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {}}}]},
        {"type": "custom", "name": "apply_patch", "description": "apply a patch"},
        {"type": "web_search", "external_web_access": True},
    ]
    seen = {}

    def reply(request):
        seen["tools"] = [tool["function"]["name"] for tool in request.tools]
        calls = [rk.ToolCall(id="c1", name="agents.spawn", arguments="{}"),
                 rk.ToolCall(id="c2", name="apply_patch", arguments=json.dumps({"input": "*** Begin Patch"}))]
        return rk.AssistantMessage(content=None, tool_calls=calls)

    async def body(ctx):
        async with openai_client(ctx) as client:
            ctx.state["out"] = await client.responses.create(model="m", input="go", tools=tools)

    trace, response = await run(body, [reply])
    assert seen["tools"] == ["agents.spawn", "apply_patch"]
    spawn, patch = response.output
    assert (spawn.type, spawn.name, spawn.namespace) == ("function_call", "spawn", "agents")
    assert (patch.type, patch.name, patch.input) == ("custom_tool_call", "apply_patch", "*** Begin Patch")


# ---- Anthropic Messages --------------------------------------------------------------


async def test_anthropic_plain_answer_with_system_and_usage():
    async def body(ctx):
        async with anthropic_client(ctx) as client:
            ctx.state["out"] = await client.messages.create(
                model="m", max_tokens=100, system="Be brief.", messages=[{"role": "user", "content": "say hello"}])

    trace, message = await run(body, ["hello there"])
    assert [b.text for b in message.content] == ["hello there"] and message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (6, 3)
    assert trace.transcript == "system: Be brief.\nuser: say hello\nassistant: hello there"
    assert [c.dialect for c in trace.model_calls] == ["anthropic"]


async def test_anthropic_tool_round_trip_keeps_the_ledger_to_the_character():
    async def body(ctx):
        async with anthropic_client(ctx) as client:
            history = [{"role": "user", "content": "add 2 and 3"}]
            first = await client.messages.create(model="m", max_tokens=100, messages=history, tools=[ANTHROPIC_TOOL])
            [use] = [b for b in first.content if b.type == "tool_use"]
            history += [
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]},
            ]
            second = await client.messages.create(model="m", max_tokens=100, messages=history, tools=[ANTHROPIC_TOOL])
            ctx.state["out"] = (first.stop_reason, use.name, use.input, second.content[0].text)

    compact = rk.AssistantMessage(content=None, tool_calls=[rk.ToolCall(id="toolu_1", name="add", arguments='{"a":2,"b":3}')])
    trace, out = await run(body, [compact, "it is 5"])
    assert out == ("tool_use", "add", {"a": 2, "b": 3}, "it is 5")
    # The model wrote '{"a":2,"b":3}'; the SDK sent back an object: the ledger
    # still holds what the model wrote, so the second turn extends it.
    assert trace.messages[1].tool_calls[0].arguments == '{"a":2,"b":3}'
    assert trace.turns[1].new_input_tokens == 2 and len(trace.messages) == 4


async def test_anthropic_stream_with_the_sdk_helper_and_input_json_deltas():
    long_call = rk.ScriptedModel.call("add", "let me add these for you please", a=123456789, b=987654321)

    async def body(ctx):
        async with anthropic_client(ctx) as client:
            kinds = []
            async with client.messages.stream(model="m", max_tokens=100, tools=[ANTHROPIC_TOOL],
                                              messages=[{"role": "user", "content": "add"}]) as stream:
                async for event in stream:
                    kinds.append(event.type)
                final = await stream.get_final_message()
            ctx.state["out"] = (kinds, final)

    trace, (kinds, final) = await run(body, [long_call])
    assert kinds[0] == "message_start" and "content_block_delta" in kinds and kinds[-1] == "message_stop"
    assert kinds.count("input_json") > 1  # the SDK's accumulated view of each input_json_delta
    assert final.content[0].text == "let me add these for you please"
    assert final.content[1].input == {"a": 123456789, "b": 987654321} and final.stop_reason == "tool_use"
    assert trace.num_turns == 1
    _assert_reply_kept(trace, "anthropic", long_call)


async def test_anthropic_limit_and_stop_refuse_in_its_error_shape_without_retrying():
    async def body(ctx):
        async with anthropic_client(ctx) as client:
            messages = [{"role": "user", "content": "one"}]
            await client.messages.create(model="m", max_tokens=10, messages=messages)
            with pytest.raises(anthropic.APIStatusError) as refused:
                await client.messages.create(model="m", max_tokens=10, messages=messages)
            ctx.state["out"] = (refused.value.status_code, refused.value.body)

    trace, (status, body_) = await run(body, ["a", "b"], limits={"max_turns": 1})
    assert status == 410 and body_["type"] == "error" and body_["error"]["type"] == "invalid_request_error"
    assert "rollout stopped: max_turns" in body_["error"]["message"]
    assert trace.stop_condition == "max_turns"


async def test_anthropic_key_errors_and_malformed_bodies_in_its_own_shape():
    async def body(ctx):
        out = []
        async with anthropic_client(ctx, key="wrong-key-123456789") as client:
            with pytest.raises(anthropic.AuthenticationError) as wrong:
                await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])
            out.append(wrong.value.body)
        url = ctx.services["anthropic"] + "/v1/messages"
        headers = {"x-api-key": ctx.secret, "anthropic-version": "2023-06-01"}
        async with aiohttp.ClientSession() as http:
            for case in (
                {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            ):
                async with http.post(url, json=case, headers=headers) as answer:
                    out.append((answer.status, await answer.json()))
            async with http.post(ctx.services["anthropic"] + "/v1/nowhere", json={}, headers=headers) as answer:
                out.append((answer.status, await answer.json()))
            async with http.post(url + "/count_tokens", headers=headers,
                                 json={"model": "m", "messages": [{"role": "user", "content": "two words"}]}) as answer:
                out.append((answer.status, await answer.json()))
        ctx.state["out"] = out

    trace, (wrong, missing, image, nowhere, counted) = await run(body, [])
    assert wrong["type"] == "error" and wrong["error"]["type"] == "authentication_error"
    assert wrong["error"]["message"].startswith("a wrong API key (x-api-key or a bearer token): set ANTHROPIC_API_KEY")
    assert missing == (400, {"type": "error", "error": {"type": "invalid_request_error", "message":
                        "malformed Messages request: max_tokens: Field required (a whole number >= 1)"}})
    assert image[0] == 400 and "messages.0.content.0: block type 'image' is not supported" in image[1]["error"]["message"]
    assert nowhere[0] == 404 and nowhere[1]["error"]["type"] == "not_found_error"
    assert "this server answers POST /v1/chat/completions, POST /v1/responses, POST /v1/messages" in nowhere[1]["error"]["message"]
    assert counted == (200, {"input_tokens": 3})
    assert trace.model_calls == []


async def test_anthropic_tool_result_with_an_image_reaches_the_model_as_a_placeholder():
    """Claude Code's Read tool returns a picture as an image block in a
    tool_result; the call goes on with a line saying what was left out."""
    async def body(ctx):
        async with anthropic_client(ctx) as client:
            ctx.state["out"] = await client.messages.create(model="m", max_tokens=50, messages=[
                {"role": "user", "content": "look at the chart"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "c.png"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": "c.png:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ]}]},
            ])

    trace, reply = await run(body, lambda request: "a bar chart")
    assert trace.errors == [] and reply.content[0].text == "a bar chart"
    [tool] = [m for m in trace.messages if m.role == "tool"]
    assert tool.content == "c.png:[image left out: image/png; rollkit's messages carry text only]"


# ---- chat completions streaming, and one model behind every dialect ---------------------


async def test_chat_stream_with_the_sdk_helper_accumulates_tool_call_deltas():
    long_call = rk.ScriptedModel.call("add", "let me add these for you please", a=123456789, b=987654321)
    tool = {"type": "function", "function": {"name": "add", "parameters": ADD}}

    async def body(ctx):
        async with openai_client(ctx) as client:
            deltas = 0
            async with client.chat.completions.stream(
                model="m", messages=[{"role": "user", "content": "add"}], tools=[tool],
            ) as stream:
                async for event in stream:
                    deltas += event.type == "tool_calls.function.arguments.delta"
                final = await stream.get_final_completion()
            ctx.state["out"] = (deltas, final)

    trace, (deltas, final) = await run(body, [long_call])
    message = final.choices[0].message
    assert deltas > 1 and message.content == "let me add these for you please"
    assert json.loads(message.tool_calls[0].function.arguments) == {"a": 123456789, "b": 987654321}
    assert final.choices[0].finish_reason == "tool_calls"
    _assert_reply_kept(trace, "chat", long_call)


async def test_a_chat_completions_endpoint_serves_programs_speaking_every_dialect():
    """OpenAIModel (chat completions upstream, here the fake provider) behind
    a program that speaks Responses and then Anthropic Messages."""
    fake = await FakeProvider().start()
    try:
        async def body(ctx):
            async with openai_client(ctx) as client:
                first = await client.responses.create(model="m", input="one")
            async with anthropic_client(ctx) as client:
                second = await client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "two"}])
            ctx.state["out"] = (first.output_text, second.content[0].text)

        model = OpenAIModel("upstream", base_url=fake.url, api_key="k")
        trace, out = await run(body, [], model=model)
        await model.aclose()
    finally:
        await fake.stop()
    assert out == ("echo: one", "echo: two")
    assert [c.dialect for c in trace.model_calls] == ["responses", "anthropic"]
    assert fake.requests[-1]["max_tokens"] == 20  # the Messages max_tokens reached the chat endpoint


def test_anthropic_system_messages_within_the_conversation_are_read_as_claude_code_sends_them():
    from rollkit.programs.dialects import ANTHROPIC

    parsed = ANTHROPIC.parse({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "base"}],
                              "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "reminder"}]}, {})
    assert [(m.role, m.content) for m in parsed.request.messages] == [("system", "base"), ("user", "hi"), ("system", "reminder")]
    assert parsed.request.params == {"max_tokens": 5}


class Guarded(rk.Task):
    """Redacts 'secret' in every reply; stops after a reply saying 'halt'."""

    @rk.intercept
    def redact(self, response: rk.Response) -> rk.Response | None:
        text = response.message.content or ""
        if "secret" not in text:
            return None
        message = response.message.model_copy(update={"content": text.replace("secret", "[redacted]")})
        return response.model_copy(update={"message": message})

    @rk.stop
    def halt(self, response: rk.Response) -> bool:
        return "halt" in (response.message.content or "")


async def _say_twice(dialect: str, ctx) -> tuple[str, int]:
    """One call answered, a second refused: (the first reply's text, the refusal's status)."""
    if dialect == "gemini":
        from google.genai import errors as genai_errors

        from test_gemini_dialect import gemini_client

        client = gemini_client(ctx)
        first = (await client.aio.models.generate_content(model="m", contents="go")).text
        with pytest.raises(genai_errors.ClientError) as refused:
            await client.aio.models.generate_content(model="m", contents="again")
        return first, refused.value.code
    if dialect == "anthropic":
        async with anthropic_client(ctx) as client:
            first = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}])
            with pytest.raises(anthropic.APIStatusError) as refused:
                await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}])
            return first.content[0].text, refused.value.status_code
    async with openai_client(ctx) as client:
        if dialect == "responses":
            first = (await client.responses.create(model="m", input="go")).output_text
            call = client.responses.create(model="m", input="again")
        else:
            first = (await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])).choices[0].message.content
            call = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
        with pytest.raises(openai.APIStatusError) as refused:
            await call
        return first, refused.value.status_code


@pytest.mark.parametrize("dialect", ["chat", "responses", "anthropic", "gemini"])
async def test_stop_and_intercept_behave_the_same_on_every_dialect(dialect):
    async def body(ctx):
        ctx.state["out"] = await _say_twice(dialect, ctx)

    trace, (text, status) = await run(body, ["the secret, then halt", "never"], task=Guarded(prompt="hi"))
    assert (text, status) == ("the [redacted], then halt", 410)
    assert trace.stop_condition == "halt" and trace.num_turns == 1
    assert [(r.hook, r.call) for r in trace.response_rewrites] == [("redact", 0)]
    assert [c.dialect for c in trace.model_calls] == [dialect]
    assert list(rk.frames.turns(trace)["dialect"]) == [dialect]
