"""ProgramHarness with a real agent program (tests/programs/agent.py: the
openai SDK and an MCP client, no rollkit) on ScriptedModel: the lifecycle
rules hold for a program exactly as for an in-process harness.

Each launch of the agent costs a program start (~2 s here), so each test
proves one rule with one launch and asserts everything the trace shows."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import pytest

import rollkit as rk

from helpers.processes import AGENT, PROGRAMS, escaping_program, exited, gone, kill_marked, other_tasks, processes_marked

PLAIN = [sys.executable, str(PROGRAMS / "plain.py")]  # stdlib only: starts in milliseconds
ADD_THEN_ANSWER = [rk.ScriptedModel.call("add", a=2, b=3), "it is 5"]


class Adding(rk.Task):
    """2 + 3 with an add tool; the reward reads the program's answer file."""

    @rk.tool
    def add(self, a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @rk.tool
    def explode(self) -> str:
        """A tool that always fails."""
        raise RuntimeError("the tool exploded")

    async def finalize(self, ctx):
        ctx.state["answer"] = ctx.runtime.read("answer.txt") if ctx.runtime.path("answer.txt").exists() else None

    @rk.reward
    def says_five(self, ctx) -> float:
        return float("5" in (ctx.state.get("answer") or ""))


def _agent(model, *, env=None, persistent=False, limits=None, timeouts=None, stop_grace=5.0, argv=AGENT):
    harness = rk.ProgramHarness(argv, env=env, persistent=persistent, stop_grace=stop_grace)
    return rk.Agent(model=model, harness=harness, runtime=rk.SubprocessRuntime, limits=limits, timeouts=timeouts)


async def test_program_runs_its_tool_loop_over_mcp_and_resumes_on_the_whole_conversation():
    seen = []

    def model(request):
        seen.append([m.role for m in request.messages])
        return [*ADD_THEN_ANSWER, "you are welcome, it was 5"][len(seen) - 1]

    rollout = _agent(rk.ScriptedModel(model)).rollout(Adding(prompt="what is 2+3?", system_prompt="be exact"), user=True)
    assert await rollout.open()
    services = dict(rollout.ctx.services)
    assert await rollout.step() is True
    assert await rollout.step("thanks") is True
    trace = await rollout.close()
    assert trace.ok is True and trace.errors == []
    call_id = trace.messages[3].tool_call_id
    assert trace.transcript == "\n".join([
        "system: be exact", "user: what is 2+3?", 'assistant: [calls add({"a": 2, "b": 3})]',
        f"tool[{call_id}]: 5", "assistant: it is 5", "user: thanks", "assistant: you are welcome, it was 5",
    ])
    assert call_id == trace.messages[2].tool_calls[0].id
    # The relaunched program was handed the whole conversation so far.
    assert seen[-1] == ["system", "user", "assistant", "tool", "assistant", "user"]
    runs = trace.info["program_runs"]
    assert [(r["segment"], r["exit"]) for r in runs] == [(0, 0), (1, 0)] and runs[0]["pid"] != runs[1]["pid"]
    assert trace.rewards == {"says_five": 1.0}
    assert trace.metrics["tool_call_success_rate"] == 1.0
    assert services["openai"].startswith("http://127.0.0.1:") and services["openai"].endswith("/v1")
    assert services["mcp:Adding"].startswith("http://127.0.0.1:")
    assert trace.info["network"]["kept"] == list(services.values())


async def test_persistent_program_serves_every_turn_without_a_restart():
    def model(request):
        users = [m.content for m in request.messages if m.role == "user"]
        return f"turn {len(users)}: {users[-1]}"

    agent = _agent(rk.ScriptedModel(model), persistent=True)
    async with agent.interaction(Adding(prompt="first")) as it:
        assert await it.turn() == "turn 1: first"
        assert await it.turn("second") == "turn 2: second"
        assert await it.turn("third") == "turn 3: third"
    trace = it.trace
    assert trace.ok is True and trace.num_turns == 3
    assert len(trace.info["program_runs"]) == 1  # one program for three turns
    assert trace.info["program_runs"][0]["exit"] == 0  # it ended by itself when its stdin closed
    assert [s.turns_added for s in trace.segments] == [1, 1, 1]


async def test_L11_L13_L24_turn_limit_refuses_the_call_and_the_exit_is_a_clean_stop():
    rollout = _agent(rk.ScriptedModel(ADD_THEN_ANSWER), limits={"max_turns": 1}).rollout(Adding(prompt="2+3?"))
    assert await rollout.open()
    assert await rollout.step() is False
    trace = await rollout.close()
    assert trace.stop_condition == "max_turns"
    assert trace.ok is True and trace.errors == []
    assert trace.num_turns == 1
    assert trace.info["program_runs"][0]["exit"] == 1  # the SDK raised on the 410 and the program died
    assert trace.rewards == {"says_five": 0.0}  # a stopped run is still scored (L24)


class StopOnToolResult(Adding):
    @rk.stop
    def tool_answered(self, request: rk.Request) -> bool:
        return request.messages[-1].role == "tool"


async def test_L13_request_stop_ends_the_program_cleanly_before_the_model_sees_it():
    trace = await _agent(rk.ScriptedModel(ADD_THEN_ANSWER)).run(StopOnToolResult(prompt="2+3?"))
    assert trace.stop_condition == "tool_answered"
    assert trace.ok is True and trace.num_turns == 1
    assert len(trace.model_calls) == 1  # the refused call never reached the model
    assert trace.metrics["tool_call_success_rate"] == 1.0


class Shouting(Adding):
    @rk.intercept
    def shout(self, response: rk.Response) -> rk.Response | None:
        if response.message.content:
            return response.model_copy(update={"message": rk.AssistantMessage(content=response.message.content.upper())})
        return None


async def test_L19_response_intercept_rewrites_what_a_streaming_program_receives():
    trace = await _agent(rk.ScriptedModel(["it is five (5)"]), env={"AGENT_MODE": "stream"}).run(Shouting(prompt="2+3?"))
    assert trace.ok is True
    assert trace.last_reply == "IT IS FIVE (5)"
    assert [(r.hook, r.boundary, r.call) for r in trace.response_rewrites] == [("shout", "response", 0)]
    assert trace.rewards == {"says_five": 1.0}  # the program wrote what it was sent: the rewrite


class StopAfterOneTurn(Adding):
    @rk.stop
    def one_is_enough(self, trace: rk.Trace) -> bool:
        return trace.num_turns >= 1


async def test_L12_trace_stop_is_checked_before_the_programs_next_call():
    trace = await _agent(rk.ScriptedModel(ADD_THEN_ANSWER)).run(StopAfterOneTurn(prompt="2+3?"))
    assert trace.stop_condition == "one_is_enough"
    assert trace.ok is True and trace.errors == [] and trace.num_turns == 1


async def test_L10_agent_timeout_kills_the_program_and_its_model_call():
    called, never = asyncio.Event(), asyncio.Event()

    async def stuck(request):
        called.set()
        await never.wait()

    # The budget must outlast the program's start (~2 s), or no call is made.
    rollout = _agent(rk.ScriptedModel(stuck), timeouts={"agent": 6}, env={"AGENT_MODE": "spawn"}).rollout(
        Adding(prompt="2+3?"))
    assert await rollout.open()
    tasks_before = other_tasks()
    assert await rollout.step() is False
    pid = rollout.trace.info["program_runs"][0]["pid"]
    child = int(rollout.runtime.read("child.pid")) if rollout.runtime.path("child.pid").exists() else None
    trace = await rollout.close()
    assert called.is_set()  # the program did reach the model: the cancelled call is real
    assert trace.ok is False
    assert trace.error.type == "HarnessError"
    assert trace.error.message == "agent timeout: the agent used its whole 6.0s agent-time budget"
    assert "cancelled before it answered" in trace.model_calls[0].error.message
    assert gone(pid)
    assert child is None or await exited(child)
    assert other_tasks() <= tasks_before  # the stuck model call was cancelled too
    assert trace.rewards == {}  # a failed run is not scored (L23)


async def test_L31_L23_crashing_program_is_a_harness_error_with_its_stderr():
    trace = await _agent(rk.ScriptedModel(ADD_THEN_ANSWER), env={"AGENT_MODE": "crash"}).run(Adding(prompt="2+3?"))
    assert trace.ok is False
    assert trace.error.type == "HarnessError" and trace.error.phase == "agent"
    assert trace.error.message.startswith(f"program {' '.join(AGENT)!r} exited with status 1; stderr ends with:\n")
    assert "RuntimeError: the agent crashed on purpose after its first reply" in trace.error.message
    assert trace.num_turns == 1 and trace.rewards == {}


async def test_L31_model_failure_behind_the_program_keeps_its_provider_type():
    trace = await _agent(rk.ScriptedModel([])).run(Adding(prompt="2+3?"))
    assert trace.ok is False
    assert trace.error.type == "ProviderError" and trace.error.status == 400
    assert "ScriptedModel 'scripted' has no reply #1" in trace.error.message


async def test_L13_program_ignoring_the_refusal_is_killed_and_the_stop_stays_clean():
    agent = _agent(rk.ScriptedModel(ADD_THEN_ANSWER), limits={"max_turns": 1},
                   env={"AGENT_MODE": "ignore-refusal"}, stop_grace=1.0)
    rollout = agent.rollout(Adding(prompt="2+3?"))
    assert await rollout.open()
    registration = rollout.ctx.state["rollkit.program"].registration
    assert await rollout.step() is False
    trace = await rollout.close()
    assert trace.stop_condition == "max_turns" and trace.ok is True and trace.num_turns == 1
    assert registration.refusals >= 2  # it did keep calling, and every call was refused
    assert trace.info["program_runs"][0]["exit"] == -9  # killed after its grace
    assert gone(trace.info["program_runs"][0]["pid"])


# ---- bad input ----------------------------------------------------------------------
async def test_L8_missing_program_is_named_at_open():
    trace = await _agent(rk.ScriptedModel(["x"]), argv=["./no-such-agent", "--flag"]).run(Adding(prompt="hi"))
    assert trace.ok is False and trace.error.type == "HarnessError" and trace.error.phase == "setup"
    assert "ProgramHarness cannot run './no-such-agent': program './no-such-agent' does not exist" in (
        trace.error.message)


class WithScript(Adding):
    async def setup(self, ctx):
        ctx.runtime.write("agent.sh", "#!/bin/sh\nexit 0\n")  # not executable


async def test_L8_non_executable_program_is_named_at_open():
    trace = await _agent(rk.ScriptedModel(["x"]), argv=["./agent.sh"]).run(WithScript(prompt="hi"))
    assert trace.error.type == "HarnessError"
    assert "program './agent.sh' is not executable" in trace.error.message and "chmod +x" in trace.error.message


async def test_program_harness_needs_a_subprocess_runtime():
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=rk.ProgramHarness(AGENT))
    trace = await agent.run(Adding(prompt="hi"))
    assert trace.error.type == "HarnessError"
    assert "ProgramHarness runs programs, which LocalRuntime cannot; give the agent runtime=rk.SubprocessRuntime" in (
        trace.error.message)


