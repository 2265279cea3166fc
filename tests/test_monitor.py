"""Watching runs: the live file a run writes (rollkit.runs.live.LiveWriter),
following a run folder (FolderFollower: half-written lines, a folder that is
not a run, deleted while followed, a run whose process died), and the
`RunMonitor` widget (coalesced redraws counted against an injected clock,
an `rk.evaluate` awaitable fed as it runs, `monitor=True`, picking a
rollout into a TraceBrowser, `view` comparing two folders)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.notebook.browser import TraceBrowser
from rollkit.notebook.monitor import RunMonitor
from rollkit.notebook.viewpage import view
from rollkit.runs.live import LIVE, FolderFollower, RunState, finished_from_line, finished_from_trace

TASKS = arithmetic_tasks(6)


def _live(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / LIVE).read_text().splitlines()]


def test_a_run_writes_each_rollouts_start_phases_turns_and_end_then_final(tmp_path):
    rk.evaluate(demo_agent(), TASKS[:2], concurrency=1, out=tmp_path, progress=False)
    lines = _live(tmp_path)
    assert lines[0]["e"] == "run" and lines[0]["total"] == 2 and lines[0]["limits"]["max_turns"] == 6
    assert lines[-1]["e"] == "final" and lines[-1]["status"] == "done"
    first = [(x["e"], x.get("p"), x.get("n")) for x in lines[1:-1] if x["r"] == "arith-0-000#0"]
    assert first == [("start", None, None), ("phase", "boot", None), ("phase", "setup", None), ("phase", "agent", None),
                     ("turn", None, 1), ("turn", None, 2), ("phase", "finalize", None), ("phase", "scoring", None),
                     ("end", None, None)]
    tokens = [x["k"] for x in lines if x["e"] == "turn" and x["r"] == "arith-0-000#0"]
    first_trace = rk.load(tmp_path)[0]
    assert first_trace.info["rollout_id"] == "arith-0-000#0" and tokens[-1] == first_trace.num_total_tokens


def test_rollouts_waiting_are_on_disk_in_flight_and_an_interrupted_run_says_so(tmp_path):
    import asyncio

    asked: list[str] = []

    async def main() -> None:
        both_waiting = asyncio.Event()

        async def never(request):  # type: ignore[no-untyped-def]
            asked.append(request.messages[-1].content)
            if len(asked) == 2:
                both_waiting.set()
            await asyncio.Event().wait()  # the model never answers

        run = asyncio.ensure_future(rk.evaluate_async(rk.Agent(model=rk.ScriptedModel(never)), TASKS[:2], out=tmp_path,
                                                progress=False))
        await both_waiting.wait()
        # Both rollouts now wait and write nothing more: their lines still reach
        # the file (the writer's flush timer), so another process sees them in flight.
        follower = FolderFollower(tmp_path)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while follower.poll() or len(follower.state.in_flight) < 2:
            assert loop.time() < deadline, f"in flight on disk: {follower.state.in_flight}"
            await asyncio.sleep(0.02)  # let the run's loop turn; the condition is what is waited on
        assert {lane.phase for lane in follower.state.in_flight.values()} == {"agent"}
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    lines = _live(tmp_path)
    assert lines[-1] == {**lines[-1], "e": "final", "status": "interrupted"}
    follower = FolderFollower(tmp_path)
    follower.poll()
    assert follower.state.final == "interrupted" and follower.state.in_flight == {}


# ---- following a folder ----------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A finished run folder: 6 rollouts, the two multiplication ones failing."""
    folder = tmp_path_factory.mktemp("run") / "run"

    def flaky(request):  # type: ignore[no-untyped-def]
        question = next(m.content for m in request.messages if m.role == "user")
        if "each" in question:
            raise RuntimeError("model down")
        return _careful(request)

    agent = rk.Agent(model=rk.ScriptedModel(flaky))
    rk.evaluate(agent, TASKS, out=folder, progress=False)
    return folder


