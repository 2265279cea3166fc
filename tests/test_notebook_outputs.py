"""rollkit's widgets fill their Output widgets as state, never by capture.

rollkit.notebook.outputs says why: a captured output makes a headless client
(nbclient, so `jupyter execute`, nbconvert, papermill, Voila) send the
Output widget's new state to the kernel on the shell channel while it waits
for the cell's reply, and that write can hide the reply until the cell's
timeout (the kernel idle, the client waiting). The last test runs both
browsers' picks under nbclient and counts those writes: any is a failure,
whatever the timing, so it needs no retries and no short timeouts.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import ipywidgets as widgets
import pytest
from IPython.display import HTML

from rollkit.notebook.outputs import show

PLOTLY = "application/vnd.plotly.v1+json"


def test_show_replaces_what_an_output_shows_in_one_state_update() -> None:
    out = widgets.Output()
    seen: list[tuple] = []
    out.observe(lambda change: seen.append(change["new"]), names="outputs")
    show(out, HTML("<b>picked</b>"), "a note")
    assert [o["data"] for o in out.outputs] == [
        {"text/html": "<b>picked</b>", "text/plain": "<IPython.core.display.HTML object>"},
        {"text/plain": "'a note'"},
    ]
    assert {o["output_type"] for o in out.outputs} == {"display_data"}
    show(out)
    assert out.outputs == ()
    assert len(seen) == 2  # one update each, however many objects


def test_show_takes_a_plotly_figures_bundle_without_it_displaying_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """A plotly figure also displays itself (_ipython_display_): asked
    through IPython's formatter it would be published as the cell's own
    output (printed here, outside a kernel) and the widget would get nothing."""
    import plotly.graph_objects as go
    import plotly.io as pio

    before = pio.renderers.default
    pio.renderers.default = "plotly_mimetype"
    try:
        out = widgets.Output()
        show(out, go.Figure(go.Bar(x=["a"], y=[1]), layout={"title": {"text": "one bar"}}))
    finally:
        pio.renderers.default = before
    assert capsys.readouterr().out == ""
    [shown] = out.outputs
    assert list(shown["data"]) == [PLOTLY]
    assert shown["data"][PLOTLY]["layout"]["title"]["text"] == "one bar"


_PICKS = textwrap.dedent(
    """
    import asyncio, rollkit as rk
    from rollkit.examples import arithmetic_tasks, demo_agent
    traces = await asyncio.gather(*(demo_agent().run(t) for t in arithmetic_tasks(4)))
    folder = rk.save(traces, "run")
    """
), "browser = rk.notebook.TraceBrowser(traces)\nbrowser.select(1)\nbrowser", (
    "paged = rk.notebook.TraceBrowser(folder, plots=True)\npaged.select(2)\npaged"
), (
    "print([sorted(o['data']) for b in (browser, paged) for o in b.figures.outputs], type(paged).__name__)"
), "browser.table.value = paged.table.value = None\nprint(len(browser.figures.outputs + paged.figures.outputs))"


def test_picking_a_trace_in_either_browser_makes_a_headless_client_send_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both browsers (TraceBrowser over traces, and over a run folder, which
    is the paged RunBrowser) pick and clear a trace under nbclient: the
    client never writes an Output widget's state back to the kernel, and
    the picked trace's two figures are in the widget."""
    nbclient = pytest.importorskip("nbclient")
    import nbformat
    from helpers.kernel_helpers import kernel_env
    from nbclient.output_widget import OutputWidget

    sent: list[str] = []
    publish = OutputWidget._publish_msg

    def counted(self: OutputWidget, msg_type: str, *args: object, **kwargs: object) -> None:
        sent.append(msg_type)
        publish(self, msg_type, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(OutputWidget, "_publish_msg", counted)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in _PICKS])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=kernel_env())
    assert sent == []
    printed = ["".join(o.get("text", "") for o in cell.outputs).strip() for cell in nb.cells[-2:]]
    assert printed == [f"{[[PLOTLY]] * 4} RunBrowser", "0"]


@pytest.mark.parametrize("over_folder", [False, True], ids=["traces", "run folder"])
def test_a_pick_whose_plots_fail_shows_no_other_traces_plots(
        over_folder: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures are cleared before the picked trace's are made: a plot
    that raises leaves the area empty, not showing the trace picked before."""
    import asyncio

    import rollkit as rk
    from rollkit.examples import arithmetic_tasks, demo_agent
    from rollkit.notebook import plots

    async def run_all() -> list:
        return list(await asyncio.gather(*(demo_agent().run(t) for t in arithmetic_tasks(3))))

    traces = asyncio.run(run_all())
    browser = rk.notebook.TraceBrowser(rk.save(traces, tmp_path / "run") if over_folder else traces, plots=True)
    browser.select(0)
    assert len(browser.figures.outputs) == 2

    def broken(trace: object) -> None:
        raise RuntimeError("no plot")

    monkeypatch.setattr(plots, "budget_burn", broken)
    with pytest.raises(RuntimeError, match="no plot"):
        browser.select(1)
    assert browser.figures.outputs == ()
