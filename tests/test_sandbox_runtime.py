"""SandboxRuntime: the working folder a task fills and reads, the clean
environment with the rollout's secret, the enforced network policy on the
trace, limits reported on the trace, kills of the whole sandbox, a clear
refusal where bubblewrap cannot run, and real agent programs (mini-swe-agent,
Codex CLI or Claude Code) running in it unchanged. The escape corpus is
tests/test_sandbox_escapes.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.examples import answer_file_tasks, toy_shell_model
from rollkit.programs import harnesses
from rollkit.programs.sandbox_runtime import SandboxRuntime, sandbox_unavailable

from helpers.processes import exited, processes_marked

_WHY = sandbox_unavailable("bwrap")
needs_bwrap = pytest.mark.skipif(_WHY is not None, reason=f"no sandboxes here: {_WHY}")
NPM = Path(os.environ.get("ROLLKIT_NPM_PREFIX", Path.home() / ".cache" / "rollkit" / "npm"))


async def test_missing_bubblewrap_fails_at_start_saying_what_to_install():
    runtime = SandboxRuntime(bwrap="/nonexistent/bwrap")
    with pytest.raises(rk.SandboxError) as caught:
        await runtime.start()
    await runtime.stop()
    assert str(caught.value) == (
        "SandboxRuntime cannot start: bubblewrap ('/nonexistent/bwrap') was not found: install it "
        "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)")


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="processes"):
        SandboxRuntime(processes=0)
    with pytest.raises(TypeError, match=r"ro_paths is a list of paths, e.g. ro_paths=\['/opt/tool'\]"):
        SandboxRuntime(ro_paths="/opt/tool")


class Recording(rk.Task):
    """The task's setup fills the folder; finalize reads what the program left."""

    async def setup(self, ctx):
        ctx.runtime.write("given.txt", "from setup")

    async def finalize(self, ctx):
        ctx.state["seen"] = json.loads(ctx.runtime.read("seen.json"))

    @rk.reward
    def read_the_setup_file(self, ctx) -> float:
        return float(ctx.state["seen"]["given"] == "from setup")


SEE = ("import json, os, sys, urllib.request as u\n"
       "def status(key):\n"
       "    r = u.Request(os.environ['OPENAI_BASE_URL'] + '/models', headers={'Authorization': 'Bearer ' + key})\n"
       "    try:\n"
       "        return u.urlopen(r, timeout=10).status\n"
       "    except u.HTTPError as e:\n"
       "        return e.code\n"
       "json.dump({'env': dict(os.environ), 'given': open('given.txt').read(), 'uid': os.getuid(),\n"
       "           'right': status(os.environ['OPENAI_API_KEY']), 'wrong': status('not-the-secret'),\n"
       "           'home': sorted(os.listdir('/root'))}, open('seen.json', 'w'))\n")


@needs_bwrap
@pytest.mark.parametrize("compiled_init", [True, False], ids=["C init", "Python init"])
async def test_program_gets_the_folder_a_clean_environment_and_the_rollouts_secret(monkeypatch, compiled_init):
    monkeypatch.setenv("OPENAI_API_KEY", "the-host-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "another-host-secret")
    policy = rk.NetworkPolicy(allow=["api.rollkit.test"], block=["10.0.0.0/8"])
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=rk.ProgramHarness([sys.executable, "-c", SEE]),
                     runtime=lambda: SandboxRuntime(compiled_init=compiled_init), network=policy)
    rollout = agent.rollout(Recording(prompt="look"))
    assert await rollout.open()
    secret = rollout.ctx.secret
    await rollout.step()
    await rollout.close()
    trace = rollout.trace
    seen = rollout.ctx.state["seen"]
    assert trace.reward == 1.0, trace.errors
    assert seen["env"]["OPENAI_API_KEY"] == secret and "host-key" not in json.dumps(seen)
    assert "another-host-secret" not in json.dumps(seen)
    assert (seen["right"], seen["wrong"]) == (200, 401)  # the bridged server still checks the secret
    assert seen["uid"] == 1000 and seen["home"] == [".pyenv"] if sys.prefix.startswith("/root/") else True
    network = trace.info["network"]
    assert (network["enforced"], network["runtime"], network["allow"], network["block"]) == (
        True, "sandbox", ["api.rollkit.test"], ["10.0.0.0/8"])
    assert network["kept"] == list(rollout.ctx.services.values())
    assert rollout.runtime._init[0] == ("/run/rollkit-init" if compiled_init else sys.executable)