def _careful(request):  # type: ignore[no-untyped-def]
    import re

    last = request.messages[-1]
    if last.role == "tool":
        return f"The answer is {last.content}."
    question = next(m.content for m in request.messages if m.role == "user")
    x, y = re.findall(r"\d+", question)[:2]
    return rk.ScriptedModel.call("calculator", expression=f"{x} {'-' if 'gives away' in question else '+'} {y}")


def test_the_fast_line_reader_agrees_with_the_trace(written):
    traces = rk.load(written)
    lines = (written / "traces.jsonl").read_text().splitlines()
    for trace, line in zip(traces, lines, strict=True):
        fast, slow = finished_from_line(line, None), finished_from_trace(trace)
        assert (fast.rollout_id, fast.trace_id, fast.outcome, fast.error, fast.signals, fast.duration) == \
               (slow.rollout_id, slow.trace_id, slow.outcome, slow.error, slow.signals, slow.duration)
    assert sorted(finished_from_trace(t).outcome for t in traces) == ["failed: ProviderError"] * 2 + ["ok"] * 4
    # a task whose data holds the very text the fast path looks for reads the same
    tricky = traces[0].model_copy(update={"task": traces[0].task.model_copy(update={"data": {"y": 1, "rewards": {"a": 9}}})})
    line = tricky.model_dump_json()
    assert ',"rewards":{' in line.split('"messages"')[0]
    assert finished_from_line(line, None).signals == finished_from_trace(tricky).signals


