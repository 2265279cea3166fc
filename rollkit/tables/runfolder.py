"""The run folder format: what `rk.evaluate(..., out=DIR)` writes, and reading it back.

A run folder (`out=DIR`) holds:
- `manifest.json`: rollkit version, run id, start time, agent config, the task
  set (keys and a fingerprint), repeats, group scorer names;
- `traces.jsonl`: one finished trace per line, in finishing order;
- `groups.jsonl`: one line per (task, group scorer), see `GroupSignal`;
- `user_traces.jsonl`: when a model played the user (`rk.AgentUser`), its
  own traces, each written just before the trace of its rollout and linked
  to it by `info["assistant_trace_id"]`; one whose rollout is not in
  traces.jsonl (a crash between the two writes) is dropped on reading.

This module owns that format: building and writing the manifest, preparing a
folder for a new run or a resume (refusing another run's folder or a damaged
one; a resume of a missing or empty folder starts a new run there, with a
warning, so `--resume` also works for a first run), cutting a torn tail (a
write cut short by a crash) before appending, and reading a folder back
(manifest, traces, the latest group signal per task and scorer). `runs_in(folder)`
lists the runs a folder of runs holds (what `rollkit view FOLDER` lists).

This module does not run rollouts or append finished traces and group signals
as they come (rollkit.runs.evaluation does), judge groups (rollkit.analysis.groups does) or
parse a trace line (rollkit.core.store does).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.agent import Agent
from ..core.errors import UsageError
from ..core.store import TraceFileError, load, trace_of_line
from ..core.task import Task
from ..core.trace import Trace

__all__ = [
    "MANIFEST",
    "TRACES",
    "GROUPS",
    "USER_TRACES",
    "RunFolderError",
    "RunFolder",
    "new_manifest",
    "prepare_folder",
    "read_folder",
    "latest",
    "is_run_folder",
    "runs_in",
    "TRACE_FILE_SUFFIXES",
]

MANIFEST = "manifest.json"
TRACES = "traces.jsonl"
GROUPS = "groups.jsonl"
USER_TRACES = "user_traces.jsonl"

log = logging.getLogger("rollkit")

# What a run folder holds from its first moment on (live.jsonl: rollkit.runs.live), and an A/B test's log
# (rollkit.runs.ab.AB_LOG); and the names of the trace files of other tools a folder of runs may hold.
_RUN_MARKERS = (MANIFEST, TRACES, "live.jsonl", "ab.jsonl")
TRACE_FILE_SUFFIXES = (".jsonl", ".json", ".eval")


def is_run_folder(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a folder a run (or an A/B test) writes: it holds one of their files."""
    path = Path(path)
    return path.is_dir() and any((path / name).exists() for name in _RUN_MARKERS)


