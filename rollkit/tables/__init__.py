"""Tables: a run on disk and its columnar store.

What this room owns: the run folder (`runfolder`: manifest, trace files,
resume, its record types), the one row engine that turns trace lines into
table rows (`rows`: column vocabulary, the reward and token-total rules), the
columnar store (`columns`: Parquet parts built by Python or natively by
DuckDB in `nativebuild`; `livetables`: parts built as a run writes), and a
run opened lazily from its tables (`lazyrun`: `rk.open_run`, SQL, text
search, one trace at a time).

It imports the core and the programs layer only: no analysis, no other
tool's format, no running of rollouts, never the notebook. The names below
load on first use (pyarrow and DuckDB stay unloaded until a table is read).
"""

from __future__ import annotations

from ..core.lazy import lazy_names

_LAZY = {
    "open_run": (".lazyrun", "open_run"),
    "LazyRun": (".lazyrun", "LazyRun"),
    "RunFolderError": (".runfolder", "RunFolderError"),
    "GroupSignal": (".runfolder", "GroupSignal"),
}

__all__ = list(_LAZY)

__getattr__ = lazy_names(__name__, globals(), _LAZY)