async def test_L14_program_that_never_calls_the_model_ends_the_exchange():
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    rollout = _agent(rk.ScriptedModel(["x"]), argv=silent).rollout(Adding(prompt="hi"), user=True)
    assert await rollout.open()
    assert await rollout.step() is False
    assert rollout.state == "ended"
    trace = await rollout.close()
    assert trace.num_turns == 0 and trace.segments[0].turns_added == 0
    assert trace.info["program_runs"][0]["exit"] == 0


def test_argv_must_be_a_program():
    with pytest.raises(TypeError, match="ProgramHarness needs argv, a non-empty list of strings, got \\[\\]"):
        rk.ProgramHarness([])
    assert rk.ProgramHarness("python agent.py --fast").argv == ["python", "agent.py", "--fast"]


# ---- the MCP tool server, with an in-process MCP client (no program start) ------
async def test_tool_server_serves_the_tools_with_errors_as_results_and_checks_the_secret():
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from rollkit.programs.mcp_tools import ToolServer

    rollout = rk.Agent(model=rk.ScriptedModel(["x"])).rollout(Adding(prompt="hi"))
    server = ToolServer(rollout.ctx)
    urls = await server.start()
    try:
        url = urls["Adding"]
        host, port = server._sock.getsockname()
        assert host == "127.0.0.1"  # the socket itself is bound to loopback, not only the URL says so
        assert url == f"http://127.0.0.1:{port}/mcp/Adding/"
        auth = {"Authorization": f"Bearer {rollout.ctx.secret}"}
        async with httpx2.AsyncClient(headers=auth) as http, Client(streamable_http_client(url, http_client=http)) as mcp:
            tools = {t.name: t.input_schema for t in (await mcp.list_tools()).tools}
            results = [await mcp.call_tool("add", {"a": 2, "b": 3}), await mcp.call_tool("explode", {}),
                       await mcp.call_tool("add", {"a": "two"}), await mcp.call_tool("nope", {})]
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer wrong"}) as http:
            refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    finally:
        await server.stop()
        await rollout.abort()
    assert set(tools) == {"add", "explode"}
    assert tools["add"]["required"] == ["a", "b"]
    assert [(r.content[0].text, r.is_error) for r in results] == [
        ("5", False),
        ("error: tool 'explode' raised RuntimeError: the tool exploded", True),
        ("error: invalid arguments for tool 'add': a: Input should be a valid integer, unable to parse string "
         "as an integer; b: Field required", True),
        ("error: there is no tool named 'nope'; available tools: add, explode", True),
    ]
    assert (rollout.ctx.tool_calls, rollout.ctx.tool_failures) == (4, 3)
    assert refused.status_code == 401 and "missing or wrong bearer token" in refused.json()["error"]


