"""Exports the other tool accepts whole, and round trips that lose nothing
both formats hold: inspect -> rollkit -> inspect (opened by inspect's own
`read_eval_log` and `samples_df`), rollkit -> ATIF -> rollkit."""

from __future__ import annotations

from pathlib import Path

import pytest

import rollkit as rk

FIXTURES = Path(__file__).parent / "fixtures"


def _held(trace: rk.Trace) -> dict:
    """What both formats hold of a trace."""
    return {
        "messages": [(m.role, m.content, [(c.id, c.name, c.args()) for c in getattr(m, "tool_calls", [])],
                      getattr(m, "tool_call_id", None)) for m in trace.messages],
        "usage": [c.usage.model_dump() for c in trace.model_calls if c.committed],
        "times": [(round(c.start, 3), round(c.end, 3)) for c in trace.model_calls if c.committed],
        "rewards": trace.rewards, "metrics": trace.metrics, "outcome": trace.outcome.label,
        "tool_errors": trace.info.get("tool_errors"),
    }


@pytest.fixture(scope="module")
def inspect_export(tmp_path_factory):
    pytest.importorskip("inspect_ai")
    source = rk.load(FIXTURES / "inspect/adding.eval")
    path = rk.save(source, tmp_path_factory.mktemp("export") / "again.eval", format="inspect")
    return source, path


def test_inspect_export_is_read_whole_by_inspect(inspect_export):
    from inspect_ai.log import read_eval_log

    source, path = inspect_export
    log = read_eval_log(str(path))
    samples = sorted(log.samples, key=lambda s: s.id)
    # input is the first user message, not the system prompt
    assert [s.input for s in samples] == ["What is 2 + 3?", "What is -1 + 3?", "Add 1 and 1, then 1 and 2."]
    # one model event per agent call (the grader's are not the agent's), one tool event per tool call
    assert [sum(e.event == "model" for e in s.events) for s in samples] == [2, 2, 2]
    assert [sum(e.event == "tool" for e in s.events) for s in samples] == [1, 1, 2]
    tool_errors = [e.error.message for s in samples for e in s.events if e.event == "tool" and e.error]
    assert tool_errors == ["negative numbers are not supported"]
    # per-call usage as inspect counts it: input without the cached part
    first = [e.output.usage for e in samples[0].events if e.event == "model"]
    assert [(u.input_tokens, u.output_tokens, u.input_tokens_cache_read) for u in first] == [(40, 12, None), (40, 12, 30)]
    assert samples[2].limit is not None and samples[2].limit.type == "message"
    # scores are the scorers', never metrics or working time
    assert {name for s in samples for name in (s.scores or {})} == {"includes", "graded"}
    assert {s.name: s.metrics["mean"].value for s in log.results.scores} == {"includes": pytest.approx(1 / 3),
                                                                              "graded": 1.0}
    # stats: each model's usage summed over the samples, as inspect sums it
    (usage,) = log.stats.model_usage.values()
    assert (usage.input_tokens, usage.output_tokens, usage.input_tokens_cache_read) == (240, 72, 60)


def test_inspect_export_reads_in_samples_df(inspect_export):
    pytest.importorskip("pandas")
    from inspect_ai.analysis import samples_df

    _, path = inspect_export
    frame = samples_df(str(path))
    assert len(frame) == 3
    assert sorted(c for c in frame.columns if c.startswith("score_")) == ["score_graded", "score_includes"]


def test_inspect_round_trip_loses_nothing_both_hold(inspect_export):
    source, path = inspect_export
    back = rk.load(path)
    key = lambda t: t.info["sample_id"]  # noqa: E731
    for before, after in zip(sorted(source, key=key), sorted(back, key=key)):
        held_before, held_after = _held(before), _held(after)
        assert held_after == held_before


def test_atif_round_trip_loses_nothing_both_hold(tmp_path):
    pytest.importorskip("inspect_ai")
    source = rk.load(FIXTURES / "inspect/adding.eval")
    one = rk.save(source[:1], tmp_path / "one.json", format="atif")
    many = rk.save(source, tmp_path / "many.jsonl", format="atif")
    assert [_held(t) for t in rk.load(one)] == [_held(source[0])]
    back = rk.load(many)
    assert [t.info["format"] for t in back] == ["atif"] * 3
    assert [_held(t) for t in back] == [_held(t) for t in source]
    assert [t.id for t in back] == [t.id for t in source]