def runs_in(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """The runs directly in `folder`, name -> path: its run folders (and A/B
    test folders), its trace files (by name: .jsonl, .json, .eval; whether
    one reads is for its reader to say) and its verifiers output folders
    (their results.jsonl, named by the folder). Hidden entries (a run's
    tables, .rollkit) are not runs. Empty when `folder` is itself a run
    folder or not a folder."""
    folder = Path(folder)
    if not folder.is_dir() or is_run_folder(folder):
        return {}
    found = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if is_run_folder(entry) or (entry.is_file() and entry.suffix in TRACE_FILE_SUFFIXES):
            found[entry.name] = entry
        elif entry.is_dir() and (entry / "results.jsonl").is_file():
            found[entry.name] = entry / "results.jsonl"
    return found


class RunFolderError(UsageError, ValueError):
    """A run folder cannot be used as asked (another run's, or damaged)."""


def _fingerprint(tasks: list[Task]) -> str:
    digest = hashlib.sha1()
    for task in tasks:
        blob = json.dumps([type(task).__qualname__, task.key, task.data.model_dump(mode="json")], sort_keys=True, default=str)
        digest.update(blob.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _agent_config(agent: Agent) -> dict[str, Any]:
    return {**agent.describe(), "limits": agent.limits.model_dump(), "timeouts": agent.timeouts.model_dump()}


def new_manifest(agent: Agent, tasks: list[Task], repeats: int, group_scorers: list[str]) -> dict[str, Any]:
    """The manifest of a new run (a resume keeps the folder's run id and start)."""
    from ..core import __version__

    return {
        "rollkit": __version__,
        "run_id": uuid.uuid4().hex[:12],
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "agent": _agent_config(agent),
        "tasks": {"count": len(tasks), "fingerprint": _fingerprint(tasks), "keys": [t.key for t in tasks]},
        "repeats": repeats,
        "group_scorers": group_scorers,
    }


@dataclass
class GroupSignal:
    """One group scorer's judgement of all the traces of one task. `signal`
    is the scorer's name, or a key of the mapping it returned; `scorer` is
    the scorer's name (None in lines written before it was recorded: then
    it is `signal`), which is how a resume knows which scorers already ran."""

    example_id: str
    signal: str
    value: float | None
    n: int
    error: str | None = None
    scorer: str | None = None

    @property
    def scorer_name(self) -> str:
        return self.scorer if self.scorer is not None else self.signal


def _read_groups(path: Path, stacklevel: int = 3) -> list[GroupSignal]:
    if not path.exists():
        return []
    groups = []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            groups.append(GroupSignal(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            if number == len(lines):  # torn by a crash: recomputed on resume
                warnings.warn(f"{path}: line {number} is torn (a write cut short); skipped", stacklevel=stacklevel)
                continue
            raise RunFolderError(f"{path}: line {number} is not a group signal ({exc})") from None
    return groups


def latest(groups: list[GroupSignal]) -> list[GroupSignal]:
    """One signal per (task, name): the last written. groups.jsonl is
    append-only, so a group judged again after a resume with more repeats
    appears twice; the later judgement saw all the repeats."""
    last = {(g.example_id, g.signal): g for g in groups}
    return [g for g in groups if last[(g.example_id, g.signal)] is g]


def read_folder(path: str | os.PathLike[str], *, traces: bool = True) -> RunFolder:
    """Read a run folder as written: its manifest, traces (in the order
    written) and latest group signals. A torn last line is skipped with a
    warning; a bad line in the middle raises `TraceFileError` naming it; a
    damaged manifest or groups.jsonl raises `RunFolderError` naming the file.
    `traces=False` reads neither traces nor user traces (a lazy reader does)."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"no run folder at {folder}")
    manifest_path = folder / MANIFEST
    manifest = _read_manifest(manifest_path) if manifest_path.exists() else {}
    has_traces = (folder / TRACES).exists()
    traces = load(folder / TRACES) if has_traces and traces else []
    if not manifest and not has_traces:
        raise FileNotFoundError(f"{folder} is not a run folder: it holds neither {MANIFEST} nor {TRACES}")
    # stacklevel 4: a torn-line warning names the caller of load_run
    groups = latest(_read_groups(folder / GROUPS, stacklevel=4))
    return RunFolder(folder, manifest, traces, groups, _read_user_traces(folder, traces) if traces else [])


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, or not UTF-8
        raise RunFolderError(f"{path} is not valid JSON ({exc}); restore it, or choose another out folder") from None
    if not isinstance(manifest, dict):
        raise RunFolderError(
            f"{path} holds a JSON {type(manifest).__name__}, not a rollkit manifest (an object); "
            "restore it, or choose another out folder"
        )
    return manifest


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found = []
    if old.get("tasks", {}).get("fingerprint") != new["tasks"]["fingerprint"]:
        found.append(
            f"task set ({old.get('tasks', {}).get('count')} tasks there, {new['tasks']['count']} here, "
            "or the same count with other keys or data)"
        )
    if old.get("agent") != new["agent"]:
        found.append(f"agent ({old.get('agent')} there, {new['agent']} here)")
    return found


def _repair_torn_tail(path: Path) -> None:
    """Make the file end at a line boundary before appending. A last line
    without its newline was a write cut short; `load` skipped it (with a
    warning), so it is cut off and its rollout runs again. Appending after it
    would otherwise glue the next trace onto a broken line in the middle."""
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        try:
            with warnings.catch_warnings():  # fields of a newer rollkit: still a whole line, kept
                warnings.simplefilter("ignore")
                trace_of_line(tail)
        except ValueError:
            f.truncate(cut)
            return
        f.write(b"\n")  # complete JSON that lost only its newline: keep it


@dataclass
class RunFolder:
    """A run folder as read or prepared for writing: what is already there."""

    path: Path
    manifest: dict[str, Any]
    traces: list[Trace] = field(default_factory=list)
    groups: list[GroupSignal] = field(default_factory=list)
    user_traces: list[Trace] = field(default_factory=list)


def _read_user_traces(folder: Path, traces: list[Trace]) -> list[Trace]:
    """The user traces whose rollout finished (its trace is in traces.jsonl)."""
    path = folder / USER_TRACES
    if not path.exists():
        return []
    finished = {t.id for t in traces}
    return [u for u in load(path, errors="skip") if u.info.get("assistant_trace_id") in finished]


def prepare_folder(out: Path, manifest: dict[str, Any], resume: bool) -> RunFolder:
    """Make `out` ready for this run: a new folder with its manifest, or, with
    `resume`, the same run's folder with its tails repaired and the manifest
    updated. `resume` on a folder without a manifest or traces (missing or
    empty) starts a new run there and logs "nothing to resume in DIR".
    Refuses (RunFolderError) anything else: a file, another run's folder,
    a damaged manifest or trace file, traces without a manifest, a folder
    that cannot be written (named, with the system's reason)."""
    try:
        folder = _prepare(out, manifest, resume)
        for name in (TRACES, GROUPS, USER_TRACES):  # what the run appends to must be writable too
            path = out / name
            if path.exists() and not os.access(path, os.W_OK):
                raise PermissionError(13, "Permission denied", str(path))
        return folder
    except OSError as exc:
        raise RunFolderError(
            f"cannot write the run folder {out}: {exc.strerror or exc}"
            f"{f' ({exc.filename})' if exc.filename and str(exc.filename) != str(out) else ''}; "
            "choose a folder you can write (out=..., rollkit eval --out DIR)"
        ) from None


def _prepare(out: Path, manifest: dict[str, Any], resume: bool) -> RunFolder:
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"out={str(out)!r} is a file; pass a folder (it will hold {MANIFEST} and {TRACES})")
    manifest_path = out / MANIFEST
    traces_path = out / TRACES
    if manifest_path.exists():
        old = _read_manifest(manifest_path)
        if not resume:
            raise RunFolderError(
                f"{out} already holds a run (run {old.get('run_id')}, started {old.get('started')}); "
                "pass resume=True (rollkit eval --resume) to continue it, or choose another out folder"
            )
        differs = _differences(old, manifest)
        if differs:
            raise RunFolderError(
                f"{out} holds another run: its {' and '.join(differs)} differ from this call; resume only "
                "continues the same run, so choose another out folder"
            )
        try:
            traces = load(traces_path) if traces_path.exists() else []
        except TraceFileError as exc:
            raise RunFolderError(
                f"cannot resume: {exc}. A bad line in the middle means the file was changed by something "
                f"other than rollkit; resume refuses to guess which rollouts finished. Fix or remove line "
                f"{exc.line} of {traces_path}"
            ) from None
        if traces_path.exists():
            _repair_torn_tail(traces_path)
        groups_path = out / GROUPS
        groups = _read_groups(groups_path)
        if groups_path.exists():
            _repair_group_tail(groups_path)
        # The run keeps its identity across resumes; repeats may grow.
        merged = {**old, "repeats": manifest["repeats"], "group_scorers": manifest["group_scorers"]}
        merged.setdefault("resumed", []).append(manifest["started"])
        _write_manifest(out, merged)
        user_traces = _read_user_traces(out, traces)
        if (out / USER_TRACES).exists():
            _repair_torn_tail(out / USER_TRACES)
        return RunFolder(out, merged, traces, groups, user_traces)
    if traces_path.exists():
        raise RunFolderError(
            f"{out} holds {TRACES} but no {MANIFEST}: it was not written by rollkit.evaluate; "
            "choose another out folder"
        )
    if resume:
        # Friendlier than refusing: `--resume` on a first run just runs it.
        # Said out loud, since a mistyped folder would otherwise quietly
        # start over instead of continuing the run the user meant.
        log.warning("nothing to resume in %s: starting a new run", out)
    out.mkdir(parents=True, exist_ok=True)
    _write_manifest(out, manifest)
    return RunFolder(out, manifest)


def _repair_group_tail(path: Path) -> None:
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, out / MANIFEST)

