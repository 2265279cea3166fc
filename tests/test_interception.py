"""The interception server, driven by the real openai SDK over real HTTP.

`SDKHarness` stands in for an agent program inside the test process (no
subprocess start per test): it registers its rollout with the shared server
like ProgramHarness does and makes its model calls with `openai.AsyncOpenAI`.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest

import rollkit as rk
from rollkit.programs import interception

from helpers.processes import listening_ports


class SDKHarness(interception.InterceptedHarness):
    name = "sdk"
    served_model = "m"

    def __init__(self, body, **client_options) -> None:
        self.body = body
        self.client_options = {"max_retries": 0, **client_options}

    async def segment(self, ctx, messages):
        client = openai.AsyncOpenAI(base_url=ctx.services["openai"], api_key=ctx.secret, **self.client_options)
        try:
            await self.body(client, ctx, messages)
        finally:
            await client.close()


def _wire(messages):
    return [{"role": m.role, "content": m.content} for m in messages]


async def _run(body, replies, *, limits=None, prompt="hi", **client_options):
    """Open a rollout whose harness runs `body`, step once, close; return the
    trace and what the body stored in ctx.state["out"]."""
    agent = rk.Agent(model=rk.ScriptedModel(replies), harness=SDKHarness(body, **client_options), limits=limits)
    rollout = agent.rollout(rk.Task(prompt=prompt))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    out = rollout.ctx.state.get("out")
    registration = SDKHarness.registration(rollout.ctx)
    trace = await rollout.close()
    return trace, out, registration


async def test_json_completion_commits_a_turn():
    async def body(client, ctx, messages):
        ctx.state["out"] = await client.chat.completions.create(model="m", messages=_wire(messages), temperature=0)

    trace, completion, _ = await _run(body, ["hello there"], prompt="say hello")
    assert completion.choices[0].message.content == "hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 3)
    assert trace.ok is True and trace.num_turns == 1
    assert trace.transcript == "user: say hello\nassistant: hello there"


async def test_streamed_completion_with_tool_call_and_usage():
    async def body(client, ctx, messages):
        stream = await client.chat.completions.create(
            model="m", messages=_wire(messages), stream=True, stream_options={"include_usage": True},
        )
        text, calls, usage, finish = "", {}, None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for c in choice.delta.tool_calls or []:  # the name first, then the arguments in pieces
                    name, arguments = calls.get(c.index, (None, ""))
                    calls[c.index] = (name or c.function.name, arguments + (c.function.arguments or ""))
                finish = choice.finish_reason or finish
        ctx.state["out"] = (text, list(calls.values()), usage.total_tokens, finish)

    reply = rk.ScriptedModel.call("add", "let me add", a=2, b=3)
    trace, out, _ = await _run(body, [reply])
    assert out == ("let me add", [("add", '{"a": 2, "b": 3}')], 2 + (1 + 3) + (1 + 1 + 4), "tool_calls")
    assert trace.model_calls[0].dialect == "chat"
    assert trace.num_turns == 1
    assert trace.messages[-1].tool_calls[0].name == "add"


async def test_tool_results_and_history_reach_the_session():
    async def body(client, ctx, messages):
        first = await client.chat.completions.create(model="m", messages=_wire(messages))
        call = first.choices[0].message.tool_calls[0]
        history = [*_wire(messages), first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        ctx.state["out"] = await client.chat.completions.create(model="m", messages=history)

    trace, final, _ = await _run(body, [rk.ScriptedModel.call("add", a=2, b=3), "it is 5"])
    assert final.choices[0].message.content == "it is 5"
    assert [m.role for m in trace.messages] == ["user", "assistant", "tool", "assistant"]
    assert trace.messages[2].content == "5"
    assert trace.sampled == [1, 3]


async def test_models_route_lists_the_rollout_model():
    async def body(client, ctx, messages):
        ctx.state["out"] = [m.id async for m in client.models.list()]

    _, ids, _ = await _run(body, [])
    assert ids == ["m"]


async def test_wrong_secret_gets_401_and_touches_no_trace():
    async def body(client, ctx, messages):
        bad = openai.AsyncOpenAI(base_url=ctx.services["openai"], api_key="x" * 32, max_retries=0)
        try:
            with pytest.raises(openai.AuthenticationError) as caught:
                await bad.chat.completions.create(model="m", messages=_wire(messages))
        finally:
            await bad.close()
        async with aiohttp.ClientSession() as http:
            async with http.post(ctx.services["openai"] + "/chat/completions", json={"messages": []}) as answer:
                ctx.state["out"] = (caught.value.status_code, str(caught.value), answer.status, await answer.json())

    trace, (status, message, bare_status, bare), _ = await _run(body, ["never sent"])
    assert status == 401 and "a wrong bearer token" in message
    assert bare_status == 401 and bare["error"]["message"].startswith("no bearer token: set OPENAI_API_KEY")
    assert trace.model_calls == [] and trace.messages[-1].role == "user"


async def _post(ctx, data: bytes | str, path="/chat/completions", method="POST"):
    headers = {"Authorization": f"Bearer {ctx.secret}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, ctx.services["openai"] + path, data=data, headers=headers) as answer:
            return answer.status, await answer.json(), answer.headers.get("x-should-retry")


async def test_malformed_bodies_unknown_routes_and_methods_get_clear_errors():
    async def body(client, ctx, messages):
        ctx.state["out"] = [
            await _post(ctx, "{not json"),
            await _post(ctx, json.dumps({"model": "m"})),
            await _post(ctx, json.dumps({"messages": [{"role": "wizard", "content": "x"}]})),
            await _post(ctx, json.dumps({"messages": [{"role": "user", "content": 5}]})),
            await _post(ctx, "", path="/completions"),
            await _post(ctx, "", method="GET"),
        ]

    trace, out, _ = await _run(body, ["never sent"])
    (s1, b1, _), (s2, b2, _), (s3, b3, _), (s4, b4, _), (s5, b5, _), (s6, b6, _) = out
    assert s1 == 400 and b1["error"]["message"].startswith("the request body is not JSON")
    assert s2 == 400 and "'messages' must be a non-empty list" in b2["error"]["message"]
    assert s3 == 400 and "messages[0]: unknown role 'wizard'" in b3["error"]["message"]
    assert s4 == 400 and "messages[0]: content must be a string" in b4["error"]["message"]
    assert s5 == 404 and b5["error"]["message"] == (
        "no route POST /v1/completions; this server answers POST /v1/chat/completions, POST /v1/responses, "
        "POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models, "
        "POST /v1beta/models/{model}:generateContent, POST /v1beta/models/{model}:streamGenerateContent, "
        "POST /v1beta/models/{model}:countTokens, GET /v1beta/models")
    assert s6 == 405 and "GET is not allowed on /v1/chat/completions" in b6["error"]["message"]
    assert trace.model_calls == []


async def test_oversized_body_gets_413():
    server = interception.InterceptionServer(max_body=2000)
    await server.start()
    agent = rk.Agent(model=rk.ScriptedModel(["x"]))
    rollout = agent.rollout(rk.Task(prompt="hi"))
    try:
        server.register(rollout.ctx.secret, rollout.session, rollout_id=rollout.id)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=rollout.ctx.secret, max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "y" * 5000}])
        await client.close()
    finally:
        await server.stop()
        await rollout.abort()
    assert caught.value.status_code == 413
    assert "larger than this server's limit of 2000 bytes" in str(caught.value)
    assert rollout.trace.model_calls == []


async def test_L13_refusal_is_410_that_the_sdk_does_not_retry():
    async def body(client, ctx, messages):
        await client.chat.completions.create(model="m", messages=_wire(messages))
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=_wire(messages) * 2)
        ctx.state["out"] = caught.value

    # max_retries=3: had the status been retryable, the SDK would have asked 4 times.
    trace, refusal, registration = await _run(body, ["a", "b"], limits={"max_turns": 1}, max_retries=3)
    assert refusal.status_code == 410
    assert refusal.code == "max_turns"
    assert "rollout stopped: max_turns" in str(refusal)
    assert registration.refusals == 1
    assert trace.stop_condition == "max_turns" and trace.ok is True and trace.num_turns == 1


async def test_retry_of_identical_last_request_is_answered_from_the_record():
    async def body(client, ctx, messages):
        data = json.dumps({"model": "m", "messages": _wire(messages)})
        headers = {"Authorization": f"Bearer {ctx.secret}", "Content-Type": "application/json"}
        url = ctx.services["openai"] + "/chat/completions"
        answers = []
        async with aiohttp.ClientSession() as http:
            for retry_count in ("0", "1", "0"):
                async with http.post(url, data=data, headers={**headers, "x-stainless-retry-count": retry_count}) as r:
                    answers.append((await r.json())["choices"][0]["message"]["content"])
        ctx.state["out"] = answers

    # The SDK's retry (count 1) replays; a deliberate repeat (count 0) samples again.
    trace, answers, registration = await _run(body, lambda request: f"sample {len(request.messages)}")
    assert answers == ["sample 1", "sample 1", "sample 1"]
    assert registration.replays == 1
    assert trace.num_turns == 2


async def test_sdk_retry_after_client_timeout_joins_the_call_in_flight():
    gate = asyncio.Event()
    calls = []

    async def slow(request):
        calls.append(request)
        await gate.wait()
        return "worth the wait"

    async def body(client, ctx, messages):
        registration = SDKHarness.registration(ctx)
        task = asyncio.ensure_future(client.chat.completions.create(model="m", messages=_wire(messages)))
        while registration.joins == 0:  # woken by each request the server answers or joins
            registration.activity.clear()
            await registration.activity.wait()
        gate.set()
        ctx.state["out"] = await task

    trace, completion, registration = await _run(body, slow, timeout=0.3, max_retries=5)
    assert completion.choices[0].message.content == "worth the wait"
    assert len(calls) == 1 and trace.num_turns == 1
    assert registration.joins >= 1


def _provider_down(request):
    raise rk.ProviderError("the provider is down", status=503)


async def test_pipeline_failure_is_reported_not_retried_and_kept_for_the_harness():
    async def body(client, ctx, messages):
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=_wire(messages))
        ctx.state["out"] = caught.value

    # A 503 the SDK would retry 3 times, had the server not said x-should-retry: false.
    trace, error, registration = await _run(body, _provider_down, max_retries=3)
    assert error.status_code == 503 and error.response.headers["x-should-retry"] == "false"
    assert "the provider is down" in str(error)
    assert isinstance(registration.failure, rk.ProviderError)
    assert len(trace.model_calls) == 1  # one request, not four
    assert trace.model_calls[0].error.type == "ProviderError"


async def test_provider_refusing_the_hosts_credentials_is_a_502_not_a_401():
    def unauthorized(request):
        raise rk.ProviderError("Incorrect API key provided", status=401)

    async def body(client, ctx, messages):
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=_wire(messages))
        ctx.state["out"] = caught.value

    _, error, _ = await _run(body, unauthorized)
    assert error.status_code == 502  # a 401 would tell the program its own secret is wrong
    assert "the model provider refused the host's credentials (HTTP 401)" in str(error)
    assert "Incorrect API key provided" in str(error)


async def test_identical_requests_in_parallel_are_separate_calls():
    calls, both, registrations = [], asyncio.Event(), []

    async def model(request):
        calls.append(request)
        registrations[0].activity.set()  # wakes the body below
        if len(calls) == 2:
            both.set()
        await both.wait()
        return f"sample {len(calls)}"

    async def body(client, ctx, messages):
        registration = SDKHarness.registration(ctx)
        registrations.append(registration)
        data = json.dumps({"model": "m", "messages": _wire(messages)})
        headers = {"Authorization": f"Bearer {ctx.secret}", "Content-Type": "application/json",
                   "x-stainless-retry-count": "0"}
        async with aiohttp.ClientSession() as http:
            async def post():
                async with http.post(ctx.services["openai"] + "/chat/completions", data=data, headers=headers) as r:
                    return (await r.json())["choices"][0]["message"]["content"]

            posts = asyncio.gather(post(), post())
            # Until both reached the model, or the second joined the first (the bug).
            while len(calls) < 2 and registration.joins == 0:
                registration.activity.clear()
                await registration.activity.wait()
            both.set()
            ctx.state["out"] = sorted(await posts)

    trace, answers, registration = await _run(body, model)
    assert registration.joins == 0
    assert len(calls) == 2 and answers == ["sample 2", "sample 2"]
    assert trace.num_turns == 2


async def test_L9_calls_between_segments_get_409_that_the_sdk_does_not_retry():
    async def body(client, ctx, messages):
        SDKHarness.registration(ctx).end_segment()  # as ProgramHarness does when the program yields
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=_wire(messages))
        ctx.state["out"] = caught.value

    # The SDK retries a 409 unless told not to: max_retries=3 would mean 4 requests.
    trace, error, registration = await _run(body, ["never sent"], max_retries=3)
    assert error.status_code == 409 and error.response.headers["x-should-retry"] == "false"
    assert error.code == "between_segments"
    assert "is between segments" in str(error) and "until the user's next turn" in str(error)
    assert trace.model_calls == [] and registration.calls == 0


async def test_segment_end_cancels_calls_still_running():
    called, never = asyncio.Event(), asyncio.Event()

    async def stuck(request):
        called.set()
        await never.wait()

    async def body(client, ctx, messages):
        call = asyncio.ensure_future(client.chat.completions.create(model="m", messages=_wire(messages)))
        await called.wait()
        SDKHarness.registration(ctx).end_segment()
        with pytest.raises(openai.APIStatusError) as caught:
            await call
        ctx.state["out"] = caught.value

    trace, error, registration = await _run(body, stuck)
    assert error.status_code == 409 and error.code == "between_segments"
    assert registration.failure is None  # a cancelled call is not the model's failure
    assert "cancelled before it answered" in trace.model_calls[0].error.message
    assert trace.num_turns == 0


async def test_malformed_stream_options_is_a_400_and_a_server_bug_a_json_500(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the wire translation")

    async def body(client, ctx, messages):
        first = await _post(ctx, json.dumps({"messages": _wire(messages), "stream_options": "yes"}))
        monkeypatch.setattr(interception.CHAT, "payload", broken)
        second = await _post(ctx, json.dumps({"messages": _wire(messages)}))
        ctx.state["out"] = (first, second)

    _, ((s1, b1, _), (s2, b2, retry2)), _ = await _run(body, ["fine"])
    assert s1 == 400 and "'stream_options' must be an object" in b1["error"]["message"]
    assert s2 == 500 and retry2 == "false"
    assert b2["error"]["message"] == "the interception server failed: RuntimeError: a bug in the wire translation"


def test_sdk_transport_options_in_a_body_are_dropped_and_other_fields_kept():
    parsed = interception.parse_request({
        "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "top_k": 5,
        "extra_headers": {"Authorization": "Bearer stolen"}, "extra_query": {"a": "1"},
        "extra_body": {"b": 2}, "timeout": 0.001,
    })
    assert parsed.params == {"temperature": 0, "top_k": 5}


async def test_release_cancelled_mid_stop_still_frees_the_port():
    server = await interception.acquire()
    port, entered, proceed = server.port, asyncio.Event(), asyncio.Event()
    stop = server.stop

    async def held_stop():
        entered.set()
        await proceed.wait()  # the cancellation lands here, in the middle of the stop
        await stop()

    server.stop = held_stop
    try:
        releasing = asyncio.ensure_future(interception.release(server))
        await entered.wait()
        releasing.cancel()
        proceed.set()
        with pytest.raises(asyncio.CancelledError):
            await releasing
        assert not server.running and port not in listening_ports()
        assert interception._shared[asyncio.get_running_loop()].server is None
    finally:
        await stop()  # whatever happened above, this test leaves no port


async def test_a_resent_history_is_not_built_again_and_a_rewritten_one_is():
    """A program resends its whole history every call: the server hands the
    session the message objects it built before (so a call costs no time in
    the conversation's length), and builds anew only what changed."""
    seen: list[rk.Request] = []
    replies: list[rk.AssistantMessage] = []

    def model(request):
        seen.append(request)
        replies.append(rk.AssistantMessage(content=f"reply {len(seen)}"))
        return replies[-1]

    async def body(client, ctx, messages):
        history = _wire(messages)
        for word in ("one", "two"):
            history.append({"role": "user", "content": word})
            reply = (await client.chat.completions.create(model="m", messages=history)).choices[0].message
            history.append({"role": "assistant", "content": reply.content})
        history[0] = {"role": "user", "content": "rewritten"}
        await client.chat.completions.create(model="m", messages=history)

    trace, _, _ = await _run(body, model, prompt="hi")
    first, second, third = (r.messages for r in seen)
    assert all(a is b for a, b in zip(first, second))  # the request's own messages, not copies
    assert second[2] is replies[0]  # the reply sent back is the model's own message
    # Rewritten at the start: all of it is built anew, so an identical last
    # message still means an identical history to the trace's ledger.
    assert third[0].content == "rewritten" and not any(a is b for a, b in zip(third, second))
    assert [m.content for m in trace.messages] == ["rewritten", "one", "reply 1", "two", "reply 2", "reply 3"]
    assert [t.new_input_tokens for t in trace.turns] == [4, 2, 12]  # the rewrite makes all of the third prompt new
