"""OpenAIModel against a fake provider speaking the real chat-completions
protocol over real HTTP (tests/helpers/fake_provider.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest

import rollkit as rk
from rollkit.core.models import resolve_model
from rollkit.programs.openai_model import ContextLengthExceeded, OpenAIModel, close_pools

from helpers.fake_provider import FakeProvider


@pytest.fixture
async def provider():
    fake = await FakeProvider().start()
    yield fake
    await close_pools()
    await fake.stop()


def _request(text: str = "hello", **params) -> rk.Request:
    return rk.Request(messages=[rk.SystemMessage(content="be brief"), rk.UserMessage(content=text)], params=params)


async def test_completion_maps_text_usage_and_sends_params(provider):
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k1", params={"temperature": 0.5})
    response = await model.complete(_request("hello there", max_tokens=7))
    assert response.message.content == "echo: hello there"
    assert response.usage.input_tokens == 4  # "be brief" + "hello there"
    assert response.usage.output_tokens == 3
    assert response.finish_reason == "stop"
    assert response.model == "fake-1"
    sent = provider.requests[0]
    assert sent["model"] == "fake-1"
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 7
    assert sent["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    assert provider.headers[0]["Authorization"] == "Bearer k1"


async def test_reasoning_and_cached_tokens_are_kept_and_unreported_usage_stays_none(provider):
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k")
    thought = await model.complete(_request("think it over"))
    assert thought.message.content == "echo: think it over"
    assert thought.message.reasoning == "the user wants an echo"
    assert (thought.usage.input_tokens, thought.usage.cache_read_tokens, thought.usage.cache_write_tokens) == (5, 4, None)
    assert (thought.usage.output_tokens, thought.usage.reasoning_tokens) == (3, 2)
    plain = await model.complete(_request("hello"))
    assert plain.message.reasoning is None and plain.usage.cache_read_tokens is None
    assert plain.usage.reasoning_tokens is None
    quiet = await model.complete(_request("quiet please"))
    assert (quiet.usage.input_tokens, quiet.usage.output_tokens, quiet.usage.total_tokens) == (None, None, None)
    # Through a rollout: the reply with its reasoning is on the trace, and
    # the frames show the unreported call's tokens as missing, not 0.
    trace = await rk.Agent(model=model).run(rk.Task(prompt="quiet please"))
    [call] = trace.model_calls
    assert call.reply.content == "echo: quiet please" and call.usage.input_tokens is None
    row = rk.frames.rollouts([trace]).iloc[0]
    assert row["input_tokens"] is rk.frames.pd.NA and row["total_tokens"] is rk.frames.pd.NA
    turn = rk.frames.turns([trace]).iloc[0]
    assert turn["input_tokens"] is rk.frames.pd.NA and turn["output_tokens"] is rk.frames.pd.NA
    thinking = await rk.Agent(model=model).run(rk.Task(prompt="think twice"))
    calls = rk.frames.calls([thinking])
    assert list(calls["reasoning"]) == ["the user wants an echo"] and list(calls["cache_read_tokens"]) == [1]
    assert list(calls["input_tokens"]) == [2] and list(calls["reply"]) == ["echo: think twice"]


async def test_tool_calls_round_trip(provider):
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k")
    spec = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    request = rk.Request(messages=[rk.UserMessage(content="call add")], tools=[spec])
    response = await model.complete(request)
    assert response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.args()) for c in response.message.tool_calls] == [("call_1", "add", {"x": 1})]
    assert provider.requests[0]["tools"] == [spec]
    # The assistant's tool call and the tool result go back in the SDK's shape.
    follow = rk.Request(messages=[
        *request.messages, response.message, rk.ToolMessage(tool_call_id="call_1", content="2", name="add"),
    ])
    await model.complete(follow)
    assert provider.requests[1]["messages"][1:] == [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "2", "name": "add"},
    ]


async def test_rollout_records_provider_usage(provider):
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k")
    trace = await rk.Agent(model=model).run(rk.Task(prompt="count these four words"))
    assert trace.ok is True
    assert trace.last_reply == "echo: count these four words"
    assert (trace.num_turns, trace.num_input_tokens, trace.num_output_tokens) == (1, 4, 3)
    assert trace.agent["base_url"] == provider.url


async def test_rate_limit_retried_by_the_sdk_then_answered(provider):
    provider.queue("429")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k", max_retries=1)
    response = await model.complete(_request("again"))
    assert response.message.content == "echo: again"
    assert len(provider.requests) == 2


@pytest.mark.parametrize("status", [429, 500])
async def test_error_status_becomes_provider_error_with_status(provider, status):
    provider.queue(str(status), str(status))
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k", max_retries=1)
    with pytest.raises(rk.ProviderError) as caught:
        await model.complete(_request())
    assert caught.value.status == status
    assert f"answered HTTP {status}" in str(caught.value)
    assert provider.url in str(caught.value)
    assert len(provider.requests) == 2  # one call and one SDK retry


async def test_context_length_is_a_clean_stop_of_the_rollout(provider):
    provider.queue("ok", "context_length")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k")
    rollout = rk.Agent(model=model).rollout(rk.Task(prompt="first"), user=True)
    assert await rollout.open()
    assert await rollout.step() is True
    assert await rollout.step("second") is False
    trace = await rollout.close()
    assert trace.stop_condition == "context_length"
    assert trace.errors == [] and trace.ok is True
    assert trace.num_turns == 1
    assert trace.model_calls[1].error.type == "ContextLengthExceeded"
    assert trace.model_calls[1].error.status == 400


async def test_context_length_raises_typed_error(provider):
    provider.queue("context_length")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k")
    with pytest.raises(ContextLengthExceeded) as caught:
        await model.complete(_request())
    assert caught.value.stop_condition == "context_length"
    assert "longer than the context window" in str(caught.value)


async def test_malformed_json_is_a_502(provider):
    provider.queue("malformed")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k", max_retries=0)
    with pytest.raises(rk.ProviderError) as caught:
        await model.complete(_request())
    assert caught.value.status == 502
    assert "not a chat completion" in str(caught.value)


async def test_dropped_connection_is_a_503(provider):
    provider.queue("drop")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k", max_retries=0)
    with pytest.raises(rk.ProviderError) as caught:
        await model.complete(_request())
    assert caught.value.status == 503
    assert f"cannot reach the model endpoint {provider.url}" in str(caught.value)


async def test_slow_provider_is_a_504(provider):
    provider.queue("slow")
    model = OpenAIModel("fake-1", base_url=provider.url, api_key="k", max_retries=0, timeout=0.3)
    with pytest.raises(rk.ProviderError) as caught:
        await model.complete(_request())
    assert caught.value.status == 504
    assert "did not answer within 0.3s" in str(caught.value)
    assert provider.slow_started.is_set()


async def test_endpoint_down_is_a_503_naming_the_url():
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    model = OpenAIModel("fake-1", base_url=url, api_key="k", max_retries=0)
    trace = await rk.Agent(model=model).run(rk.Task(prompt="hi"))
    await close_pools()
    assert trace.ok is False
    assert trace.error.type == "ProviderError" and trace.error.status == 503
    assert f"cannot reach the model endpoint {url}" in trace.error.message


async def test_clients_are_pooled_per_endpoint(provider):
    a = OpenAIModel("m1", base_url=provider.url, api_key="k")
    b = OpenAIModel("m2", base_url=provider.url, api_key="k")
    c = OpenAIModel("m1", base_url=provider.url + "/", api_key="other")
    shared, other = a._client(), c._client()
    assert b._client() is shared and other is not shared
    await a.aclose()
    assert shared.is_closed() and not other.is_closed()  # only this endpoint's client
    fresh = a._client()
    assert fresh is not shared and b._client() is fresh and not fresh.is_closed()
    assert (await b.complete(_request("after aclose"))).message.content == "echo: after aclose"


def test_pooled_clients_close_when_their_loop_shuts_down():
    async def main():
        fake = await FakeProvider().start()
        try:
            model = OpenAIModel("m1", base_url=fake.url, api_key="k")
            await model.complete(_request())
            return model._client()
        finally:
            await fake.stop()

    client = asyncio.run(main())  # no aclose(): the loop's end closes its pool
    assert client.is_closed()


async def test_request_fields_go_in_the_body_and_transport_options_only_from_the_host(provider):
    model = OpenAIModel("m1", base_url=provider.url, api_key="k",
                        params={"top_k": 40, "extra_headers": {"X-Host": "yes"}})
    request = _request(
        "hi", repetition_penalty=1.1, temperature=0.2,
        extra_headers={"Authorization": "Bearer stolen", "OpenAI-Organization": "theirs"},
        extra_query={"q": "1"}, extra_body={"injected": True}, timeout=0.001,
    )
    response = await model.complete(request)  # vLLM fields raised TypeError as keywords; a 0.001s timeout a 504
    assert response.message.content == "echo: hi"
    sent, headers = provider.requests[0], provider.headers[0]
    assert (sent["top_k"], sent["repetition_penalty"], sent["temperature"]) == (40, 1.1, 0.2)
    assert "injected" not in sent and provider.queries[0] == {}
    assert headers["Authorization"] == "Bearer k" and not {"openai-organization", "OpenAI-Organization"} & set(headers)
    # Header names are case-insensitive: openai 2.x sends "X-Host", 3.x "x-host".
    assert {k.lower(): v for k, v in headers.items()}["x-host"] == "yes"  # the host's own options are honoured


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="has no API key: pass api_key=... or set OPENAI_API_KEY"):
        OpenAIModel("gpt-x", base_url="http://127.0.0.1:1/v1")


def test_resolve_openai_name_reads_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    model = resolve_model("openai/some-model")
    assert isinstance(model, OpenAIModel)
    assert (model.model, model.base_url, model._api_key) == ("some-model", "http://127.0.0.1:9/v1", "env-key")
