"""`SubprocessRuntime`: programs run as local subprocesses in a private folder.

What it owns: a fresh temporary working folder per runtime (so per rollout
when the rollout owns it), launching programs there with a clean
environment, reading and writing files in the folder, and killing every
program it started, each with its whole process group, so no orphan outlives
a close, an abort, a timeout or a cancellation. Owned and borrowed lifetimes
follow L3 through the `Runtime` base.

What it enforces, exactly:
- environment: programs get only PATH, LANG, LC_ALL, LC_CTYPE, TZ and TERM
  from the host, HOME and TMPDIR pointing into the working folder, the
  variables named in `pass_env`, and those given in `env`. Nothing else of the
  host (API keys included) reaches a program unless listed.
- processes: each program starts a new session (its own process group); when
  it exits, is killed or times out, the whole group is killed. Guaranteed:
  every process that stays in that group dies with it (children, shells,
  `cmd &` jobs). Not guaranteed: a descendant that leaves the group itself
  (`setsid`, a daemon's double fork) escapes the kill and may outlive the
  rollout; no rollout waits for it either: once the program exited and its
  group was killed, its remaining output is drained for at most
  `drain_grace` seconds, then its pipes are closed (an escaped descendant
  keeps them open forever, and asyncio's wait() would wait for them).
- files: `read` and `write` stay inside the working folder. Programs
  themselves run as the same user as rollkit and are not confined to it.
- network: nothing. Programs share the host's network, so any allow or block
  list is refused at open with a `SandboxError` rather than pretended.
- a killed host: while a runtime is alive, rollkit's watchdog
  (rollkit.programs.watchdog) knows its folder and its programs' groups; if
  this process dies without cleaning up (SIGKILL, a crash), the watchdog
  kills those groups and removes the folder. `kill_all_programs()` kills
  every program of every runtime of this process at once (a second Ctrl-C).

It must not know about rollouts, models or the interception server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.checks import seconds
from ..core.errors import SandboxError
from ..core.runtime import NetworkPolicy, Runtime
from . import watchdog

__all__ = ["SubprocessRuntime", "Program", "Completed", "clean_environment", "kill_all_programs"]

# Harmless host variables a program usually needs to run at all.
_HOST_VARS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")

_alive: weakref.WeakSet[SubprocessRuntime] = weakref.WeakSet()


def kill_all_programs() -> int:
    """SIGKILL the process group of every program of every runtime alive in
    this process, now (the orderly stops that follow then find them dead);
    returns how many. Safe to call from a signal handler's callback."""
    killed = 0
    for runtime in list(_alive):
        for program in list(runtime._programs):
            if program.running:
                program._signal(signal.SIGKILL)
                killed += 1
    return killed


def clean_environment(home: Path, *, pass_env: Iterable[str] = (), env: Mapping[str, str] | None = None
                      ) -> dict[str, str]:
    """The clean environment of a program whose folder is `home` (see the
    module docstring): the harmless host variables, HOME there and TMPDIR in
    its `.tmp` (made here), the host variables `pass_env` names, then `env`.
    Nothing else of the host, API keys included. Other runners of programs
    (an inspect task's local sandbox) use it so they pass what this does."""
    tmp = home / ".tmp"
    tmp.mkdir(exist_ok=True)
    out = {k: os.environ[k] for k in _HOST_VARS if k in os.environ}
    out.update(HOME=str(home), TMPDIR=str(tmp))
    out.update({k: os.environ[k] for k in pass_env if k in os.environ})
    out.update({str(k): str(v) for k, v in (env or {}).items()})
    return out


async def _feed(stdin: asyncio.StreamWriter | None, data: str | bytes) -> None:
    """`data` written to a program's input, which is then closed."""
    assert stdin is not None
    stdin.write(data.encode() if isinstance(data, str) else data)
    try:
        await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the program did not read all of it; its exit status says the rest


