"""Pausing the cyclic garbage collector around a bulk build, and only then.

Loading a big trace file, building the frames over it or writing its
columnar tables makes millions of objects and frees none; the cyclic
collector would walk the growing heap again and again, which costs a
big load or build a large share of its time (benchmarks/ measure it).
`paused()` turns it off for the length of such a call and puts it
back as it was: nested or concurrent pauses (threads) share one pause, and
the collector comes back on when the last one ends, only if it was on when
the first began, so a caller that turned it off keeps it off. It must
wrap a call that returns its result whole, never a generator (the caller's
code would then run with the collector off).

`paused(keep=True)` is for a block whose objects the caller keeps (rk.load's
traces): when the collector comes back on, every object then young is moved
to the oldest generation (gc.freeze then gc.unfreeze, two list splices)
instead of being walked as young at the next allocation and again as
middle-aged later: loaded traces are millions of container objects, and
that first walk alone is a visible pause. Objects other code made just before
are moved too: a cycle among them is collected by the next full collection
instead of a younger one, later but never lost. Not done while anything is
frozen (gc.get_freeze_count()): that would unfreeze what a caller froze on
purpose (before forking workers).

`older_heap_left_alone()` is for a long block that keeps most of what it
makes (an evaluation: every finished trace is kept for its result): each
full collection walks the whole heap, and one comes each time the old
generation has grown by a quarter, so a run that starts with a big heap
(modules, a notebook's loaded traces) pays for walking it again and again.
The objects there when the block starts are frozen (gc.freeze: out of
every collection) until it ends (gc.unfreeze: back in the oldest
generation); what the block makes is collected as ever. A cycle among the
older objects that dies during the block is freed at the first full
collection after it, so what it can hold up is bounded by the heap it
started with. Nested or concurrent blocks share one freeze; not done
while anything else is frozen. Nothing else here.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused", "older_heap_left_alone"]

_lock = threading.Lock()
_depth = 0
_resume = False
_keep = False


@contextmanager
def paused(*, keep: bool = False) -> Iterator[None]:
    """Run the block with the cyclic collector off (see the module);
    keep=True: the objects it makes are kept, and made old when it ends."""
    global _depth, _resume, _keep
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            _keep = False
            gc.disable()
        _depth += 1
    try:
        yield
        if keep:
            _keep = True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                if _keep and gc.get_freeze_count() == 0:
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


_frozen_lock = threading.Lock()
_frozen_depth = 0
_froze = False


@contextmanager
def older_heap_left_alone() -> Iterator[None]:
    """Run the block with the objects that exist when it starts left out
    of the cyclic collector's walks (see the module)."""
    global _frozen_depth, _froze
    with _frozen_lock:
        if _frozen_depth == 0:
            _froze = gc.isenabled() and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _frozen_depth += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_depth -= 1
            if _frozen_depth == 0 and _froze:
                _froze = False
                gc.unfreeze()
