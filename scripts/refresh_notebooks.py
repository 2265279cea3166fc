"""Re-run notebooks top to bottom and store their outputs.

    python scripts/refresh_notebooks.py notebooks/04_users_and_forks.ipynb [...]

Each notebook runs in a fresh kernel from its own folder. Text and HTML
outputs are kept, for a reader on GitHub to learn from; widget and plotly
outputs are dropped, with the widgets' saved state, because they need a live
kernel to show anything (the test command runs every notebook under nbval,
which compares none of them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

LIVE = ("application/vnd.jupyter.widget-view+json", "application/vnd.plotly.v1+json")


def refresh(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in cell.outputs if not any(kind in o.get("data", {}) for kind in LIVE)]
    # The widgets' saved state serves only the widget outputs dropped above (megabytes of it for a panel).
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    print(f"refreshed {path}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(Path(name))
