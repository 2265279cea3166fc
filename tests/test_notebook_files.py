"""The saved notebooks are small and show a reader without a kernel what they do.

A notebook is read first on GitHub or nbviewer, where no kernel runs: its
saved outputs are what that reader learns from, and its size is what they
wait for. Live widgets saved their state (every plotly FigureWidget carried
plotly.js, ~5 MB: notebooks 04 and 08 were 5.2 and 10.2 MB) and showed
nothing there. scripts/refresh_notebooks.py saves a widget as what it
showed (HTML, a PNG of each figure) and no widget state; these tests hold
every notebook to that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LIMIT = 1_000_000  # bytes
LIVE = ("application/vnd.jupyter.widget-view+json", "application/vnd.plotly.v1+json")
# An output that makes the reader's browser fetch from another host: a
# script, stylesheet, image or frame from http(s) or a protocol-relative URL.
FETCH = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//", re.I)


def _outputs(notebook: Path) -> list[dict]:
    cells = json.loads(notebook.read_text())["cells"]
    return [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 8


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_a_saved_notebook_is_under_one_megabyte(notebook: Path) -> None:
    size = notebook.stat().st_size
    assert size < LIMIT, (f"{notebook.name} is {size / 1e6:.1f} MB, over the 1 MB limit: refresh it with "
                          f"scripts/refresh_notebooks.py, which saves widgets as pictures, not their state")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_a_saved_notebook_holds_no_widget_state_and_no_live_only_output(notebook: Path) -> None:
    data = json.loads(notebook.read_text())
    assert "widgets" not in data["metadata"], f"{notebook.name} saved its widget state"
    live = [kind for o in _outputs(notebook) for kind in LIVE if kind in o.get("data", {})]
    assert live == [], f"{notebook.name} has outputs only a live kernel draws: {live}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_a_saved_notebook_shows_its_outputs_and_fetches_from_no_host(notebook: Path) -> None:
    outputs = _outputs(notebook)
    shown = [o for o in outputs if o["output_type"] in ("stream", "display_data", "execute_result")]
    assert len(shown) >= 3, f"{notebook.name} was saved without its outputs: refresh it with scripts/refresh_notebooks.py"
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert FETCH.findall(html) == [], f"{notebook.name} has an output that loads from another host"


def test_the_fetch_check_can_fail() -> None:
    assert FETCH.search('<script src="https://cdn.plot.ly/plotly.min.js"></script>')
    assert FETCH.search("<link rel=stylesheet href=//fonts.example/x.css>")
    assert not FETCH.search('<img src="data:image/png;base64,AAAA">')
    assert not FETCH.search('<a href="https://example.org">a link the reader may follow</a>')
