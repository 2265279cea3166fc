"""An export is whole or absent under its name (rollkit.interop.exports.branches.RowFile):
a real SIGINT in the middle of writing, in a real subprocess, leaves the file
that was there before untouched and no temporary behind; so does an export
that fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import rollkit as rk
from rollkit.examples.arithmetic import arithmetic_tasks, demo_agent

_INTERRUPTED = textwrap.dedent("""
    import os, signal, sys
    import rollkit as rk
    from rollkit.interop.exports import sft

    real, made = sft.training_row, []

    def row(*args, **options):
        made.append(1)
        if len(made) == 30:  # the first groups are on disk: Ctrl-C now
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **options)

    sft.training_row = row
    rk.export(sys.argv[1], sys.argv[2], format="sft", rows_per_group=8)
    print("finished")
""")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("atomic") / "run"
    rk.evaluate(demo_agent(), arithmetic_tasks(60), progress=False, out=folder)
    return folder


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_sigint_in_the_middle_of_an_export_leaves_the_old_file_and_no_part(run_folder, tmp_path, suffix):
    target = tmp_path / f"rows{suffix}"
    target.write_bytes(b"the export of yesterday")
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED, str(run_folder), str(target)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr and "finished" not in done.stdout
    assert target.read_bytes() == b"the export of yesterday"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    # The same export, not interrupted, replaces it whole.
    rk.export(run_folder, target, format="sft", rows_per_group=8)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, "export_meta.json"])
    assert len(rk.open_run(run_folder)) == 60
    rows = target.read_text().splitlines() if suffix == ".jsonl" else None
    assert rows is None or len(rows) == 60


def test_a_failed_rl_export_leaves_the_old_file_and_no_part(run_folder, tmp_path):
    target = tmp_path / "tokens.parquet"
    target.write_bytes(b"old")
    with pytest.raises(rk.UsageError, match="hold no token ids"):
        rk.export(run_folder, target, format="rl")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.parquet"]
