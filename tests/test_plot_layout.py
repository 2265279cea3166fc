"""The notebooks' figures read cleanly: checked on plotly's own rendering in
headless Chromium (Debian's, driven by Playwright), from the DOM.

Each figure is built as the notebooks build it (smaller data), written as a
page with plotly.js inline and opened from a file; then, from the boxes of
what plotly drew:

- every text (title, tick label, axis title, legend entry, subplot title,
  data label) lies inside the figure, and inside any clip path it is drawn
  under: nothing is cut off ("rewar" in the branches plot);
- no two texts overlap (the panel chart's axis title under its legend);
- tick labels and axis titles stay out of every plot area (the rewards
  chart's names turned into the lower plot);
- stop_reasons: every bar's colour is a legend entry's colour, and the
  title names no colours (it said orange/blue/red over a green bar);
- compare: no two per-task points are drawn on the same spot, and their
  counts add up to the tasks compared (30 tasks were 2 dots);
- the TraceBrowser (a widget, so served by Voila as in tests/test_browser.py):
  its header's text starts where its rows' does, in the same font, so each
  column name sits over its column.

A figure that fails saves its screenshot (path printed) to be looked at.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

import rollkit as rk
from rollkit.examples import (
    Arithmetic, arithmetic_tasks, careful_calculator_model, demo_agent, support_agent, support_tasks, toy_customer,
)
from rollkit.notebook.stepping import NotebookRollout
from test_browser import _page, _Voila, voila  # noqa: F401  (a fixture)

playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]

# What plotly drew, as boxes in page pixels: every visible text with the
# part of the figure it belongs to and whether it is clipped, the plot
# areas, the legend, and the bars' and legend swatches' colours.
_GEOMETRY = r"""() => {
  const box = r => ({x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  const figure = box(document.querySelector('.svg-container').getBoundingClientRect());
  const role = el => {
    for (let node = el; node && node.getAttribute; node = node.parentNode) {
      const classes = (node.getAttribute('class') || '').split(/\s+/);
      for (const c of classes) {
        if (c === 'legend') return 'legend';
        if (/^[xy]\d*tick$/.test(c)) return c[0] + 'tick';
        if (c === 'textpoint') return 'data';
        if (c === 'gtitle') return 'title';
        if (c === 'annotation') return 'annotation';
        if (/^g-[xy]\d*title$/.test(c)) return 'axistitle';
      }
    }
    return 'other';
  };
  // Whether a text is drawn under a clip path (a data label clipped to its axes).
  const clipped = el => {
    for (let node = el; node && node.getAttribute; node = node.parentNode) {
      if (node.getAttribute('clip-path')) return true;
    }
    return false;
  };
  const texts = [];
  for (const el of document.querySelectorAll('.svg-container text')) {
    const r = el.getBoundingClientRect();
    if (!el.textContent.trim() || r.width === 0 || getComputedStyle(el).display === 'none') continue;
    if (el.closest('.hoverlayer')) continue;
    // The text's own rectangle as drawn (turned, for turned tick labels): its
    // corners on the page. The upright box around a turned label is much
    // bigger than the label and would overlap its neighbours' boxes.
    const local = el.getBBox(), m = el.getScreenCTM();
    const quad = [[local.x, local.y], [local.x + local.width, local.y], [local.x + local.width, local.y + local.height],
                  [local.x, local.y + local.height]].map(([x, y]) => { const q = new DOMPoint(x, y).matrixTransform(m); return [q.x, q.y]; });
    texts.push({text: el.textContent, role: role(el), box: box(r), quad, clipped: clipped(el)});
  }
  const plots = [...document.querySelectorAll('.draglayer rect.nsewdrag')].map(r => box(r.getBoundingClientRect()));
  const legend = document.querySelector('.legend .bg');
  const fills = sel => [...document.querySelectorAll(sel)].map(p => p.style.fill).filter(Boolean);
  const points = [...document.querySelectorAll('.scatterlayer .trace')].map(t =>
    [...t.querySelectorAll('path.point')].map(p => p.getAttribute('transform')));
  return {figure, texts, plots, legend: legend ? box(legend.getBoundingClientRect()) : null,
          bars: fills('.barlayer .bars path'),
          swatches: [...document.querySelectorAll('.legend .traces')].map(t => ({
            text: t.querySelector('text').textContent, fill: (t.querySelector('.legendpoints path') || {style: {}}).style.fill})),
          points};
}"""


def _overlap(a: dict[str, float], b: dict[str, float], slack: float = 1.0) -> bool:
    return min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > slack and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > slack


def _quads_overlap(a: list[list[float]], b: list[list[float]], slack: float = 1.0) -> bool:
    """Whether two convex quadrilaterals overlap by more than `slack` px
    (separating axis test: no edge normal of either separates them)."""
    for quad in (a, b):
        for i in range(4):
            (x0, y0), (x1, y1) = quad[i], quad[(i + 1) % 4]
            length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5 or 1.0
            nx, ny = (y0 - y1) / length, (x1 - x0) / length
            pa = [x * nx + y * ny for x, y in a]
            pb = [x * nx + y * ny for x, y in b]
            if min(max(pa), max(pb)) - max(min(pa), min(pb)) <= slack:
                return False
    return True


def _inside(inner: dict[str, float], outer: dict[str, float], slack: float = 1.0) -> bool:
    return (inner["x0"] >= outer["x0"] - slack and inner["y0"] >= outer["y0"] - slack
            and inner["x1"] <= outer["x1"] + slack and inner["y1"] <= outer["y1"] + slack)


def layout_problems(geometry: dict[str, Any]) -> list[str]:
    """What is cut off or drawn over something else, in words."""
    problems = []
    texts = geometry["texts"]
    for t in texts:
        if not _inside(t["box"], geometry["figure"]):
            problems.append(f"{t['role']} {t['text']!r} is cut off by the figure's edge")
        if t["role"] == "data" and t["clipped"] and not any(_inside(t["box"], plot) for plot in geometry["plots"]):
            problems.append(f"{t['role']} {t['text']!r} is cut off by the plot area")
        if t["role"] in ("xtick", "ytick", "axistitle"):
            for plot in geometry["plots"]:
                if _overlap(t["box"], plot):
                    problems.append(f"{t['role']} {t['text']!r} is drawn over a plot area")
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if _quads_overlap(a["quad"], b["quad"]):
                problems.append(f"{a['role']} {a['text']!r} overlaps {b['role']} {b['text']!r}")
    legend = geometry["legend"]
    if legend is not None:
        if not _inside(legend, geometry["figure"]):
            problems.append("the legend is cut off by the figure's edge")
        for t in texts:
            if t["role"] != "legend" and _overlap(legend, t["box"]):
                problems.append(f"the legend covers {t['role']} {t['text']!r}")
    return problems


@pytest.fixture
def render(tmp_path_factory):  # type: ignore[no-untyped-def]
    """render(name, fig, width) -> the geometry of the figure as drawn."""
    # Per test, not per module: a sync Playwright still open here would make
    # the next test's own (the Voila page of the TraceBrowser test) refuse to start.
    folder = tmp_path_factory.mktemp("figures")
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())

        def _render(name: str, fig: Any, width: int | None = None) -> dict[str, Any]:
            if width is not None:
                fig.update_layout(width=width)
            path = folder / f"{name}.html"
            fig.write_html(str(path), include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
            page.goto(path.as_uri())
            page.wait_for_selector(".svg-container .main-svg")
            geometry = page.evaluate(_GEOMETRY)
            shot = folder / f"{name}.png"
            page.locator(".plotly-graph-div").screenshot(path=str(shot))
            print(f"screenshot: {shot}")
            return geometry

        try:
            yield _render
        finally:
            browser.close()


def _run(coro: Any) -> Any:
    """Run a coroutine to build a figure's data. Playwright's sync API keeps
    a loop running in this thread, so it runs in a thread of its own."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _assert_clean(geometry: dict[str, Any]) -> None:
    problems = layout_problems(geometry)
    assert problems == [], "\n".join(problems)


# ---- the figures, built as the notebooks build them --------------------------------


class Picky(Arithmetic):
    @rk.metric
    def answer_is_even(self, trace: rk.Trace) -> float:
        if self.data.operation == "mul":
            raise ValueError("undefined for products")
        return float(self.data.answer % 2 == 0)


async def _panel_chart() -> Any:
    ro = NotebookRollout(demo_agent(limits={"max_turns": 4}), arithmetic_tasks(3)[0])
    await ro.open_async()
    await ro.step_async()
    await ro.step_async("And 7 boxes with 6 pens each?")
    chart = rk.plots.LiveBudgetBurn(ro, width=460, height=420)  # as the panel makes it
    await ro.close_async()
    return chart


@pytest.mark.parametrize("width", [460, 700])
def test_budget_burn_legend_is_clear_of_the_axis_title(render, width: int) -> None:  # type: ignore[no-untyped-def]
    chart = _run(_panel_chart())
    geometry = render(f"budget-burn-{width}", chart.figure, width)
    roles = {t["role"] for t in geometry["texts"]}
    assert {"legend", "axistitle", "xtick", "ytick", "annotation", "title"} <= roles
    _assert_clean(geometry)
    chart.close()


@pytest.mark.parametrize("width", [600, 900])
def test_rewards_names_are_written_once_under_the_lower_plot_and_not_cut_off(render, width: int) -> None:  # type: ignore[no-untyped-def]
    async def traces() -> list[rk.Trace]:
        return list(await asyncio.gather(*(demo_agent().run(Picky(t.data)) for t in arithmetic_tasks(6))))

    live = rk.plots.LiveRewards(_run(traces()))
    geometry = render(f"live-rewards-{width}", live.figure, width)
    names = [t["text"] for t in geometry["texts"] if t["role"] == "xtick"]
    assert sorted(names) == sorted(["reward.correct", "metric.answer_is_even", "metric.reply_words",
                                    "metric.used_calculator", "metric.tool_call_success_rate"])
    _assert_clean(geometry)


def test_branches_write_reward_and_stop_in_full(render) -> None:  # type: ignore[no-untyped-def]
    async def branches() -> list[rk.Trace]:
        original = await support_agent().run(support_tasks(3)[2], user=toy_customer())
        out = [original]
        for turn in (1, 2):
            fork = await rk.fork(original, turn, agent=support_agent(careful=True))
            await rk.converse(fork, toy_customer())
            out.append(await fork.close())
        return out

    geometry = render("branches", rk.plots.branches(_run(branches())))
    ends = [t["text"] for t in geometry["texts"] if t["role"] == "data"]
    assert len(ends) == 3 and all(re.fullmatch(r"reward [01] · done", e) for e in ends), ends
    _assert_clean(geometry)


def test_stop_reasons_colours_and_words_agree(render) -> None:  # type: ignore[no-untyped-def]
    async def traces() -> list[rk.Trace]:
        done = [await demo_agent().run(t) for t in arithmetic_tasks(4)]
        limited = [await demo_agent(limits={"max_total_tokens": 36}).run(t) for t in arithmetic_tasks(3)]
        failed = [await rk.Agent(model=rk.ScriptedModel([], name="mute")).run(arithmetic_tasks(1)[0])]
        return done + limited + failed

    fig = rk.plots.stop_reasons(_run(traces()))
    geometry = render("stop-reasons", fig)
    _assert_clean(geometry)
    title = next(t["text"] for t in geometry["texts"] if t["role"] == "title")
    assert title == "what ended 8 rollouts"
    assert not re.search(r"orange|blue|red|green", title)
    said = {s["fill"]: s["text"] for s in geometry["swatches"]}
    bars = dict(zip(fig.data[0].x, geometry["bars"]))
    assert set(bars) == {"done", "max_total_tokens", "ProviderError"}
    assert said[bars["done"]] == "the agent finished"
    assert said[bars["max_total_tokens"]] == "a limit"
    assert said[bars["ProviderError"]] == "a failure or abort"


def _flawed_and_careful_runs() -> tuple[Any, Any]:
    """The demo agent's flawed model and the careful one on 12 arithmetic tasks."""
    async def runs() -> tuple[Any, Any]:
        tasks = arithmetic_tasks(12)
        a = await rk.evaluate_async(demo_agent(), tasks, progress=False)
        b = await rk.evaluate_async(demo_agent(model=careful_calculator_model()), tasks, progress=False)
        return a, b

    return _run(runs())


def test_compare_draws_tasks_with_the_same_values_as_one_counted_point(render) -> None:  # type: ignore[no-untyped-def]
    a, b = _flawed_and_careful_runs()
    geometry = render("compare", rk.plots.compare(rk.compare(a, b)))
    _assert_clean(geometry)
    per_task = geometry["points"][-1]  # the last scatter: the tasks
    assert len(per_task) == len(set(per_task)), "two per-task points drawn on the same spot"
    labels = [t["text"] for t in geometry["texts"] if t["role"] == "data"]
    counted = sum(int(label.split()[0]) for label in labels)
    assert counted + (len(per_task) - len(labels)) == 12
    assert sorted(labels) == ["4 tasks", "8 tasks"]  # 4 subtractions B got right, 8 both got right


@pytest.mark.parametrize("figure", ["forest", "reward_distribution", "phase_timing"])
def test_the_view_pages_figures_read_cleanly_at_the_width_it_draws_them(render, figure: str) -> None:  # type: ignore[no-untyped-def]
    """rollkit view's charts (rollkit.notebook.viewpage draws the forest 900
    px wide, the run's two charts 600): the long signal names and the
    W / T / L beside each row are neither cut off nor drawn over anything."""
    a, b = _flawed_and_careful_runs()
    comparison = rk.compare(a, b)
    fig, width = {"forest": (lambda: rk.plots.forest(comparison), 900),
                  "reward_distribution": (lambda: rk.plots.reward_distribution(b.traces), 600),
                  "phase_timing": (lambda: rk.plots.phase_timing(b.traces), 600)}[figure]
    geometry = render(figure, fig(), width)
    _assert_clean(geometry)
    if figure == "forest":
        beside = [t["text"] for t in geometry["texts"] if t["role"] == "annotation"]
        shown = [s for s in comparison.signals if s.diff is not None]
        assert sorted(beside) == sorted(["W / T / L"] + [f"{s.wins} / {s.ties} / {s.losses}" for s in shown])


# Where the header's and the first row's text start, their fonts, and the
# width of each prefix of each text as drawn in its own font.
_TABLE_GEOMETRY = """() => {
  const pre = [...document.querySelectorAll('pre')].find(p => p.textContent.startsWith('task '));  // the header
  const option = document.querySelector('.rk-trace-table select option');
  const style = e => getComputedStyle(e);
  const start = el => el.getBoundingClientRect().left + parseFloat(style(el).borderLeftWidth)
                      + parseFloat(style(el).paddingLeft);
  const canvas = document.createElement('canvas').getContext('2d');
  const widths = (el, text) => {
    canvas.font = `${style(el).fontSize} ${style(el).fontFamily}`;
    return [...text].map((_, i) => canvas.measureText(text.slice(0, i)).width);
  };
  const header = pre.textContent, row = option.textContent.replace(/\u00a0/g, ' ');
  return {header, row, starts: [start(pre), start(option)],
          fonts: [style(pre).fontFamily + ' ' + style(pre).fontSize, style(option).fontFamily + ' ' + style(option).fontSize],
          header_widths: widths(pre, header), row_widths: widths(option, row)};
}"""


@pytest.mark.parametrize("voila", ["trace_browser.ipynb"], indirect=True)
def test_trace_browser_header_lines_up_with_its_rows(voila, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with _page(voila, tmp_path, "trace-browser") as page:
        playwright_sync.expect(page.locator(".rk-trace-table select option")).to_have_count(6)
        table = page.evaluate(_TABLE_GEOMETRY)
    assert table["fonts"][0] == table["fonts"][1]
    header_start, row_start = table["starts"]
    assert abs(header_start - row_start) <= 1, table["starts"]
    # Each column name starts over the first character of its column.
    row = table["row"]
    assert row.startswith("arith-0-000      ok   ")
    for name in ("ok", "reward", "turns", "tokens", "stop", "trace"):
        # A left-aligned column lines up at its first character, a right-aligned one at its last.
        first = table["header"].index(f" {name}") + 1
        at = first if name in ("ok", "stop", "trace") else first + len(name) - 1
        x_header = header_start + table["header_widths"][at]
        x_row = row_start + table["row_widths"][at]
        assert abs(x_header - x_row) <= 1, f"column {name}: header at {x_header:.1f} px, row at {x_row:.1f} px"
