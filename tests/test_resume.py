"""Run folders: traces appended as they finish, a manifest, resume after a
crash (SIGKILL) or an interrupt (SIGINT), torn and corrupt lines, another
run's folder, and loading a folder back."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from helpers.evaluate_helpers import gated_agent, said_agent, said_tasks, sigkill, start_gated, wait_blocked
from test_livetables import _complete_and_fresh, _markers

import rollkit as rk
from rollkit.runs.evaluation import RunFolderError, best_of_n, load_run, pass_at_k

ALL_12 = sorted(f"said-{i}#{r}" for i in range(6) for r in range(2))
FINISHED_BEFORE_BLOCK = sorted(f"said-{i}#{r}" for i in (0, 1, 3, 4) for r in range(2))


def _rollout_ids(folder: Path) -> list[str]:
    return [json.loads(line)["info"]["rollout_id"] for line in (folder / "traces.jsonl").read_text().splitlines()]


def test_kill_then_resume_gives_exactly_one_trace_per_task_and_repeat(tmp_path):
    out = tmp_path / "run"
    proc = start_gated("run", out)
    try:
        wait_blocked(proc)  # by then the 8 rollouts before the blocked ones have finished
        assert sorted(_rollout_ids(out)) == FINISHED_BEFORE_BLOCK
    finally:
        status = sigkill(proc)
    assert status == -signal.SIGKILL
    kept = {t.info["rollout_id"]: t.id for t in rk.load(out)}

    result = rk.evaluate(gated_agent(), said_tasks(6), repeats=2, concurrency=4, out=out, resume=True, progress=False)

    on_disk = _rollout_ids(out)
    assert Counter(on_disk) == Counter(ALL_12)  # none lost, none doubled
    assert sorted(t.info["rollout_id"] for t in result.traces) == ALL_12
    # The finished traces were kept as they were, not rerun.
    assert {t.info["rollout_id"]: t.id for t in result.traces if t.info["rollout_id"] in kept} == kept
    assert all(t.ok for t in result.traces)
    # The killed run's lines held in memory for the tables were built from the file on resume.
    _complete_and_fresh(out / "traces.jsonl", tmp_path / "fresh")


def test_interrupt_aborts_in_flight_keeps_finished_and_resume_completes(tmp_path):
    out = tmp_path / "run"
    proc = start_gated("run", out)
    try:
        wait_blocked(proc)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, stderr
    said = stdout.splitlines()
    assert said[-1] == "interrupted"
    assert len([line for line in said if line.startswith("aborted ")]) == 4
    assert "evaluation interrupted: 8 rollouts finished and kept" in stderr
    assert sorted(_rollout_ids(out)) == FINISHED_BEFORE_BLOCK
    assert sum(p["lines"] for p in _markers(out / "traces.jsonl")) == 8  # the interrupted run wrote its last part
    _complete_and_fresh(out / "traces.jsonl", tmp_path / "fresh-interrupted")

    result = rk.evaluate(gated_agent(), said_tasks(6), repeats=2, concurrency=4, out=out, resume=True, progress=False)
    assert Counter(_rollout_ids(out)) == Counter(ALL_12)
    assert len(result) == 12
    _complete_and_fresh(out / "traces.jsonl", tmp_path / "fresh-resumed")


def test_resume_skips_finished_and_runs_only_the_rest(tmp_path):
    first = rk.evaluate(said_agent(), said_tasks(3), repeats=2, out=tmp_path, progress=False)
    assert len(first) == 6
    started = []
    agent = said_agent()
    agent.subscribe(lambda e: started.append(e.rollout_id) if e.kind == "phase_start" and e.data["phase"] == "boot" else None)
    # Same run, more repeats: only the new repeat index runs.
    second = rk.evaluate(agent, said_tasks(3), repeats=3, out=tmp_path, resume=True, progress=False)
    assert len(started) == 3
    assert Counter(t.info["rollout_id"] for t in second.traces) == Counter(
        f"said-{i}#{r}" for i in range(3) for r in range(3)
    )
    assert [t.id for t in second.traces[:6]] == [t.id for t in first.traces]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_id"] == first.manifest["run_id"]
    assert manifest["repeats"] == 3
    assert len(manifest["resumed"]) == 1
    # Nothing left to do: resuming again runs nothing and returns the same.
    third = rk.evaluate(agent, said_tasks(3), repeats=3, out=tmp_path, resume=True, progress=False)
    assert len(started) == 3
    assert [t.id for t in third.traces] == [t.id for t in second.traces]


def test_manifest_records_agent_task_set_version_and_start(tmp_path):
    rk.evaluate(said_agent(), said_tasks(2), repeats=2, out=tmp_path, progress=False, group_scorers=[best_of_n()])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["rollkit"] == rk.__version__
    assert manifest["agent"]["model"] == "odd-wrong"
    assert manifest["agent"]["harness"] == "chat"
    assert manifest["agent"]["limits"]["max_turns"] is None
    assert manifest["tasks"]["keys"] == ["said-0", "said-1"]
    assert manifest["tasks"]["count"] == 2
    assert manifest["repeats"] == 2
    assert manifest["group_scorers"] == ["best_of_n"]
    assert manifest["started"].startswith("20")


def test_torn_last_line_is_ignored_with_a_warning_and_rerun(tmp_path):
    rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, progress=False)
    path = tmp_path / "traces.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    torn_id = json.loads(lines[-1])["info"]["rollout_id"]
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a write cut short
    with pytest.warns(UserWarning, match="line 3 is torn"):
        result = rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, resume=True, progress=False)
    assert Counter(_rollout_ids(tmp_path)) == Counter(f"said-{i}#0" for i in range(3))
    assert result.traces[-1].info["rollout_id"] == torn_id
    assert path.read_text().endswith("}\n")


def test_last_line_missing_only_its_newline_is_kept(tmp_path):
    first = rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False)
    path = tmp_path / "traces.jsonl"
    path.write_text(path.read_text().rstrip("\n"))
    result = rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, resume=True, progress=False)
    assert [t.id for t in result.traces] == [t.id for t in first.traces]
    assert path.read_text().count("\n") == 2


def test_corrupt_middle_line_makes_resume_refuse_naming_the_line(tmp_path):
    rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, progress=False)
    path = tmp_path / "traces.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = '{"not": "a trace"}\n'
    path.write_text("".join(lines))
    with pytest.raises(RunFolderError) as info:
        rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, resume=True, progress=False)
    message = str(info.value)
    assert "line 2 is not a rollkit trace" in message
    assert "resume refuses to guess" in message and "Fix or remove line 2" in message
    with pytest.raises(rk.TraceFileError, match="line 2 is not a rollkit trace"):
        load_run(tmp_path)
    assert path.read_text() == "".join(lines)  # refused: nothing touched


def test_out_folder_of_another_run_is_refused(tmp_path):
    rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False)
    with pytest.raises(RunFolderError) as info:
        rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False)
    assert f"{tmp_path} already holds a run" in str(info.value)
    assert "pass resume=True (rollkit eval --resume) to continue it, or choose another out folder" in str(info.value)
    with pytest.raises(RunFolderError) as info:
        rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, resume=True, progress=False)
    assert "holds another run: its task set (2 tasks there, 3 here" in str(info.value)
    other = rk.Agent(model="echo")
    with pytest.raises(RunFolderError, match="holds another run: its agent"):
        rk.evaluate(other, said_tasks(2), out=tmp_path, resume=True, progress=False)
    assert len(_rollout_ids(tmp_path)) == 2


def test_folder_with_traces_but_no_manifest_is_refused(tmp_path):
    rk.save(rk.evaluate(said_agent(), said_tasks(1), progress=False).traces, tmp_path / "traces.jsonl")
    with pytest.raises(RunFolderError, match="holds traces.jsonl but no manifest.json"):
        rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, progress=False)


def test_loading_a_run_folder_gives_the_same_traces_and_dataframes(tmp_path):
    tasks = said_tasks(4)
    result = rk.evaluate(said_agent(), tasks, repeats=2, out=tmp_path, progress=False, group_scorers=[pass_at_k(1)])
    loaded = load_run(tmp_path)
    assert [t.model_dump() for t in loaded.traces] == [t.model_dump() for t in result.traces]
    assert loaded.groups == result.groups
    assert loaded.manifest == result.manifest
    for frame in ("rollouts", "turns", "phases", "signals", "group_signals"):
        assert getattr(loaded, frame)().equals(getattr(result, frame)()), frame
    assert loaded.summary() == result.summary()


def test_groups_finished_across_a_resume_are_judged_once(tmp_path):
    first = rk.evaluate(said_agent(), said_tasks(2), repeats=1, out=tmp_path, progress=False, group_scorers=[best_of_n()])
    # repeats=1 complete: judged on n=1.
    assert sorted((g.example_id, g.n) for g in first.groups) == [("said-0", 1), ("said-1", 1)]
    # A crash between the last trace and its group line: that group is judged on resume.
    (tmp_path / "groups.jsonl").write_text(json.dumps({"example_id": "said-0", "signal": "best_of_n", "value": 1.0, "n": 1}) + "\n")
    second = rk.evaluate(said_agent(), said_tasks(2), repeats=1, out=tmp_path, resume=True, progress=False, group_scorers=[best_of_n()])
    assert sorted((g.example_id, g.signal, g.value) for g in second.groups) == [
        ("said-0", "best_of_n", 1.0),
        ("said-1", "best_of_n", 0.0),
    ]
    assert len((tmp_path / "groups.jsonl").read_text().splitlines()) == 2


def test_groups_are_judged_again_when_resume_adds_repeats(tmp_path):
    rk.evaluate(said_agent(), said_tasks(2), repeats=1, out=tmp_path, progress=False, group_scorers=[pass_at_k(1)])
    second = rk.evaluate(said_agent(), said_tasks(2), repeats=3, out=tmp_path, resume=True, progress=False, group_scorers=[pass_at_k(1)])
    assert sorted((g.example_id, g.n, g.value) for g in second.groups) == [("said-0", 3, 1.0), ("said-1", 3, 0.0)]
    assert load_run(tmp_path).groups == second.groups


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "results.jsonl"
    target.write_text("")
    with pytest.raises(RunFolderError, match="is a file; pass a folder"):
        rk.evaluate(said_agent(), said_tasks(1), out=target, progress=False)


def test_a_group_scorer_added_on_resume_judges_tasks_completed_before(tmp_path):
    calls = []

    def counted(traces: list[rk.Trace]) -> float:
        calls.append(traces[0].info["example_id"])
        return float(len(traces))

    rk.evaluate(said_agent(), said_tasks(2), repeats=2, out=tmp_path, progress=False, group_scorers=[best_of_n()])
    # Every rollout is done; the resume only adds a scorer.
    second = rk.evaluate(said_agent(), said_tasks(2), repeats=2, out=tmp_path, resume=True, progress=False,
                         group_scorers=[best_of_n(), counted])
    assert sorted(calls) == ["said-0", "said-1"]
    assert sorted((g.example_id, g.signal, g.value) for g in second.groups) == [
        ("said-0", "best_of_n", 1.0), ("said-0", "counted", 2.0),
        ("said-1", "best_of_n", 0.0), ("said-1", "counted", 2.0),
    ]
    # best_of_n was judged once, by the first run: not again.
    written = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert Counter((g["example_id"], g["signal"]) for g in written) == Counter(
        {("said-0", "best_of_n"): 1, ("said-1", "best_of_n"): 1, ("said-0", "counted"): 1, ("said-1", "counted"): 1}
    )
    assert load_run(tmp_path).groups == second.groups


def test_a_crash_between_two_scorers_lines_runs_only_the_missing_scorer(tmp_path):
    scorers = {"first": best_of_n(), "second": pass_at_k(1)}
    rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False, group_scorers=scorers)
    path = tmp_path / "groups.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["signal"] for line in lines] == ["first", "second", "first", "second"]
    path.write_text("".join(lines[:3]))  # died after said-1's "first" line
    second = rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, resume=True, progress=False, group_scorers=scorers)
    written = [(g["example_id"], g["signal"]) for g in map(json.loads, path.read_text().splitlines())]
    assert written == [("said-0", "first"), ("said-0", "second"), ("said-1", "first"), ("said-1", "second")]
    assert sorted((g.example_id, g.signal, g.value) for g in second.groups) == [
        ("said-0", "first", 1.0), ("said-0", "second", 1.0), ("said-1", "first", 0.0), ("said-1", "second", 0.0),
    ]


def test_a_mapping_scorer_counts_as_judged_by_its_name(tmp_path):
    calls = []

    def both(traces: list[rk.Trace]) -> dict[str, float]:
        calls.append(traces[0].info["example_id"])
        return {"lo": 0.0, "hi": 1.0}

    rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, progress=False, group_scorers=[both])
    rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, resume=True, progress=False, group_scorers=[both])
    assert calls == ["said-0"]  # its lines say "lo" and "hi", yet it is not run again
    written = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert [(g["signal"], g["scorer"]) for g in written] == [("lo", "both"), ("hi", "both")]


@pytest.mark.parametrize("make", [lambda path: None, lambda path: path.mkdir()], ids=["missing", "empty"])
def test_resume_of_a_missing_or_empty_folder_starts_a_new_run_and_says_so(tmp_path, caplog, make):
    out = tmp_path / "run"
    make(out)
    with caplog.at_level("WARNING", logger="rollkit"):
        result = rk.evaluate(said_agent(), said_tasks(2), out=out, resume=True, progress=False)
    assert f"nothing to resume in {out}: starting a new run" in caplog.messages
    assert json.loads((out / "manifest.json").read_text())["run_id"] == result.manifest["run_id"]
    assert "resumed" not in result.manifest
    assert sorted(_rollout_ids(out)) == ["said-0#0", "said-1#0"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="rollkit"):
        rk.evaluate(said_agent(), said_tasks(2), out=out, resume=True, progress=False)
    assert not any("nothing to resume" in m for m in caplog.messages)  # a real resume says nothing of the kind


def test_a_damaged_manifest_is_refused_naming_the_file(tmp_path):
    rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, progress=False)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RunFolderError, match=r"manifest.json is not valid JSON"):
        load_run(tmp_path)
    with pytest.raises(RunFolderError, match=r"manifest.json is not valid JSON"):
        rk.evaluate(said_agent(), said_tasks(1), out=tmp_path, resume=True, progress=False)
