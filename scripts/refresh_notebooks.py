"""Re-run notebooks top to bottom and store outputs a reader without a kernel learns from.

    python scripts/refresh_notebooks.py notebooks/04_users_and_forks.ipynb [...]

Each notebook runs in a fresh kernel from its own folder. Text, HTML and
tables are kept as they are. A live output needs a kernel to show anything,
and its saved widget state is megabytes (every plotly FigureWidget carries
plotly.js, ~5 MB), so it is replaced by what it showed, drawn once: a plotly
figure becomes a PNG (kaleido, with the machine's Chromium), a widget its
HTML parts and the PNG of each figure inside it; the widget state itself is
not saved. tests/test_notebook_files.py fails on a notebook over 1 MB or one
that still holds widget state. Needs kaleido (`pip install kaleido`; it
drives the Chromium already installed for the browser tests).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
# A width for figures that do not set one: about a notebook column.
FIGURE_WIDTH = 760


def figure_png(figure: dict[str, Any]) -> dict[str, Any]:
    """A display_data output holding the figure (plotly's JSON) as a PNG."""
    import plotly.graph_objects as go

    fig = go.Figure(data=figure.get("data", []), layout=figure.get("layout", {}))
    width = fig.layout.width or FIGURE_WIDTH
    png = fig.to_image(format="png", width=width, height=fig.layout.height or 420, scale=1)
    return nbformat.v4.new_output("display_data", data={
        "image/png": base64.b64encode(png).decode("ascii"),
        "text/plain": "<the figure as it was drawn; run the notebook for the live one>",
    })


def _html(parts: list[str]) -> dict[str, Any]:
    return nbformat.v4.new_output("display_data", data={"text/html": "\n".join(parts),
                                                        "text/plain": "<a widget, as it was drawn>"})


# Run last, in the notebook's kernel: every widget still open, as it is at
# the end (a live figure's saved state is only its first drawing: its
# updates travel as messages), printed as one JSON line after MARK.
MARK = "ROLLKIT-WIDGETS "
DUMP = """
import json as _json, ipywidgets as _widgets
def _rollkit_widgets():
    seen = {}
    for model_id, widget in list(_widgets.widgets.widget._instances.items()):
        if hasattr(widget, "to_plotly_json"):
            seen[model_id] = {"figure": _json.loads(widget.to_json())}
        elif isinstance(widget, _widgets.HTML):
            seen[model_id] = {"html": widget.value}
        elif isinstance(widget, _widgets.Box):
            seen[model_id] = {"children": [child.model_id for child in widget.children]}
    return seen
print(%r + _json.dumps(_rollkit_widgets()))
""" % MARK


def widget_snapshot(widgets: dict[str, Any], model_id: str) -> list[dict[str, Any]]:
    """What a widget showed when the notebook ended, as static outputs: the
    HTML of its HTML parts and each plotly figure inside it as a PNG, in
    the order they are laid out (controls such as buttons are left out)."""
    outputs: list[dict[str, Any]] = []
    html: list[str] = []

    def walk(ref: str) -> None:
        widget = widgets.get(ref)
        if widget is None:
            return
        if "children" in widget:
            for child in widget["children"]:
                walk(child)
        elif widget.get("html"):
            html.append(widget["html"])
        elif "figure" in widget:
            if html:
                outputs.append(_html(html[:]))
                html.clear()
            outputs.append(figure_png(widget["figure"]))

    walk(model_id)
    if html:
        outputs.append(_html(html))
    return outputs


def static_outputs(cell_outputs: list[dict[str, Any]], widgets: dict[str, Any]) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    for output in cell_outputs:
        data = output.get("data", {})
        if WIDGET in data:
            kept.extend(widget_snapshot(widgets, data[WIDGET]["model_id"]))
        elif PLOTLY in data:
            kept.append(figure_png(data[PLOTLY]))
        else:
            kept.append(output)
    return kept


def refresh(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(DUMP))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    dump = nb.cells.pop()
    printed = "".join(o.get("text", "") for o in dump.outputs if o.get("name") == "stdout")
    widgets = json.loads(printed.split(MARK, 1)[1])
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = static_outputs(cell.outputs, widgets)
    nb.metadata.pop("widgets", None)  # the saved widget state: megabytes, and only the first drawing
    nbformat.write(nb, path)
    print(f"refreshed {path}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(Path(name))