async def test_subprocess_runtime_still_refuses_a_restricting_policy():
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=rk.ProgramHarness([sys.executable, "-c", "pass"]),
                     runtime=rk.SubprocessRuntime, network=rk.NetworkPolicy(allow=["api.rollkit.test"]))
    trace = await agent.run(Recording(prompt="look"))
    assert "SubprocessRuntime cannot enforce a network policy" in str(trace.errors)


_PY = "exec python3 -c "


@needs_bwrap
@pytest.mark.parametrize("limits, program, named", [
    ({"file_bytes": 1 << 20}, "exec head -c 4194304 /dev/zero > big.bin", "file_bytes (SIGXFSZ)"),
    ({"processes": 32}, "for i in $(seq 100); do sleep 30 & done; exit 0", "processes limit (32) refused"),
    ({"cpu_seconds": 1}, _PY + "'while True: pass'", "cpu_seconds (SIGXCPU)"),
    # SIGXCPU ignored: the SIGKILL a second later, named from the CPU time used.
    ({"cpu_seconds": 1}, _PY + "'import signal; signal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass'",
     "used up the sandbox's cpu_seconds limit (1 s of CPU; it was killed by SIGKILL)"),
    ({"open_files": 64}, _PY + "'files = [open(\"f\", \"w\") for _ in range(100)]'",
     "open_files limit (64) was likely hit: the program printed '[Errno 24]'"),
    ({"memory_bytes": 256 << 20}, _PY + "'block = bytearray(512 << 20)'",
     "memory_bytes limit (268435456) was likely hit: the program printed 'MemoryError'"),
    ({"tmp_bytes": 1 << 20}, "head -c 4194304 /dev/zero > /tmp/big; exit 0",
     "/tmp was full when the program exited: the sandbox's tmp_bytes limit (1048576)"),
])
async def test_a_limit_hit_is_a_warning_on_the_trace(limits, program, named):
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=rk.ProgramHarness(["sh", "-c", program]),
                     runtime=lambda: SandboxRuntime(**limits))
    trace = await agent.run(rk.Task(prompt="go"))
    assert any(named in w for w in trace.warnings), (trace.warnings, trace.errors)
    assert any(named in run.get("limit", "") for run in trace.info["program_runs"])
    if trace.errors:  # a program that failed on the limit: its error names the limit too
        assert named in trace.error.message


@needs_bwrap
async def test_a_program_within_its_limits_gets_no_limit_warning():
    harness = rk.ProgramHarness(["sh", "-c", "head -c 1000 /dev/zero > /tmp/f"])
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=harness,
                     runtime=lambda: SandboxRuntime(tmp_bytes=1 << 20, cpu_seconds=5, open_files=64))
    trace = await agent.run(rk.Task(prompt="go"))
    assert trace.ok and trace.warnings == [] and "limit" not in trace.info["program_runs"][0], trace.warnings


def _sleeper(marker: str, says: str) -> str:
    """A Python that says `says` (to the file `started`, or to stdout) and sleeps, `marker` in its argv."""
    code = f"open('started', 'w').write('{says}')" if says == "file" else f"print('{says}', flush=True)"
    return f"{sys.executable} -c \"{code}; import time; time.sleep(600)\" {marker}"


@needs_bwrap
async def test_agent_timeout_kills_the_whole_sandbox():
    marker = f"hang-{uuid.uuid4().hex}"
    runtime = SandboxRuntime()  # lent to the rollout, so the test can look into its folder after
    await runtime.start()
    try:
        agent = rk.Agent(model=rk.ScriptedModel(["x"]), runtime=runtime, timeouts={"agent": 3},
                         harness=rk.ProgramHarness(["sh", "-c", f"(setsid {_sleeper(marker, 'file')} &); sleep 600"]))
        trace = await agent.run(rk.Task(prompt="go"))
        assert trace.error.message == "agent timeout: the agent used its whole 3.0s agent-time budget"
        assert runtime.read("started") == "file"  # the setsid daemon did run
        assert processes_marked(marker) == [] and runtime.programs == []
    finally:
        await runtime.stop()