class Recording(Adding):
    async def finalize(self, ctx):
        ctx.state["seen"] = json.loads(ctx.runtime.read("seen.json"))


async def test_program_contract_environment_and_stdin(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "the-host-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://host.example/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "another-host-secret")
    monkeypatch.setenv("GEMINI_API_KEY", "host-gemini-key")
    script = ("import json, os, sys; json.dump({'env': dict(os.environ), 'stdin': sys.stdin.read()}, "
              "open('seen.json', 'w'))")
    agent = _agent(rk.ScriptedModel(["x"]), argv=[sys.executable, "-c", script], env={"EXTRA": "1"})
    rollout = agent.rollout(Recording(prompt="2+3?", system_prompt="be exact"))
    assert await rollout.open()
    registration = rollout.ctx.state["rollkit.program"].registration
    assert registration.active is False  # no model calls before the first segment
    services = dict(rollout.ctx.services)
    secret = rollout.ctx.secret
    await rollout.step()
    assert registration.active is False  # nor after it ended (L9)
    await rollout.close()
    seen = rollout.ctx.state["seen"]
    env = seen["env"]
    assert env["OPENAI_API_KEY"] == secret != "the-host-key"
    # The host's Anthropic key never reaches the program: the rollout's secret does.
    assert env["ANTHROPIC_API_KEY"] == secret and "another-host-secret" not in json.dumps(seen)
    assert env["OPENAI_BASE_URL"] == services["openai"] and env["ANTHROPIC_BASE_URL"] == services["anthropic"]
    # Google's clients: Gemini CLI and the google-genai SDKs read these; the host's Gemini key stays out.
    assert (env["GOOGLE_GEMINI_BASE_URL"], env["GEMINI_API_KEY"], env["GOOGLE_API_KEY"]) == (services["gemini"], secret, secret)
    assert env["GOOGLE_GENAI_USE_VERTEXAI"] == "false" and "host-gemini-key" not in json.dumps(seen)
    assert json.loads(env["ROLLKIT_MCP_SERVERS"]) == {"Recording": services["mcp:Recording"]}
    assert (env["ROLLKIT_MODEL"], env["ROLLKIT_ROLLOUT_ID"], env["EXTRA"]) == ("scripted", rollout.id, "1")
    assert "ROLLKIT_PERSISTENT" not in env
    assert seen["stdin"] == '{"messages": [{"role": "system", "content": "be exact"}, {"role": "user", "content": "2+3?"}]}\n'


async def test_L32_a_crashing_program_does_not_touch_its_sibling_on_the_same_server():
    crashing = _agent(rk.ScriptedModel(ADD_THEN_ANSWER), env={"AGENT_MODE": "crash"})
    healthy = _agent(rk.ScriptedModel(ADD_THEN_ANSWER))
    bad, good = await asyncio.gather(crashing.run(Adding(prompt="2+3?")), healthy.run(Adding(prompt="2+3?")))
    assert bad.ok is False and bad.error.type == "HarnessError"
    assert good.ok is True and good.errors == [] and good.rewards == {"says_five": 1.0}
    assert good.last_reply == "it is 5"


async def test_program_whose_grandchild_escapes_its_group_still_ends_its_segment():
    """`setsid cmd &` then exit 0: the grandchild holds the program's pipes
    and escapes the group kill (documented), yet the segment ends with the
    program's exit and the rollout is ok. The test kills the grandchild."""
    marker = f"rollkit-escapee-{uuid.uuid4().hex}"
    rollout = _agent(rk.ScriptedModel(["x"]), argv=escaping_program(marker)).rollout(Adding(prompt="hi"))
    try:
        async with asyncio.timeout(30):  # a guard against a hang, not a timing assertion
            assert await rollout.open()
            assert await rollout.step() is False  # it never called the model (L14)
            trace = await rollout.close()
        escaped = processes_marked(marker)
    finally:
        killed = await kill_marked(marker)
        await rollout.abort()
    assert trace.ok is True and trace.errors == []
    assert [r["exit"] for r in trace.info["program_runs"]] == [0]
    assert len(escaped) == 1 and killed == escaped  # it did escape: the case is real


def _failing(request):
    raise rk.ProviderError("the provider is down", status=503)


async def test_L31_model_failure_is_the_rollouts_even_when_the_program_swallows_it_and_exits_0():
    agent = _agent(rk.ScriptedModel(_failing), argv=[*PLAIN, "swallow-error"])
    trace = await agent.run(rk.Task(prompt="hi"))
    assert [r["exit"] for r in trace.info["program_runs"]] == [0]  # the program caught the 503
    assert trace.ok is False
    assert trace.error.type == "ProviderError" and trace.error.status == 503 and trace.error.phase == "agent"
    assert "the provider is down" in trace.error.message


async def test_persistent_program_crashing_between_turns_is_a_harness_error_at_the_next_step():
    agent = _agent(rk.ScriptedModel(["first answer", "never sent"]), argv=[*PLAIN, "crash-between-turns"],
                   persistent=True)
    rollout = agent.rollout(rk.Task(prompt="hi"), user=True)
    try:
        assert await rollout.open()
        fifo = rollout.runtime.path("crash.fifo")
        os.mkfifo(fifo)
        assert await rollout.step() is True  # it answered and yielded
        run = rollout.ctx.state["rollkit.program"]
        await asyncio.to_thread(fifo.write_text, "go")  # returns once the program opened it: it now exits
        assert await run.exit == 3
        assert await rollout.step("again") is False
        trace = await rollout.close()
    finally:
        await rollout.abort()  # a no-op after close; frees the program if an assertion failed
    assert trace.ok is False and trace.error.type == "HarnessError" and trace.error.phase == "agent"
    assert trace.error.message.startswith(f"program {' '.join(PLAIN + ['crash-between-turns'])!r} exited with "
                                          "status 3 between turns, before the user's next message reached it")
    assert "the program crashed between turns on purpose" in trace.error.message
    assert len(trace.info["program_runs"]) == 1  # not silently relaunched
    assert trace.num_turns == 1


async def test_tool_server_secret_check_covers_every_scope_and_any_scheme_case():
    from rollkit.programs.guard import ConnectionGuard
    from rollkit.programs.mcp_tools import _RequireSecret

    secret = "s" * 32
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    async def send(message):
        sent.append(message)

    guard = _RequireSecret(app, secret, ConnectionGuard())

    def http(header):
        return {"type": "http", "headers": [(b"authorization", header.encode())] if header else []}

    for scope in (http(f"bearer {secret}"), http(f"BEARER {secret}"), {"type": "lifespan"}):
        await guard(scope, None, send)
    assert reached == ["http", "http", "lifespan"] and sent == []
    for scope in (http("Bearer wrong"), http(f"Basic {secret}"), http(""),
                  {"type": "websocket", "headers": [(b"authorization", f"Bearer {secret}".encode())]},
                  {"type": "webtransport", "headers": []}):
        await guard(scope, None, send)
    assert reached == ["http", "http", "lifespan"]  # nothing else got through
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [401, 401, 401]
    assert {"type": "websocket.close", "code": 1008} in sent
