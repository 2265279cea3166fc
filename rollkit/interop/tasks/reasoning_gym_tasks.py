"""reasoning-gym datasets as rollkit tasks, scored by the dataset's own `score_answer`.

Each entry's question is the prompt (under reasoning-gym's default system
prompt, which asks for the answer between <answer> tags, unless the caller
names another). The reward `score_answer` is the dataset's own
`score_answer(answer, entry)` on the answer as reasoning-gym's
`extract_answer` takes it from the final reply (None when the reply has no
tags, which every scorer reads as 0). A task's key is the dataset name, its
seed and the entry's index (the trace's source names the sample "SEED:INDEX");
its data holds the dataset's config, so a saved
trace rebuilds the dataset, and the entry, in a new process (`task_of`).

This module only builds tasks; it imports reasoning-gym on first use.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from ...core.dependencies import reasoning_gym
from ...core.gcpause import paused
from ...core.errors import UsageError
from ...core.hooks import metric, reward
from ...core.task import Task, TaskData
from ...core.trace import Trace
from .tasklist import TaskList

__all__ = ["ReasoningGymData", "ReasoningGymTask", "build"]

# Datasets built in this process, by (name, config as JSON): the tasks of one
# dataset share it, and a rebuilt task finds it again instead of rebuilding.
_DATASETS: dict[tuple[str, str], Any] = {}


class ReasoningGymData(TaskData):
    """One reasoning-gym entry: where it comes from (dataset, config, index)
    and, for reading, the dataset's own answer."""

    dataset: str
    index: int
    seed: int
    config: dict[str, Any]
    answer: str | None = None
    framework: str = "reasoning-gym"
    framework_version: str = ""


def _config_json(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _dataset(name: str, config: dict[str, Any]) -> Any:
    key = (name, _config_json(config))
    found = _DATASETS.get(key)
    if found is None:
        dataset_cls, config_cls = reasoning_gym.factory.DATASETS[name]
        found = _DATASETS[key] = dataset_cls(config=config_cls(**config))
    return found


class ReasoningGymTask(Task):
    """A reasoning-gym entry; its reward is the dataset's own score of the
    answer reasoning-gym extracts from the final reply."""

    Data = ReasoningGymData

    def __init__(self, data: ReasoningGymData | None = None, /, *, entry: dict[str, Any] | None = None,
                 **fields: Any) -> None:
        super().__init__(data, **fields)
        self._entry = entry

    @property
    def name(self) -> str:
        return f"reasoning_gym:{self.data.dataset}"

    @property
    def dataset(self) -> Any:
        return _dataset(self.data.dataset, self.data.config)

    @property
    def entry(self) -> dict[str, Any]:
        """The dataset's entry (question, answer, metadata), rebuilt from the
        dataset's config when this task was rebuilt from a trace."""
        if self._entry is None:
            self._entry = self.dataset[self.data.index]
        return self._entry

    async def setup(self, ctx: Any) -> None:
        ctx.trace.record_info(source=provenance(self.data))

    @reward
    def score_answer(self, trace: Trace) -> float:
        """The dataset's `score_answer` on the answer extracted from the final reply."""
        answer = reasoning_gym.utils.extract_answer(trace.last_reply)
        return float(self.dataset.score_answer(answer, self.entry))

    @metric
    def answer_found(self, trace: Trace) -> float:
        """1 when the final reply holds an <answer>...</answer>, as reasoning-gym reads it."""
        return float(reasoning_gym.utils.extract_answer(trace.last_reply) is not None)


def provenance(data: ReasoningGymData) -> dict[str, Any]:
    """Where the task came from, as the trace records it (`trace.info["source"]`)."""
    return {"framework": data.framework, "version": data.framework_version, "dataset": data.dataset,
            "seed": data.seed, "index": data.index, "sample_id": f"{data.seed}:{data.index}"}


def _by_name(name: str, size: int, seed: int, config: dict[str, Any]) -> tuple[str, Any]:
    DATASETS = reasoning_gym.factory.DATASETS  # noqa: N806 - reasoning-gym's name

    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(
            f"reasoning-gym has no dataset {name!r}{hint}; its {len(DATASETS)} datasets are listed by "
            "`sorted(reasoning_gym.factory.DATASETS)`"
        )
    try:
        dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError) as exc:
        raise UsageError(f"reasoning-gym dataset {name!r} refused its config {config | {'size': size, 'seed': seed}}: "
                         f"{type(exc).__name__}: {exc}") from None
    return name, dataset


def _name_of(dataset: Any) -> str:
    for name, (dataset_cls, _config) in reasoning_gym.factory.DATASETS.items():
        if type(dataset) is dataset_cls:
            return name
    raise UsageError(f"{type(dataset).__name__} is not a dataset registered with reasoning-gym "
                     "(reasoning_gym.register_dataset); rollkit rebuilds a task from its registered name")


def _system_prompt(system_prompt: str | None) -> str | None:
    prompts = reasoning_gym.utils.SYSTEM_PROMPTS
    if system_prompt is None or system_prompt not in prompts:
        return system_prompt
    return prompts[system_prompt]


def build(source: Any, *, size: int = 500, seed: int = 0, system_prompt: str | None = "default",
          **config: Any) -> TaskList:
    """The entries of a reasoning-gym dataset as tasks. `source` is
    "reasoning_gym:NAME" (built with `size`, `seed` and `config`) or a
    dataset object. `system_prompt` is a key of reasoning-gym's
    SYSTEM_PROMPTS, a prompt of your own, or None for none."""
    if isinstance(source, str):
        name, dataset = _by_name(source.removeprefix("reasoning_gym:"), size, seed, config)
    else:
        if config:
            raise UsageError(f"a reasoning-gym dataset object carries its config; drop {sorted(config)}")
        name, dataset = _name_of(source), source
    settings = dataclasses.asdict(dataset.config)
    _DATASETS.setdefault((name, _config_json(settings)), dataset)
    with paused():  # a bulk build that frees nothing (rollkit.core.gcpause)
        return TaskList(_tasks(name, dataset, settings, _system_prompt(system_prompt)))


def _tasks(name: str, dataset: Any, settings: dict[str, Any], system: str | None) -> list[ReasoningGymTask]:
    version = _version()
    tasks = []
    for index in range(len(dataset)):
        entry = dataset[index]
        data = ReasoningGymData(id=f"{name}:{dataset.seed}:{index}", prompt=entry["question"], system_prompt=system,
                                dataset=name, index=index, seed=dataset.seed, config=settings,
                                answer=None if entry.get("answer") is None else str(entry["answer"]),
                                framework_version=version)
        tasks.append(ReasoningGymTask(data, entry=entry))
    return tasks


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-gym")
    except PackageNotFoundError:
        return str(getattr(reasoning_gym, "__version__", ""))