@needs_bwrap
async def test_stop_kills_a_running_program_and_everything_it_started():
    runtime = SandboxRuntime()
    await runtime.start()
    marker = f"daemon-{uuid.uuid4().hex}"
    program = await runtime.launch(["sh", "-c", f"(setsid {_sleeper(marker, 'up')} &); sleep 600"])
    assert await program.process.stdout.readline() == b"up\n"
    pids = processes_marked(marker)
    cgroup = program._cgroup  # a pids cgroup, where this machine lets rollkit make one
    await runtime.stop()
    assert len(pids) == 1 and await exited(pids[0]) and not program.running
    assert cgroup is None or not cgroup.exists()  # killed, its cgroup is removed too


@needs_bwrap
@pytest.mark.slow
async def test_mini_swe_agent_runs_in_the_sandbox():
    agent = rk.Agent(model=toy_shell_model(), harness=harnesses.mini_swe_agent(), runtime=rk.SandboxRuntime,
                     timeouts={"agent": 180}, network=rk.NetworkPolicy(allow=["api.rollkit.test"]))
    traces = [await agent.run(task) for task in answer_file_tasks(2)]
    assert [t.reward for t in traces] == [1.0, 1.0], [t.errors for t in traces]
    assert all(t.info["network"]["enforced"] for t in traces)


def _cli(name: str) -> Path:
    path = NPM / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.skip(f"{name} is not installed at {path}: scripts/test.sh installs it from the npm registry")
    return path


@needs_bwrap
@pytest.mark.slow
async def test_codex_cli_runs_in_the_sandbox():
    agent = rk.Agent(model=toy_shell_model(), harness=harnesses.codex(executable=_cli("codex")),
                     runtime=lambda: SandboxRuntime(ro_paths=[NPM]), timeouts={"agent": 180})
    trace = await agent.run(answer_file_tasks(1)[0])
    assert trace.reward == 1.0, trace.errors
    assert {c.dialect for c in trace.model_calls} == {"responses"}


@needs_bwrap
@pytest.mark.slow
async def test_claude_code_runs_in_the_sandbox():
    agent = rk.Agent(model=toy_shell_model(), harness=harnesses.claude_code(executable=_cli("claude")),
                     runtime=lambda: SandboxRuntime(ro_paths=[NPM]), timeouts={"agent": 180},
                     network=rk.NetworkPolicy(allow=["api.rollkit.test"]))
    trace = await agent.run(answer_file_tasks(1)[0])
    assert trace.reward == 1.0, trace.errors
    assert {c.dialect for c in trace.model_calls} == {"anthropic"}
    assert [c.name for m in trace.messages if m.role == "assistant" for c in m.tool_calls] == ["Bash"]
    assert trace.info["network"]["enforced"] and trace.info["network"]["runtime"] == "sandbox"


_INTERPRETERS = [sys.executable, *(p for p in ("/usr/bin/python3",) if Path(p).exists()
                                   and Path(p).resolve() != Path(sys.executable).resolve())]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("base", _INTERPRETERS)
async def test_a_venvs_python_runs_in_the_sandbox_through_its_symlink_chain(base, tmp_path):
    """A venv (made in the test's own private temporary folder) whose python
    links to `base`: run by its path inside the sandbox, it is that venv
    (its sys.prefix, a module of its site-packages) over the base's
    standard library. Before: exit 127, the venv's path did not exist inside."""
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    [site] = venv.glob("lib/python3*/site-packages")
    (site / "only_in_this_venv.py").write_text("WHERE = 'the venv'\n")
    python = venv / "bin" / "python"
    assert python.is_symlink()
    # A second hop: a link to the venv's python elsewhere in the private folder.
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "py").symlink_to(python)
    probe = ("import json, sys, importlib.util as u; "
             "print(json.dumps([sys.prefix, sys.base_prefix, u.find_spec('only_in_this_venv') is not None]))")
    paths = (python, tmp_path / "links" / "py")
    outside = [subprocess.run([str(p), "-c", probe], capture_output=True, text=True, timeout=60) for p in paths]
    runtime = SandboxRuntime()
    await runtime.start()
    try:
        inside = [await runtime.run([str(path), "-c", probe], timeout=60) for path in paths]
    finally:
        await runtime.stop()
    assert [done.returncode for done in inside] == [0, 0], [done.stderr for done in inside]
    assert json.loads(inside[0].stdout) == [str(venv), str(Path(base).resolve().parent.parent), True]
    # Each runs inside as it does outside (CPython finds a venv by the path it was started as).
    assert [done.stdout for done in inside] == [done.stdout for done in outside]
