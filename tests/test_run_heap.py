"""An evaluation leaves the heap it started with out of its full collections
(rollkit.core.gcpause.older_heap_left_alone): what existed before is frozen for
the run and back in the oldest generation after it, a cycle among it that dies
during the run is freed after it, and a freeze the caller made is left alone.
A heavy module rollkit imports on first use is imported with the collector
paused, and what it made is old once it is in."""

from __future__ import annotations

import asyncio
import gc
import weakref

import rollkit as rk
from rollkit.core.gcpause import older_heap_left_alone
from rollkit.examples import arithmetic_tasks, demo_agent


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_heap_before_a_run_is_frozen_for_its_length_and_only_then():
    seen: list[int] = []
    agent = demo_agent()
    agent.subscribe(lambda *event: seen.append(gc.get_freeze_count()))
    before = gc.get_freeze_count()
    rk.evaluate(agent, arithmetic_tasks(3), progress=False)
    assert before == 0 and gc.get_freeze_count() == 0
    assert seen and min(seen) > 0  # every event of the run saw the older heap frozen


def test_a_cycle_that_dies_during_the_block_is_freed_after_it():
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    with older_heap_left_alone():
        del cycle
        gc.collect()
        assert alive() is not None  # frozen: no collection walks it during the block
    gc.collect()
    assert alive() is None


def test_concurrent_runs_share_one_freeze_and_the_last_to_end_lifts_it():
    async def both() -> list[int]:
        counts: list[int] = []
        agent = demo_agent()
        agent.subscribe(lambda *event: counts.append(gc.get_freeze_count()))
        await asyncio.gather(rk.evaluate_async(agent, arithmetic_tasks(4), progress=False),
                             rk.evaluate_async(agent, arithmetic_tasks(2), progress=False))
        return counts

    counts = asyncio.run(both())
    assert counts and min(counts) > 0
    assert gc.get_freeze_count() == 0


def test_a_freeze_the_caller_made_is_neither_added_to_nor_lifted():
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        with older_heap_left_alone():
            made_inside = [_Cycle() for _ in range(10)]
            assert gc.get_freeze_count() == mine
        assert gc.get_freeze_count() == mine and len(made_inside) == 10
    finally:
        gc.unfreeze()


def test_a_module_imported_on_first_use_is_imported_with_the_collector_paused(tmp_path, monkeypatch):
    # An import keeps what it makes: walking it while pandas or DuckDB loads
    # (and again as it ages) is the collector's time for nothing.
    from rollkit.core.dependencies import _Deferred

    (tmp_path / "rollkit_probe_module.py").write_text(
        "import gc\nENABLED = gc.isenabled()\nMADE = [[] for _ in range(10)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    was = gc.isenabled()
    try:
        gc.enable()
        probe = _Deferred("rollkit_probe_module")
        assert probe.ENABLED is False
        assert gc.isenabled()
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert id(probe.MADE) in oldest and id(probe.MADE[0]) in oldest
    finally:
        (gc.enable if was else gc.disable)()

