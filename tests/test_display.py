"""A trace shows itself as HTML (summary, transcript, signals, phases), with
everything a model or a user wrote escaped; saved traces load back and show
the same; bad trace files are reported clearly."""

from __future__ import annotations

import json
import re

import pytest

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.notebook.display import status_html
from rollkit.notebook import TraceBrowser, chat_html, trace_html

from helpers.sample_traces import assorted_traces

SCRIPT = "<script>alert('x')</script>"


async def _script_trace() -> rk.Trace:
    agent = rk.Agent(model=rk.ScriptedModel([SCRIPT]))
    return await agent.run(rk.Task(prompt=f"user says {SCRIPT}", id="k<b>"))


async def test_model_and_user_text_is_escaped() -> None:
    trace = await _script_trace()
    page = trace_html(trace)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "user says &lt;script&gt;" in page
    assert "k&lt;b&gt;" in page  # the task key is user data too
    assert "<b>k" not in page


def test_tool_calls_and_results_are_escaped_and_shown() -> None:
    call = rk.ScriptedModel.call("calculator", expression="<img src=x onerror=alert(1)>")
    result = rk.ToolMessage(tool_call_id=call.tool_calls[0].id, name="calculator", content="</div><script>1</script>")
    page = chat_html([call, result])
    assert "→ calls <b>calculator</b>" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img" not in page and "<script>1" not in page
    assert "tool result · calculator" in page


def test_long_text_is_folded() -> None:
    long = "first line\n" + "word " * 400
    page = chat_html([rk.UserMessage(content=long), rk.AssistantMessage(content="short")])
    assert page.count("<details>") == 1
    assert "<summary>first line… (2011 characters, click to unfold)</summary>" in page
    assert "short</div>" in page


async def test_trace_html_has_summary_transcript_signals_phases() -> None:
    kinds = await assorted_traces()
    page = trace_html(kinds["ok"])
    assert f'data-trace="{kinds["ok"].id}"' in page
    assert '<span class="rk-ok">ok</span> · reward 1.000' in page
    assert "<b>transcript</b> (5 messages)" in page
    assert "<td>reward</td><td>correct</td><td>1.000</td><td>× 1</td>" in page
    for phase in ("boot", "setup", "agent", "finalize", "scoring"):
        assert f"<tr><td>{phase}</td>" in page
    assert "model " in page and " harness " in page  # the agent phase, split

    failed = trace_html(kinds["failed"])
    assert '<span class="rk-bad">failed</span> · ProviderError: ' in failed
    assert "not scored: the run failed" in failed

    raised = trace_html(kinds["raised"])
    assert re.search(r"<td>broken</td><td><span class=\"rk-missing\">missing</span></td><td></td><td>TaskError: .*cannot measure this", raised)

    stopped = trace_html(kinds["stopped"])
    assert '<span class="rk-stopped">stopped</span> by max_turns' in stopped


async def test_saved_trace_loads_back_and_displays_the_same(tmp_path) -> None:
    traces = [await demo_agent().run(t) for t in arithmetic_tasks(3)]
    loaded = rk.load(rk.save(traces, tmp_path / "runs.jsonl"))
    assert [trace_html(t) for t in loaded] == [trace_html(t) for t in traces]


async def test_ipython_shows_a_trace_as_html_without_the_notebook_layer() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        trace = await _script_trace()
        data, _meta = shell.display_formatter.format(trace)
        assert data["text/html"] == trace_html(trace)
    finally:
        InteractiveShell.clear_instance()


async def test_trace_browser_picks_a_trace_and_shows_it() -> None:
    traces = [await demo_agent().run(t) for t in arithmetic_tasks(4)]
    browser = TraceBrowser(traces, plots=False)
    assert len(browser.table.options) == 4
    assert browser.summary.value.startswith("<b>4 traces</b> · 4 ok")
    picked = browser.select(2)
    assert picked is traces[2]
    assert browser.detail.value == trace_html(traces[2])
    browser.filter.value = "arith-0-001"
    assert [i for _label, i in browser.table.options] == [1]
    with pytest.raises(IndexError, match="there are 4 traces; pick 0..3, not 9"):
        browser.select(9)


