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
from typing import Any

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


def test_a_run_writes_its_run_and_final_lines_and_each_shown_rollouts_end_after_its_start(tmp_path):
    rk.evaluate(demo_agent(), TASKS[:2], concurrency=1, out=tmp_path, progress=False)
    lines = _live(tmp_path)
    assert lines[0]["e"] == "run" and lines[0]["total"] == 2 and lines[0]["limits"]["max_turns"] == 6
    assert lines[-1]["e"] == "final" and lines[-1]["status"] == "done"
    # Which rollouts a timed flush caught in flight depends on the machine's
    # speed; whatever it caught is started, then ended, and nothing is left in flight.
    for rollout_id in {x["r"] for x in lines[1:-1]}:
        kinds = [x["e"] for x in lines if x.get("r") == rollout_id]
        assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("end") == 1, kinds
    follower = FolderFollower(tmp_path)
    follower.poll()
    assert (follower.state.done, follower.state.in_flight, follower.state.final) == (2, {}, "done")


def _ended(rollout_id: str) -> rk.Trace:
    from rollkit.core.trace import TaskRef

    return rk.Trace(task=TaskRef(type="T", key=rollout_id.split("#")[0]), info={"rollout_id": rollout_id})


def test_the_live_file_holds_what_changed_between_flushes_not_every_event(tmp_path):
    import asyncio

    from rollkit.runs.live import LiveWriter

    written = 0

    def new_lines() -> list[tuple]:
        nonlocal written
        lines = _live(tmp_path)
        fresh, written = lines[written:], len(lines)
        return [tuple(x.get(k) for k in ("e", "r", "p", "n", "k")) for x in fresh]

    async def main() -> None:  # never awaits: the writer's timer cannot flush between the calls
        writer = LiveWriter(tmp_path / LIVE, clock=lambda: 100.0)
        writer.begin({"run_id": "r1", "total": 3})
        assert new_lines() == [("run", None, None, None, None)]
        writer.started("a#0")
        writer.phase("a#0", "agent")
        writer.turn("a#0", 1, 10, 0.5)
        writer.finished(_ended("a#0"))  # started and ended between two flushes: no line at all
        writer.started("b#0")
        for phase in ("boot", "setup", "agent"):
            writer.phase("b#0", phase)
        writer.turn("b#0", 1, 7, 0.25)
        writer.started("c#0")
        assert new_lines() == []
        writer.flush()  # what the timer does
        assert new_lines() == [("start", "b#0", None, None, None), ("phase", "b#0", "agent", None, None),
                               ("turn", "b#0", None, 1, 7), ("start", "c#0", None, None, None)]
        writer.turn("b#0", 2, None, 0.5)
        writer.flush()
        writer.flush()  # nothing changed since
        assert new_lines() == [("turn", "b#0", None, 2, None)]
        follower = FolderFollower(tmp_path)
        follower.poll()
        assert {r: (lane.phase, lane.turns, lane.tokens) for r, lane in follower.state.in_flight.items()} == \
               {"b#0": ("agent", 2, None), "c#0": ("boot", 0, 0)}
        writer.phase("b#0", "scoring")
        writer.finished(_ended("b#0"))  # shown: its end is on disk at once, without a flush
        assert new_lines() == [("end", "b#0", None, None, None)]
        follower.poll()
        assert list(follower.state.in_flight) == ["c#0"]
        writer.end("interrupted")
        assert new_lines() == [("final", None, None, None, None)]
        follower.poll()
        assert (follower.state.in_flight, follower.state.final) == ({}, "interrupted")

    asyncio.run(main())


def test_a_followed_rollout_is_read_at_each_flush_and_its_changes_written(tmp_path):
    import asyncio

    from rollkit.runs.live import LiveWriter

    now = {"phase": None, "turns": 0, "tokens": 0, "agent": 0.0}

    def lines() -> list[tuple]:
        return [tuple(x.get(k) for k in ("e", "r", "p", "n", "k", "a")) for x in _live(tmp_path)[1:]]

    async def main() -> None:  # never awaits: only the flushes called here write
        writer = LiveWriter(tmp_path / LIVE, clock=lambda: 100.0)
        writer.begin({"run_id": "r1", "total": 1})
        writer.started("a#0")
        writer.follow("a#0", lambda: (now["phase"], now["turns"], now["tokens"], now["agent"]))
        writer.flush()  # not booted yet, no turn: its start alone
        assert lines() == [("start", "a#0", None, None, None, None)]
        now.update(phase="agent", turns=1, tokens=37, agent=0.5)
        writer.flush()
        now.update(agent=0.75)  # agent time alone moves on: nothing to write
        writer.flush()
        assert lines()[1:] == [("phase", "a#0", "agent", None, None, None), ("turn", "a#0", None, 1, 37, 0.5)]
        now.update(turns=2, tokens=None, agent=1.0)
        writer.flush()
        assert lines()[3:] == [("turn", "a#0", None, 2, None, 1.0)]
        follower = FolderFollower(tmp_path)
        follower.poll()
        lane = follower.state.in_flight["a#0"]
        assert (lane.phase, lane.turns, lane.tokens, lane.agent_time) == ("agent", 2, None, 1.0)
        writer.finished(_ended("a#0"))
        writer.end("done")
        assert [x[0] for x in lines()[4:]] == ["end", "final"]

    asyncio.run(main())


def test_rollouts_waiting_after_a_turn_show_it_on_disk(tmp_path):
    """A run in this process has the live file follow its rollouts (no event
    made for it): a turn taken after their start lines were written, with
    nothing starting or ending since, still reaches the file while they wait
    (the writer's flush repeats while any rollout is followed)."""
    import asyncio

    from rollkit.examples.arithmetic import toy_calculator_model

    toy = toy_calculator_model()
    totals: list[int] = []

    async def main() -> None:
        shown, both_waiting = asyncio.Event(), asyncio.Event()

        async def answer_when_shown_then_never(request):  # type: ignore[no-untyped-def]
            if request.messages[-1].role == "tool":  # the second call never answers
                if len(totals) == 2:
                    both_waiting.set()
                await asyncio.Event().wait()
            await shown.wait()
            response = await toy.complete(request)
            totals.append(response.usage.input_tokens + response.usage.output_tokens)
            return response

        async def on_disk(done: Any) -> dict:
            follower = FolderFollower(tmp_path)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while follower.poll() or not done(follower.state.in_flight):
                assert loop.time() < deadline, f"in flight on disk: {follower.state.in_flight}"
                await asyncio.sleep(0.02)  # let the run's loop turn; the condition is what is waited on
            return follower.state.in_flight

        agent = demo_agent(model=rk.ScriptedModel(answer_when_shown_then_never, name=toy.name))
        run = asyncio.ensure_future(rk.evaluate_async(agent, TASKS[:2], out=tmp_path, progress=False))
        before = await on_disk(lambda lanes: len(lanes) == 2)
        assert [lane.turns for lane in before.values()] == [0, 0]
        shown.set()
        await both_waiting.wait()
        after = await on_disk(lambda lanes: [lane.turns for lane in lanes.values()] == [1, 1])
        assert {lane.phase for lane in after.values()} == {"agent"}
        assert sorted(lane.tokens for lane in after.values()) == sorted(totals)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())


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