def test_follow_tolerates_a_half_written_last_line(written, tmp_path):
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(written / "manifest.json", folder)
    data = (written / "traces.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    half = len(lines[3]) // 2
    (folder / "traces.jsonl").write_bytes(b"".join(lines[:3]) + lines[3][:half])
    follower = FolderFollower(folder)
    assert follower.poll() is True
    assert (follower.state.done, follower.state.total, follower.state.messages) == (3, 6, [])
    with open(folder / "traces.jsonl", "ab") as f:
        f.write(lines[3][half:] + b"".join(lines[4:]))
    assert follower.poll() is True
    state = follower.state
    assert (state.done, state.failed, dict(state.errors)) == (6, 2, {"ProviderError": 2})
    assert follower.poll() is False  # nothing new
    reward = state.signal_means()[0]
    assert reward[0] == "reward" and reward[3:] == (4, 6)  # 4 scored of 6: the failed two are missing, not 0
    picked = [r for _, r in state.picks() if r.failed][0]
    assert picked.trace().errors[0].type == "ProviderError"


def test_a_folder_that_is_not_a_run_then_becomes_one_then_is_deleted(written, tmp_path):
    folder = tmp_path / "later"
    follower = FolderFollower(folder)
    follower.poll()
    assert follower.state.messages == [f"no run folder at {folder} (yet): waiting for it; start the run with --out {folder}"]
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    follower.poll()
    assert follower.state.messages[0].startswith(f"{folder} is not a run folder: it holds none of manifest.json")
    shutil.copy(written / "traces.jsonl", folder)
    follower.poll()
    assert (follower.state.done, follower.state.messages) == (6, [])
    shutil.rmtree(folder)
    assert follower.poll() is True
    assert follower.state.messages == [f"the run folder {folder} was deleted (or moved) while followed; "
                                       "showing the 6 rollouts read before"]
    assert follower.state.done == 6


def test_a_run_whose_process_died_is_said_so(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (tmp_path / LIVE).write_text(json.dumps({"e": "run", "total": 4, "pid": dead.pid, "host": socket.gethostname()})
                                 + "\n" + json.dumps({"e": "start", "r": "t#0", "t": 1.0}) + "\n")
    follower = FolderFollower(tmp_path)
    follower.poll()
    assert list(follower.state.in_flight) == ["t#0"]
    assert follower.state.messages == [
        f"the run's process (pid {dead.pid}) ended without finishing: the rollouts shown in flight were cut off; "
        f"continue with rollkit eval ... --out {tmp_path} --resume"
    ]


def test_bad_lines_are_skipped_and_counted(written, tmp_path):
    lines = (written / "traces.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "traces.jsonl").write_text(lines[0] + "not json\n" + lines[1])
    follower = FolderFollower(tmp_path)
    follower.poll()
    assert follower.state.done == 2
    assert follower.state.messages == [f"1 lines of {tmp_path} are not what a run writes: skipped"]


# ---- the widget --------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, object]] = []

    def __call__(self) -> float:
        return self.now

    def schedule(self, delay: float, fn):  # type: ignore[no-untyped-def]
        timer = _Timer(self.now + delay, fn, self)
        self.timers.append((timer.at, timer))
        return timer

    def advance(self, to: float) -> None:
        self.now = to
        due = [t for at, t in self.timers if at <= to and not t.cancelled]
        self.timers = [(at, t) for at, t in self.timers if at > to and not t.cancelled]
        for timer in due:
            timer.fn()


class _Timer:
    def __init__(self, at: float, fn, clock: _Clock) -> None:  # type: ignore[no-untyped-def]
        self.at, self.fn, self.cancelled = at, fn, False

    def cancel(self) -> None:
        self.cancelled = True


# Exact counts on the fake clock over 2 s of changes, one redraw at most per
# 0.25 s: at 1,000 and 100,000 changes a second, one at 0.25, 0.5, ..., 1.75
# and the trailing one at 2.0 (8); at 10 a second a due redraw waits for the
# clock to reach it (it moves 0.1 s a change): 0.3, 0.6, ..., 1.8, then 2.05 (7).
@pytest.mark.parametrize(("rate", "expected"), [(10, 7), (1_000, 8), (100_000, 8)])
def test_redraws_are_coalesced_to_the_interval_whatever_the_rollout_rate(written, rate, expected):
    trace = rk.load(written)[0]
    clock = _Clock()
    monitor = RunMonitor(_Source(), interval=0.25, clock=clock, schedule=clock.schedule)
    start = monitor.redraws
    seconds = 2.0
    n = int(rate * seconds)
    for i in range(n):
        clock.advance(i / rate)
        monitor.state.started(f"r{i}")
        monitor.state.finished(trace.model_copy(update={"info": {**trace.info, "rollout_id": f"r{i}"}}))
    clock.advance(seconds + 1)
    redraws = monitor.redraws - start
    assert redraws == expected
    assert f'data-done="{n}"' in monitor.counts.value  # the last draw shows every rollout


class _Source:
    """An awaitable-like source: RunMonitor attaches its state."""

    def attach(self, state: RunState) -> None:
        self.state = state


def test_the_final_draw_is_immediate(written):
    clock = _Clock()
    monitor = RunMonitor(_Source(), interval=10.0, clock=clock, schedule=clock.schedule)
    monitor.state.begin({"total": 1})
    monitor.state.started("a#0")
    before = monitor.redraws
    monitor.state.end("done")
    assert monitor.redraws == before + 1 and 'data-status="finished"' in monitor.counts.value
    assert all(t.cancelled for _, t in clock.timers)


async def test_a_monitor_over_an_evaluation_shows_it_and_opens_the_slowest_rollout():
    pending = rk.evaluate_async(demo_agent(), TASKS, repeats=2, progress=False)
    clock = _Clock()  # stands still for the whole run: every redraw after the first is coalesced
    monitor = RunMonitor(pending, clock=clock, schedule=clock.schedule)
    result = await pending
    assert f'data-done="{len(result)}"' in monitor.counts.value and 'data-status="finished"' in monitor.counts.value
    # The first draw, then one for the end, drawn at once; the one scheduled between was dropped.
    assert monitor.redraws == 2 and clock.timers and all(t.cancelled for _, t in clock.timers)
    assert "<td>reward</td><td>0.667 ± " in monitor.signals.value and "<td>12 / 12</td>" in monitor.signals.value
    labels = [label for label, _ in monitor.picks.options]
    assert len(labels) == 5 and all(label.startswith("slow ") for label in labels)
    monitor.picks.value = 0
    browser = monitor.detail.children[0]
    assert isinstance(browser, TraceBrowser)
    assert browser.selected.info["rollout_id"] == labels[0].split()[3]
    monitor.close()


def test_evaluate_monitor_true_displays_a_monitor_instead_of_the_bar(monkeypatch, capsys):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    result = rk.evaluate(demo_agent(), TASKS, monitor=True)
    assert len(shown) == 1 and isinstance(shown[0], RunMonitor)
    assert shown[0].state.done == len(result) == 6 and shown[0].state.final == "done"
    assert "rollouts" not in capsys.readouterr().err  # no tqdm bar beside it


def test_monitor_refuses_what_it_cannot_watch():
    with pytest.raises(TypeError, match="RunMonitor watches an rk.evaluate_async\\(...\\) awaitable, an EvalResult, a list of "
                                        "traces or a run folder path; got int"):
        RunMonitor(3)
    with pytest.raises(TypeError, match="item 0 is a str, not an rk.Trace"):
        RunMonitor(["x"])


def test_a_monitor_following_a_deleted_folder_keeps_what_it_had(written, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(written, folder)
    monitor = RunMonitor(folder, follow=False)
    assert 'data-done="6"' in monitor.counts.value and monitor.message.value == ""
    record = [r for _, r in monitor.state.picks()][0]
    shutil.rmtree(folder)
    monitor.poll()
    assert "was deleted (or moved) while followed" in monitor.message.value
    assert 'data-done="6"' in monitor.counts.value
    monitor.show_rollout(record)  # its trace file is gone: said, not raised
    assert "cannot read the trace of" in monitor.detail.children[0].value


def test_view_compares_two_folders_and_says_why_it_cannot(written, tmp_path):
    other = tmp_path / "other"
    rk.evaluate(demo_agent(), arithmetic_tasks(2, seed=9), out=other, progress=False)
    page = view([written, other])
    monitors = [w for w in page.children if isinstance(w, RunMonitor)]
    assert len(monitors) == 2
    for monitor in monitors:
        monitor.stop()
    compared = page.children[-1]  # both finished: compared at once
    assert "have no task in common" in compared.result.value
    same = view([written, written])
    for monitor in (w for w in same.children if isinstance(w, RunMonitor)):
        monitor.stop()
    compared = same.children[-1]
    compared.result.value = ""
    compared.button.click()
    assert "paired sign-flip permutation test" in compared.result.value


def test_an_event_no_subscriber_wants_is_not_built():
    from rollkit.core import events

    built: list[str] = []
    real = events.Event

    class Counted(real):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def __init__(self, kind, *args, **kwargs):  # type: ignore[no-untyped-def]
            built.append(kind)
            super().__init__(kind, *args, **kwargs)

    bus = events.EventBus()
    events.Event = Counted
    try:
        turns: list[str] = []
        assert not bus.wants("turn")
        unsubscribe = bus.subscribe(lambda e: turns.append(e.kind), ["turn"])
        assert (bus.wants("turn"), bus.wants("phase_start")) == (True, False)
        bus.emit("phase_start", "r", phase="boot")
        bus.emit("turn", "r", turn=1)
        assert (built, turns) == (["turn"], ["turn"])
        everything: list[str] = []
        bus.subscribe(lambda e: everything.append(e.kind))
        assert bus.wants("phase_start")
        bus.emit("phase_start", "r", phase="agent")
        assert (everything, turns) == (["phase_start"], ["turn"])
        unsubscribe()
        bus.emit("turn", "r", turn=2)
        assert (everything, turns) == (["phase_start", "turn"], ["turn"])
    finally:
        events.Event = real