async def test_a_phase_name_from_a_loaded_file_is_not_html(tmp_path) -> None:
    """Only the phase key names a row: a file can hold any text in `name`."""
    trace = await demo_agent().run(arithmetic_tasks(1)[0])
    record = json.loads(trace.model_dump_json())
    record["phases"]["boot"]["name"] = "<img src=x onerror=alert(1)>"
    path = tmp_path / "forged.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (loaded,) = rk.load(path)
    page = trace_html(loaded)
    assert "<img" not in page and "onerror" not in page
    assert "<tr><td>boot</td>" in page


async def test_status_shows_a_reward_only_for_a_scored_run() -> None:
    kinds = await assorted_traces()
    ok = kinds["ok"]
    assert ok.scored and not kinds["failed"].scored and not kinds["aborted"].scored
    assert status_html(ok) == '<span class="rk-ok">ok</span> · reward 1.000'
    # Rewards on a trace whose scoring never ran are not its score.
    unscored = ok.model_copy(update={"phases": {k: v for k, v in ok.phases.items() if k != "scoring"}})
    assert not unscored.scored
    assert status_html(unscored) == '<span class="rk-ok">ok</span>'


async def test_trace_browser_select_clears_a_filter_that_hides_the_trace() -> None:
    traces = [await demo_agent().run(t) for t in arithmetic_tasks(4)]
    browser = TraceBrowser(traces, plots=False)
    browser.filter.value = "arith-0-001"
    assert [i for _label, i in browser.table.options] == [1]
    assert browser.select(3) is traces[3]  # hidden by the filter: it is cleared
    assert browser.filter.value == ""
    assert [i for _label, i in browser.table.options] == [0, 1, 2, 3]
    assert browser.selected is traces[3]
    assert browser.detail.value == trace_html(traces[3])
    browser.filter.value = "arith-0-00"  # still shows trace 3: the filter stays
    assert browser.select(2) is traces[2] and browser.filter.value == "arith-0-00"


async def test_trace_browser_filter_matches_a_stop_only_where_there_is_one() -> None:
    kinds = await assorted_traces()
    traces = [kinds["ok"], kinds["stopped"], kinds["failed"]]
    browser = TraceBrowser(traces, plots=False)
    browser.filter.value = "none"  # no trace's key, id or stop holds it
    assert browser.table.options == ()
    browser.filter.value = "max_turns"
    assert [i for _label, i in browser.table.options] == [1]
    browser.filter.value = "ProviderError"
    assert [i for _label, i in browser.table.options] == [2]


# ---- bad trace files ----------------------------------------------------------


def test_loading_a_file_that_is_not_a_trace_file(tmp_path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text("hello, this is not JSON\n")
    with pytest.raises(rk.TraceFileError, match=r"line 1 is not a rollkit trace .*errors='skip'") as info:
        rk.load(path)
    assert info.value.line == 1

    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"name": "a JSON object, but no trace"}) + "\n")
    with pytest.raises(rk.TraceFileError, match="line 1 is not a rollkit trace"):
        rk.load(other)


async def test_trace_file_with_one_corrupt_line(tmp_path) -> None:
    traces = [await demo_agent().run(t) for t in arithmetic_tasks(3)]
    path = rk.save(traces, tmp_path)
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # cut in the middle: not JSON any more
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(rk.TraceFileError, match=r"line 2 is not a rollkit trace") as info:
        rk.load(path)
    assert info.value.line == 2
    with pytest.warns(UserWarning, match=r"line 2 is not a rollkit trace .*skipped"):
        good = rk.load(path, errors="skip")
    assert [t.id for t in good] == [traces[0].id, traces[2].id]
    assert trace_html(good[1]) == trace_html(traces[2])
