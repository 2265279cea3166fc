"""What an ipywidgets `Output` shows, set as state, never captured.

`show(output, *objects)` replaces what `output` shows with `objects`, each
as `display()` would show it (the object's own mime bundle, else the
kernel's display formatter), in one state update. rollkit's widgets fill their `Output` widgets only this
way, never with `with output:` or `output.clear_output()`, which capture.

Why: a captured output is mirrored by a headless client. nbclient (and so
`jupyter execute`, nbconvert, papermill, Voila) keeps its own copy of every
`Output` widget that captures, and sends that copy's new state to the kernel
on the shell channel while it waits for the running cell's reply.
jupyter_client's `Session.send` writes it on a blocking shadow of the
client's asyncio socket; that write takes up the socket's wake-up, so a reply
that arrives in the same moment is not seen until the cell's timeout ends the
wait (jupyter/nbclient#312, jupyter/jupyter_client#1059, both open). The
kernel has replied and sits idle; the notebook stalls for the whole timeout.
A state set from the kernel publishes nothing the client mirrors or answers.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..core.dependencies import ipython, ipython_formatters

__all__ = ["show"]


def show(output: widgets.Output, *objects: Any) -> None:
    """`output` shows `objects` (nothing if none), each as `display(obj)`
    would show it, replacing what it showed."""
    output.outputs = tuple({"output_type": "display_data", **_bundle(obj)} for obj in objects)


def _bundle(obj: Any) -> dict[str, Any]:
    """`obj`'s data and metadata, as `display(obj)` would publish them."""
    # Ask an object that describes itself for its bundle first: plotly's
    # figures also display themselves (_ipython_display_), and IPython's
    # formatter lets them, which publishes them as the cell's output (not
    # this widget's) and returns nothing.
    describe = getattr(obj, "_repr_mimebundle_", None)
    if describe is not None:
        found = describe()
        data, metadata = found if isinstance(found, tuple) else (found, {})
    else:
        shell = ipython.get_ipython()
        # Outside IPython (a script, a test) there is no shell to ask.
        formatter = shell.display_formatter if shell is not None else ipython_formatters.DisplayFormatter()
        data, metadata = formatter.format(obj)
    return {"data": data, "metadata": metadata or {}}