@dataclass(frozen=True)
class Completed:
    """A finished `run`: exit status and what the program printed."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class _OutputWatch(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol for a program's pipes, plus two futures:
    `output_closed`, done once its stdout and stderr pipes closed (both ends
    read to their end), and `exited`, done once asyncio knows its exit status
    (its child watcher reported it), whatever its pipes."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.output_closed: asyncio.Future[None] = loop.create_future()
        self.exited: asyncio.Future[None] = loop.create_future()
        self._open_output: set[int] = set()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._open_output = {fd for fd in (1, 2) if transport.get_pipe_transport(fd) is not None}
        self._output_maybe_closed()

    def pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        super().pipe_connection_lost(fd, exc)
        self._open_output.discard(fd)
        self._output_maybe_closed()

    def _output_maybe_closed(self) -> None:
        if not self._open_output and not self.output_closed.done():
            self.output_closed.set_result(None)


class Program:
    """A running program: the asyncio process plus its process group."""

    def __init__(self, process: asyncio.subprocess.Process, argv: Sequence[str], runtime: SubprocessRuntime) -> None:
        self.process = process
        self.argv = tuple(argv)
        self.pid = process.pid
        self._runtime = runtime
        self._pipes: _OutputWatch = process._protocol  # type: ignore[attr-defined]

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def wait(self) -> int:
        """Wait for the program to exit; then kill what it left behind in its group."""
        await self._exited()
        self._sweep()
        return await self._reap()

    async def _reap(self) -> int:
        """The exit status of a program that exited or was SIGKILLed.

        With its group dead the program's output pipes close at once, unless a
        descendant left the group (setsid) and still holds them: then what is
        in the pipes gets `drain_grace` seconds to be read, and the pipes are
        closed. Input it never read is dropped. asyncio's wait() is not
        asked: it awaits every pipe, input included, when called before its
        child watcher reported the exit, and none when called after (a race
        either way, with a descendant holding a pipe)."""
        await self._exited()
        try:
            async with asyncio.timeout(self._runtime.drain_grace):
                await asyncio.shield(self._pipes.output_closed)
        except TimeoutError:
            pass
        self._close_pipes()
        await asyncio.shield(self._pipes.exited)
        returncode = self.process.returncode
        assert returncode is not None  # (set before the protocol is told)
        return returncode

    def _close_pipes(self) -> None:
        transport = getattr(self.process, "_transport", None)
        if transport is None:
            return
        for fd in (0, 1, 2):
            pipe = transport.get_pipe_transport(fd)
            if pipe is None:
                continue
            if fd == 0 and pipe.get_write_buffer_size():
                pipe.abort()  # input the program never read: close() would wait to write it
            else:
                pipe.close()  # readers then see end-of-file after what was read

    async def _exited(self) -> None:
        """Return when the program itself exited, whether or not children it
        left behind still hold its pipes (asyncio's wait() awaits those too)."""
        if self.process.returncode is not None:
            return
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return  # already reaped
        except (AttributeError, OSError):  # no pidfd on this system: asyncio's report of the exit
            await asyncio.shield(self._pipes.exited)
            return
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(fd, lambda: done.done() or done.set_result(None))
        try:
            await done
        finally:
            loop.remove_reader(fd)
            os.close(fd)

    async def kill(self, grace: float | None = None) -> None:
        """SIGTERM the group, wait up to `grace` seconds, then SIGKILL it."""
        grace = self._runtime.kill_grace if grace is None else grace
        try:
            if self.running and grace > 0:
                self._signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(grace):
                        await self._exited()
                except TimeoutError:
                    pass
        finally:
            # Runs even when the wait above is cancelled: nothing may survive.
            self._sweep()
        await self._reap()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _sweep(self) -> None:
        self._signal(signal.SIGKILL)
        if self in self._runtime._programs:
            self._runtime._programs.discard(self)
            watchdog.forget_group(self.pid)

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited {self.returncode}"
        return f"Program({self.argv[0]!r}, pid={self.pid}, {state})"


class SubprocessRuntime(Runtime):
    """Programs run as subprocesses in a temporary working folder.

    `env` adds variables to every program; `pass_env` names host variables to
    pass through (e.g. `pass_env=["OPENAI_API_KEY"]` for a program that talks
    to a provider directly). `kill_grace` is how long a program gets to exit
    after SIGTERM before its group is killed. `drain_grace` bounds how long
    the output of an exited program is still read while a descendant that
    escaped its group (setsid) holds its pipes open.
    """

    kind = "subprocess"
    unforkable_reason = (
        "its working folder holds the files as the last turn left them, not as they were at the turn "
        "asked, and its programs cannot be copied"
    )

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        kill_grace: float = 2.0,
        drain_grace: float = 1.0,
    ) -> None:
        super().__init__()
        if isinstance(pass_env, str):
            raise TypeError("pass_env is a list of variable names, e.g. pass_env=['OPENAI_API_KEY']")
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.pass_env = tuple(pass_env)
        self.kill_grace = seconds("SubprocessRuntime", "kill_grace", kill_grace)
        self.drain_grace = seconds("SubprocessRuntime", "drain_grace", drain_grace)
        self._workdir: Path | None = None
        self._programs: set[Program] = set()

    # ---- lifetime -----------------------------------------------------------
    async def _start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="rollkit-"))
        watchdog.watch_folder(self._workdir)
        _alive.add(self)

    async def _stop(self) -> None:
        try:
            programs = list(self._programs)
            if programs:
                await asyncio.gather(*(p.kill() for p in programs), return_exceptions=True)
        finally:
            _alive.discard(self)
            if self._workdir is not None:
                watchdog.remove_folder(self._workdir)  # kept watched, and retried, until it is gone

    def _abandon(self) -> None:
        # The stop overran the teardown deadline: kill every group now, no grace.
        for program in list(self._programs):
            program._sweep()
        _alive.discard(self)
        if self._workdir is not None:
            watchdog.remove_folder(self._workdir)

    @property
    def workdir(self) -> Path:
        """The working folder (exists from start to stop)."""
        if self._workdir is None or not self.alive:
            raise SandboxError(f"{self!r} has no working folder: start it first (it is {self._state})")
        return self._workdir

    @property
    def programs(self) -> list[Program]:
        """Programs started here that are still running."""
        return [p for p in self._programs if p.running]

    # ---- network ------------------------------------------------------------
    async def apply_network_policy(self, policy: NetworkPolicy, keep: list[str]) -> dict[str, Any]:
        info = await super().apply_network_policy(policy, keep)
        return {**info, "runtime": self.kind, "isolation": "none: programs share the host's network"}

    async def _enforce(self, policy: NetworkPolicy, keep: list[str]) -> dict[str, Any]:
        raise SandboxError(
            f"SubprocessRuntime cannot enforce a network policy (asked: allow={policy.allow}, "
            f"block={policy.block}): its programs share the host's network. It enforces only a clean "
            "environment, a private working folder and killing whole process groups. Drop the policy, "
            "or use a runtime with network isolation"
        )

    # ---- programs -----------------------------------------------------------
    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The clean environment a program gets (see the module docstring)."""
        return clean_environment(self.workdir, pass_env=self.pass_env, env={**self.env, **(env or {})})

    def resolve(self, program: str, env: Mapping[str, str]) -> str:
        """The path of `program`: relative paths are taken from the working
        folder, bare names are searched on the program's PATH."""
        if os.sep in program:
            path = Path(program) if os.path.isabs(program) else self.workdir / program
            if not path.is_file():
                raise FileNotFoundError(f"program {program!r} does not exist (looked at {path})")
            if not os.access(path, os.X_OK):
                raise PermissionError(f"program {program!r} is not executable ({path}); chmod +x it")
            return str(path)
        found = shutil.which(program, path=env.get("PATH", ""))
        if found is None:
            raise FileNotFoundError(f"program {program!r} was not found on the program's PATH")
        return found

    async def launch(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: bool = True
    ) -> Program:
        """Start `argv` in the working folder with pipes for stdin, stdout and
        stderr. The caller waits for it or kills it; `stop()` kills it anyway."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"argv must be a non-empty list of strings, got {argv!r}")
        if not self.alive:
            raise SandboxError(f"cannot launch {argv[0]!r}: {self!r} is not running")
        full_env = self.environment(env)
        executable = self.resolve(argv[0], full_env)
        command, pass_fds, launch_state = self._command([executable, *argv[1:]])
        loop = asyncio.get_running_loop()
        creating = asyncio.ensure_future(loop.subprocess_exec(
            # asyncio.create_subprocess_exec, with a protocol that tells when the output pipes closed
            lambda: _OutputWatch(limit=1 << 24, loop=loop),  # lines up to 16 MiB: a whole conversation
            *command,
            pass_fds=pass_fds,
            cwd=self.workdir,
            env=full_env,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as a whole
            **self._spawn_options(),
        ))
        cancelled = False
        while True:
            # Shielded: cancelled before the pipes are connected, CPython 3.11's
            # subprocess_exec kills the program alone (not its group)
            # and then waits forever for pipes that never connect.
            try:
                transport, protocol = await asyncio.shield(creating)
                process = asyncio.subprocess.Process(transport, protocol, loop)
                break
            except asyncio.CancelledError:
                if creating.done() and creating.cancelled():
                    raise
                cancelled = True
            except BaseException as exc:
                if cancelled:  # it failed after the cancellation came: the cancellation wins
                    raise asyncio.CancelledError from exc
                raise
        program = self._new_program(process, argv, launch_state)
        self._programs.add(program)
        watchdog.watch_group(program.pid)
        if cancelled:
            await asyncio.shield(program.kill(grace=0))
            raise asyncio.CancelledError
        return program

    def _command(self, argv: list[str]) -> tuple[list[str], tuple[int, ...], Any]:
        """The command that runs `argv`, the descriptors it inherits, and
        what `_new_program` needs of this launch (a sandbox wraps `argv`)."""
        return argv, (), None

    def _new_program(self, process: asyncio.subprocess.Process, argv: Sequence[str], launch_state: Any) -> Program:
        return Program(process, argv, self)

    def _spawn_options(self) -> dict[str, Any]:
        """More arguments for the process creation (a sandbox started by root
        drops to its own user and group)."""
        return {}

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | bytes | None = None,
    ) -> Completed:
        """Run `argv` to the end and return its exit status and output. Past
        `timeout` seconds its group is killed and TimeoutError raised."""
        program = await self.launch(argv, env=env, stdin=input is not None)
        process = program.process
        assert process.stdout is not None and process.stderr is not None
        readers: list[asyncio.Future[Any]] = [asyncio.ensure_future(process.stdout.read()),
                                              asyncio.ensure_future(process.stderr.read())]
        if input is not None:
            # Beside the wait: a program that exits without reading it all ends
            # the writing (its reap drops the rest), even where a descendant
            # that left its group holds its input open.
            readers.append(asyncio.ensure_future(_feed(process.stdin, input)))
        try:
            async with asyncio.timeout(timeout):
                returncode = await program.wait()
                out, err, *_ = await asyncio.gather(*readers)
        except TimeoutError:
            raise TimeoutError(f"program {argv[0]!r} did not finish within {timeout}s and was killed") from None
        finally:
            if program.running or any(not r.done() for r in readers):
                await program.kill(grace=0)
            for reader in readers:
                reader.cancel()
        return Completed(tuple(argv), returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    # ---- files --------------------------------------------------------------
    def path(self, relative: str | os.PathLike[str]) -> Path:
        """`relative` inside the working folder; refuses paths that leave it."""
        root = self.workdir.resolve()
        target = (root / relative).resolve()
        if target != root and root not in target.parents:
            raise SandboxError(f"path {str(relative)!r} leaves the runtime's working folder {root}")
        return target

    def read(self, relative: str | os.PathLike[str], *, binary: bool = False) -> Any:
        """A file of the working folder, as text (or bytes with binary=True)."""
        path = self.path(relative)
        if not path.is_file():
            raise FileNotFoundError(f"{str(relative)!r} is not a file in the runtime's working folder")
        return path.read_bytes() if binary else path.read_text()

    def write(self, relative: str | os.PathLike[str], data: str | bytes, *, executable: bool = False) -> Path:
        """Write a file into the working folder (parents created)."""
        path = self.path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        if executable:
            path.chmod(path.stat().st_mode | 0o111)
        return path

    def __repr__(self) -> str:
        where = f", {self._workdir}" if self._workdir is not None else ""
        return f"SubprocessRuntime({self._state}{where})"
