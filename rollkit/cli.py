"""The `rollkit` command line (click): `demo`, `eval`, `show`, `compare` and `view`.

This module turns command-line words into calls of `rollkit.evaluate` and
prints what comes back; it holds no evaluation logic of its own. Every user
mistake (a task set that cannot be imported or is empty, an unknown model, a
run folder that is not one) ends as one `Error: ...` line saying what is
wrong and what to do, and exit status 1 (2 for bad usage). It is loaded
only by the `rollkit` script and `python -m rollkit`, never by
`import rollkit`.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

__all__ = ["main", "cli"]


def _import_object(spec: str, what: str, param: str) -> Any:
    """Import MODULE:ATTRIBUTE and return the attribute; `what` names it in errors."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise click.BadParameter(
            f"{spec!r} is not MODULE:ATTRIBUTE; name the module and the {what} in it, "
            "e.g. rollkit.examples:arithmetic_tasks",
            param_hint=param,
        )
    # Like `python -m`, let a module in the current folder be found.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise click.ClickException(
            f"cannot import module {module_name!r} (for {what} {spec!r}): {type(exc).__name__}: {exc}; "
            "check the module name and that it is importable from the current folder or PYTHONPATH"
        ) from None
    if not hasattr(module, attribute):
        public = _public_names(module)
        close = difflib.get_close_matches(attribute, public, n=1)
        guess = f"did you mean {module_name}:{close[0]}? It" if close else "it"
        shown = ", ".join(public[:20]) + (f" and {len(public) - 20} more" if len(public) > 20 else "")
        raise click.ClickException(
            f"module {module_name!r} has no attribute {attribute!r} (for {what} {spec!r}); "
            f"{guess} has: {shown or 'nothing public'}"
        )
    return getattr(module, attribute)


def _public_names(module: Any) -> list[str]:
    """What a module offers to name after the colon: its `__all__`, or else
    its public names less what it only imported (modules, typing's names,
    functions and classes defined elsewhere, `from __future__` features)."""
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return sorted(str(name) for name in exported)
    home = module.__name__
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value) or type(value).__module__ == "__future__":
            continue
        if inspect.isclass(value) or inspect.isfunction(value) or type(value).__module__ in ("typing", "typing_extensions"):
            origin = getattr(value, "__module__", None) or ""
            if origin != home and not origin.startswith(home + "."):
                continue  # imported from elsewhere: not this module's to offer
        names.append(name)
    return sorted(names)


def _a(noun: str) -> str:
    """`noun` with its article: "an Agent", "a list"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _load_user(spec: str) -> Any:
    """MODULE:OBJ, a rk.User or a function of the task that makes one."""
    from .core.users import User

    user = _import_object(spec, "user", "--user")
    if not (isinstance(user, User) or callable(user)):
        raise click.ClickException(
            f"{spec} is {_a(type(user).__name__)}, not an rk.User or a function of the task that makes one"
        )
    return user


def _load_tasks(spec: str) -> list[Any]:
    """Import MODULE:ATTRIBUTE; a callable is called with no arguments."""
    from .core.task import Task

    module_name, _, attribute = spec.partition(":")
    tasks = _import_object(spec, "task set", "TASKS")
    if callable(tasks) and not isinstance(tasks, Task):
        try:
            tasks = tasks()
        except Exception as exc:
            raise click.ClickException(f"calling {spec} raised {type(exc).__name__}: {exc}") from None
    if isinstance(tasks, Task):
        tasks = [tasks]
    try:
        tasks = list(tasks)
    except TypeError:
        raise click.ClickException(
            f"{spec} is {_a(type(tasks).__name__)}, not a list of rk.Task (or a function returning one)"
        ) from None
    if not tasks:
        raise click.ClickException(f"task set {spec} (module {module_name!r}, attribute {attribute!r}) is empty: no tasks to run")
    for index, task in enumerate(tasks):
        if not isinstance(task, Task):
            raise click.ClickException(f"{spec}[{index}] is {_a(type(task).__name__)}, not an rk.Task")
    return tasks


def _run(agent: Any, tasks: list[Any], **options: Any) -> Any:
    from .runs.evaluation import EvaluateArgumentError, RunFolderError, evaluate
    from .runs.ray_backend import RayUnavailable  # does not import Ray itself

    try:
        return evaluate(agent, tasks, **options)
    # Only the errors that mean bad input (an argument, the run folder, a Ray
    # cluster out of reach) become one `Error:` line; anything else is a bug
    # and keeps its traceback.
    except (EvaluateArgumentError, RunFolderError, RayUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, SystemExit) as exc:
        terminated = isinstance(exc, SystemExit)
        if terminated and exc.code != 128 + signal.SIGTERM:
            raise  # an exit of someone else's, not the SIGTERM rk.evaluate turned into one
        out = options.get("out")
        hint = f"; the finished traces are in {out}, continue with --resume" if out else ""
        click.echo(f"{'terminated' if terminated else 'interrupted'}{hint}", err=True)
        sys.exit(exc.code if terminated else 130)


def _backend(backend: str, address: str | None) -> Any:
    if backend == "ray":
        from .runs.ray_backend import RayBackend

        return RayBackend(address=address)
    if address:
        raise click.BadParameter("--ray-address needs --backend ray", param_hint="--ray-address")
    return "local"


class _ModelOption(click.Option):
    """`--model`, whose help lists the model names registered when it is
    shown (the examples register theirs on import; a plug-in may add more)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from .core.models import model_choices

        template = self.help or ""
        self.help = template.replace("{models}", ", ".join(model_choices()))
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = template


def _check_model(model: str) -> None:
    """An unknown model name: one line naming --model, with the likely name."""
    from .core.models import close_model_name, model_choices, model_names

    registered = model_names()
    prefix, slash, rest = model.partition("/")
    if model in registered and not model.endswith("/") or (slash and rest and prefix + "/" in registered):
        return
    close = close_model_name(model)
    if close is not None:
        raise click.BadParameter(f"unknown model {model!r}; did you mean {close!r}?", param_hint="--model")
    raise click.BadParameter(f"unknown model {model!r}; use one of: {', '.join(model_choices())}", param_hint="--model")


# Each limit option of `rollkit eval`, and what a valid value is.
_LIMIT_OPTIONS = {"max_turns": "a turn limit: give a whole number >= 0",
                  "max_user_turns": "a turn limit: give a whole number >= 0",
                  "max_total_tokens": "a token limit: give a whole number >= 0",
                  "max_cost_usd": "a dollar limit: give a number of dollars >= 0"}


def _check_pairs(**missing: Any) -> None:
    """`rollkit eval` options given without the one they need: each true
    value names its option (a string: as the user wrote it)."""
    needs = {"resume": ("--resume", "--out DIR, the run folder to continue"),
             "max_user_turns": ("--max-user-turns", "--user: only a conversation has user turns"),
             "cost_cap": ("--cost-cap", "--max-cost-usd DOLLARS, the limit it holds")}
    for name, given in missing.items():
        if given:
            option, need = needs[name]
            said = given if isinstance(given, str) else option
            raise click.BadParameter(f"{said} needs {need}", param_hint=option)


def _limits(**given: Any) -> Any:
    """RolloutLimits from the options; a bad value names its option only."""
    from .core.agent import RolloutLimits

    try:
        return RolloutLimits(**given)
    except ValueError as exc:  # pydantic's error names the field first
        field = next((name for name in _LIMIT_OPTIONS if name in str(exc)), "max_turns")
        option = "--" + field.replace("_", "-")
        raise click.BadParameter(f"{given[field]} is not {_LIMIT_OPTIONS[field]}", param_hint=option) from None


def _price(text: str) -> dict[str, float]:
    """`--price INPUT,OUTPUT[,CACHE_READ]` as rk.prices' rates (dollars per million tokens)."""
    parts = text.split(",")
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        numbers = []
    if not 2 <= len(parts) <= 3 or len(numbers) != len(parts) or any(n < 0 or n != n for n in numbers):
        raise click.BadParameter(f"{text!r} is not a price: give dollars per million input and output tokens, "
                                 "and optionally cached input tokens, e.g. 2.5,10 or 2.5,10,1.25", param_hint="--price")
    return dict(zip(("input", "output", "cache_read"), numbers))


def _set_price(model: Any, rates: dict[str, float] | None, max_cost_usd: float | None, cost_cap: str) -> None:
    """Give the model the price of --price; refuse --max-cost-usd over a
    model without a price, and a hard cap over one without an output limit,
    before any rollout starts (each would fail)."""
    from .core.errors import UsageError
    from .core.prices import output_bound, prices, require_price

    if rates is not None:
        prices({model.name: rates})
    if max_cost_usd is None:
        return
    try:
        require_price(model)
    except UsageError:
        raise click.BadParameter(f"a dollar limit needs a price for model {model.name!r}, and it has none; "
                                 "give one with --price INPUT,OUTPUT (dollars per million tokens)",
                                 param_hint="--max-cost-usd") from None
    if cost_cap == "hard" and output_bound(model) is None:
        raise click.BadParameter(f"a hard cap needs the most output tokens a call of model {model.name!r} may "
                                 "produce, and it is unknown; give it with --max-tokens N", param_hint="--cost-cap")


def _cap_output(model: Any, max_tokens: int | None) -> None:
    """--max-tokens: sent as max_tokens with each call of an OpenAI-compatible
    model; a scripted (toy) model cuts its replies there. Both then report it
    as their output limit, which a hard cap prices each call by."""
    from .core.models import ScriptedModel
    from .programs.openai_model import OpenAIModel

    if max_tokens is None:
        return
    if isinstance(model, OpenAIModel):
        model.params["max_tokens"] = max_tokens
    elif isinstance(model, ScriptedModel):
        model.max_tokens = max_tokens
    else:
        raise click.BadParameter(f"model {model.name!r} ({type(model).__name__}) takes no output limit from the "
                                 "command line; set one in Python (its output_limit())", param_hint="--max-tokens")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rollkit", prog_name="rollkit")
def cli() -> None:
    """Run LLM-agent rollouts many at a time and look at the results.

    \b
    rollkit demo                      the example task set on the built-in toy model
    rollkit eval MODULE:TASKS ...     a task set of yours, traces saved to a run folder
    rollkit show DIR                  the summary table of a run folder (or any trace file)
    rollkit compare DIR_A DIR_B       two runs on the same tasks, paired, with intervals
    rollkit sql RUN... QUERY          SQL (DuckDB) over the tables of runs and trace files
    rollkit view DIR [DIR...]         watch run folders in the browser as they are written
    rollkit deprecations              old spellings still accepted, and the version that removes each

    \b
    Example:
      rollkit demo --out runs/demo && rollkit show runs/demo
    """


@cli.command()
@click.option("--tasks", "n_tasks", default=12, show_default=True, help="How many example arithmetic tasks.")
@click.option("-n", "--repeats", default=2, show_default=True, help="Rollouts per task.")
@click.option("-c", "--concurrency", default=8, show_default=True, help="Rollouts in flight at once.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Also write a run folder here.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show the progress bar.")
def demo(n_tasks: int, repeats: int, concurrency: int, out: Path | None, progress: bool) -> None:
    """Run the example task set (arithmetic word problems with a calculator
    tool) on the embedded toy model: no network, no key. The toy gets the
    subtraction problems wrong on purpose, so rewards vary.

    \b
    Example:
      rollkit demo --tasks 6 -n 3 --out runs/demo
    """
    from .core.plugins import plugged

    demo_set = plugged("demo")  # the examples plug their task set in
    if demo_set is None:
        raise click.ClickException("no demo task set is plugged in: import rollkit (it imports rollkit.examples)")
    try:
        agent, tasks = demo_set(n_tasks)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tasks") from None
    result = _run(agent, tasks, repeats=repeats, concurrency=concurrency, out=out, progress=progress)
    click.echo(result.summary())
    if out:
        click.echo(f"\nrun folder: {out} (rollkit show {out})")


@cli.command(name="eval")
@click.argument("tasks", metavar="MODULE:TASKS")
@click.option("-m", "--model", required=True, cls=_ModelOption,
              help="Model name: {models}. openai/NAME reads OPENAI_BASE_URL and OPENAI_API_KEY.")
@click.option("-n", "--repeats", default=1, show_default=True, help="Rollouts per task.")
@click.option("-c", "--concurrency", default=32, show_default=True, help="Rollouts in flight at once.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run folder: manifest.json, traces.jsonl (one trace per line, written as each finishes).")
@click.option("--resume", is_flag=True, help="Continue the run in --out: skip every (task, repeat) already there.")
@click.option("--max-turns", type=int, default=20, show_default=True, help="Turn limit per rollout.")
@click.option("--max-total-tokens", type=int, default=None, metavar="N",
              help="Token limit per rollout, prompt and reply (stop condition max_total_tokens).")
@click.option("--max-cost-usd", type=float, default=None, metavar="DOLLARS",
              help="Dollar limit per rollout, checked before each model call (stop condition max_cost_usd); "
                   "needs a price for --model: the public table's, or --price.")
@click.option("--cost-cap", type=click.Choice(["soft", "hard"]), default=None,
              help="How --max-cost-usd holds (RolloutLimits(cost_cap=...)): soft (default) lets the call that "
                   "crosses it run; hard also refuses a call whose worst case (--max-tokens of output at the "
                   "model's price) could cross it.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, metavar="N",
              help="The most output tokens per model call: sent as max_tokens (a toy model cuts its reply "
                   "there); the bound --cost-cap hard prices each call by.")
@click.option("--price", default=None, metavar="INPUT,OUTPUT[,CACHE_READ]",
              help="Dollars per million tokens for --model (wins over the public table), e.g. --price 2.5,10,1.25.")
@click.option("--agent-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Seconds the agent may run per rollout (the agent phase; default: no limit).")
@click.option("--otel", default=None, metavar="URL",
              help="Send each rollout as it finishes as OpenTelemetry GenAI spans to this OTLP/HTTP endpoint, "
                   "e.g. http://127.0.0.1:6006/v1/traces.")
@click.option("--user", "user_spec", default=None, metavar="MODULE:OBJ",
              help="Who speaks between segments: a rk.User, or a function of the task making one; each rollout is then a conversation.")
@click.option("--max-user-turns", type=int, default=None, help="Cap on the user's turns per rollout (stop condition max_user_turns).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where rollouts run (ray needs rollkit[ray]).")
@click.option("--ray-address", default=None, help="Ray cluster address (default: a local Ray instance).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show the progress bar.")
def eval_command(
    tasks: str,
    model: str,
    repeats: int,
    concurrency: int,
    out: Path | None,
    resume: bool,
    max_turns: int,
    max_total_tokens: int | None,
    max_cost_usd: float | None,
    cost_cap: str | None,
    max_tokens: int | None,
    price: str | None,
    agent_timeout: float | None,
    otel: str | None,
    user_spec: str | None,
    max_user_turns: int | None,
    backend: str,
    ray_address: str | None,
    progress: bool,
) -> None:
    """Run the task set MODULE:TASKS (a list of rk.Task, or a function
    returning one) with the chat harness on --model, and print the summary.

    \b
    Example:
      rollkit eval rollkit.examples:arithmetic_tasks -m toy-calculator -n 3 --out runs/arith
      rollkit eval rollkit.examples:arithmetic_tasks -m toy-calculator -n 3 --out runs/arith --resume
      rollkit eval rollkit.examples:arithmetic_tasks -m toy-careful -n 3 --out runs/careful
      rollkit eval my_tasks:TASKS -m openai/gpt-4o-mini --max-cost-usd 0.05 --out runs/gpt
      rollkit eval my_tasks:TASKS -m openai/gpt-4o-mini --max-cost-usd 0.05 --cost-cap hard --max-tokens 1024
      rollkit eval my_tasks:TASKS -m openai/my-model --price 0.5,1.5 --otel http://127.0.0.1:6006/v1/traces
    """
    from .core.agent import Agent

    _check_pairs(resume=resume and out is None, max_user_turns=max_user_turns is not None and not user_spec,
                 cost_cap=cost_cap is not None and max_cost_usd is None and f"--cost-cap {cost_cap}")
    _check_model(model)
    limits = _limits(max_turns=max_turns, max_user_turns=max_user_turns, max_total_tokens=max_total_tokens,
                     max_cost_usd=max_cost_usd, cost_cap=cost_cap or "soft")
    rates = _price(price) if price is not None else None
    task_list = _load_tasks(tasks)
    user = _load_user(user_spec) if user_spec else None
    try:
        agent = Agent(model=model, limits=limits, timeouts={"agent": agent_timeout})
    except (ValueError, TypeError) as exc:  # a known model that cannot be built as named
        raise click.BadParameter(str(exc), param_hint="--model") from None
    _cap_output(agent.model, max_tokens)
    _set_price(agent.model, rates, max_cost_usd, cost_cap or "soft")
    result = _run(
        agent, task_list, repeats=repeats, concurrency=concurrency, out=out, resume=resume,
        backend=_backend(backend, ray_address), progress=progress, user=user, otel=otel,
    )
    click.echo(result.summary())
    if out:
        click.echo(f"\nrun folder: {out}")


@cli.command()
@click.argument("folder", metavar="DIR", type=click.Path(path_type=Path))
def show(folder: Path) -> None:
    """Summarize the run folder DIR: rollouts by stop condition and error
    type, mean reward with how many are missing one, phase time totals, and
    group signals. DIR may also be one trace file of any format rk.load
    reads (an inspect-ai log, a verifiers results.jsonl, ...) or a folder
    another tool wrote (verifiers' results.jsonl + metadata.json, tau2's
    results.json + simulations/). Keys of the source no field census lists
    are listed by path (each trace keeps them in info["unmapped"]).

    \b
    Example:
      rollkit show runs/arith
      rollkit show logs/2025-01-01_task.eval
    """
    from .runs.evaluation import EvalResult, RunFolderError, load_run
    from .core.store import TraceFileError, load
    from .tables.runfolder import MANIFEST, TRACES

    _must_exist(folder, "DIR", "pass the --out folder of a rollkit eval or demo run, or a trace file")
    _refuse_run_folder_file(folder, "show")
    try:
        # A file, or a folder another tool wrote (verifiers' results.jsonl +
        # metadata.json, tau2's results.json + simulations/): what rk.load opens.
        if folder.is_file() or folder.is_dir() and not (folder / MANIFEST).exists() and not (folder / TRACES).exists():
            traces = load(folder)
            kinds = sorted({str(t.info.get("format", "rollkit")) for t in traces})
            click.echo(f"{folder}: {len(traces)} traces ({', '.join(kinds) or 'none'})\n")
            click.echo(EvalResult(traces).summary())
            _echo_unmapped(traces)
            return
        result = load_run(folder)
    except ModuleNotFoundError as exc:  # a format whose reader is an optional extra
        raise click.ClickException(str(exc)) from None
    except FileNotFoundError as exc:
        raise click.ClickException(f"{exc}; pass the --out folder of a rollkit eval or demo run") from None
    except TraceFileError as exc:  # names the damaged file (and line)
        raise click.ClickException(_bad_trace_file(exc, given_a_file=folder.is_file())) from None
    except RunFolderError as exc:
        raise click.ClickException(str(exc)) from None
    except json.JSONDecodeError as exc:  # load_run names the file itself; this is the fallback
        raise click.ClickException(f"a file in {folder} is not valid JSON: {exc}") from None
    manifest = result.manifest
    if manifest:
        agent = manifest.get("agent", {})
        click.echo(
            f"run {manifest.get('run_id')} started {manifest.get('started')} (rollkit {manifest.get('rollkit')}): "
            f"model {agent.get('model')}, harness {agent.get('harness')}, "
            f"{manifest.get('tasks', {}).get('count')} tasks x {manifest.get('repeats')} repeats"
        )
        expected = manifest.get("tasks", {}).get("count", 0) * manifest.get("repeats", 0)
        if expected and len(result.traces) < expected:
            click.echo(f"incomplete: {len(result.traces)} of {expected} rollouts finished (continue with --resume)")
        click.echo("")
    click.echo(result.summary())
    _echo_unmapped(result.traces)


def _echo_unmapped(traces: list[Any]) -> None:
    """The source keys no census lists (kept in each trace's info["unmapped"]),
    by path with list indices as *, and how many traces hold each."""
    import re

    seen: dict[str, int] = {}
    for trace in traces:
        for path in {re.sub(r"\.\d+(?=\.|$)", ".*", p) for p in trace.info.get("unmapped") or {}}:
            seen[path] = seen.get(path, 0) + 1
    if seen:
        click.echo(f"\nkeys rollkit does not know, kept in each trace's info['unmapped'] ({len(seen)}):")
        for path, count in sorted(seen.items()):
            click.echo(f"  {path}  ({count} of {len(traces)} traces)")


@cli.command(name="deprecations")
def deprecations_command() -> None:
    """List the deprecated spellings this rollkit still accepts: each with
    what to write instead and the version that removes it (the policy is in
    the docs, "Deprecations").

    \b
    Example:
      rollkit deprecations
    """
    # (every layer has registered its deprecations: the package `rollkit`,
    # which imports each layer, is loaded before any of its modules)
    from .core import __version__
    from .core.deprecation import deprecations

    listed = deprecations()
    if not listed:
        click.echo(f"rollkit {__version__} deprecates nothing.")
    for deprecation in listed:
        click.echo(f"{deprecation.old}  ->  {deprecation.new}  (removed in {deprecation.removed_in})")


@cli.command(name="compare")
@click.argument("folder_a", metavar="DIR_A", type=click.Path(path_type=Path))
@click.argument("folder_b", metavar="DIR_B", type=click.Path(path_type=Path))
@click.option("--by", type=click.Choice(["task", "repeat"]), default="task", show_default=True,
              help="Pair by task (repeats averaged) or by task and repeat.")
@click.option("--signal", "signals", multiple=True, help="Compare only this signal (repeatable), e.g. reward.correct.")
@click.option("--resamples", type=click.IntRange(min=1), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the permutation test.")
def compare_command(folder_a: Path, folder_b: Path, by: str, signals: tuple[str, ...], resamples: int, seed: int) -> None:
    """Compare run DIR_B against run DIR_A on the tasks both ran: per
    signal, each run's mean with its 95% interval and n scored / n total,
    the paired difference B - A with a bootstrap 95% interval, the p-value
    of a paired sign-flip permutation test, wins / ties / losses per task,
    tasks only one run has, and missing values counted.

    \b
    Example:
      rollkit compare runs/a runs/b --signal reward
    """
    from .analysis.compare import CompareError, compare
    from .tables.runfolder import RunFolderError
    from .core.store import TraceFileError

    for folder, name in ((folder_a, "DIR_A"), (folder_b, "DIR_B")):
        _must_exist(folder, name, "pass the --out folders of two rollkit eval runs")
        _refuse_run_folder_file(folder, "compare")
        if not folder.is_dir():
            raise click.ClickException(f"no run folder at {folder}; pass the --out folders of two rollkit eval runs")
    try:
        result = compare(folder_a, folder_b, by=by, signals=signals or None, resamples=resamples, seed=seed,
                         labels=(str(folder_a), str(folder_b)))
    except TraceFileError as exc:
        raise click.ClickException(_bad_trace_file(exc, given_a_file=False)) from None
    except (CompareError, RunFolderError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(result.table())


@cli.command(name="sql")
@click.argument("args", metavar="RUN... QUERY", nargs=-1, required=True)
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
def sql_command(args: tuple[str, ...], as_csv: bool) -> None:
    """Run the SQL QUERY (DuckDB) over the tables of one or more runs (run
    folders or trace files of any format rk.load reads): rollouts, turns,
    calls, phases, signals, messages. This is the owner's full DuckDB
    (files, extensions, the network, as DuckDB allows): never run a query
    someone else wrote.

    \b
    Example:
      rollkit sql runs/a "select task_key, avg(reward) from rollouts group by 1"
      rollkit sql runs/a runs/b --csv "select outcome, count(*) from rollouts group by 1"
    """
    from .tables.lazyrun import open_run
    from .core.store import TraceFileError

    if len(args) < 2:
        raise click.ClickException('give one or more runs, then the query: rollkit sql DIR "select count(*) from rollouts"')
    *runs, query = args
    for run in runs:
        _must_exist(Path(run), "RUN", "pass run folders or trace files, then the query")
    try:
        frame = open_run(runs).sql(query)
    except (FileNotFoundError, TraceFileError) as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # a DuckDB error names what is wrong with the query
        if type(exc).__module__.split(".")[0] != "duckdb" and not type(exc).__name__.endswith("Exception"):
            raise
        raise click.ClickException(f"the query failed: {exc}") from None
    click.echo(frame.to_csv(index=False) if as_csv else frame.to_string(index=False))


def _must_exist(path: Path, name: str, hint: str) -> None:
    """A path argument that does not exist: a usage error (exit status 2)
    naming it, and its folder when that does not exist either."""
    if path.exists():
        return
    parent = path.absolute().parent
    where = "" if parent.is_dir() else f" (nor does its folder {parent})"
    raise click.UsageError(f"{name} {path} does not exist{where}; {hint}")


# Files of a run folder that are not trace files, and what each is.
_RUN_FOLDER_FILES = {"live.jsonl": "the live file (rollouts in flight)", "manifest.json": "the manifest",
                     "groups.jsonl": "the group signals"}


def _refuse_run_folder_file(path: Path, command: str) -> None:
    """A file of a run folder given where the folder is wanted: say to pass the folder."""
    from .tables.runfolder import MANIFEST, TRACES

    what = _RUN_FOLDER_FILES.get(path.name)
    folder = path.parent
    if what is None or not path.is_file() or not ((folder / MANIFEST).exists() or (folder / TRACES).exists()):
        return
    usage = f"rollkit {command} {folder}" if command != "compare" else f"{folder} (rollkit compare takes two run folders)"
    raise click.ClickException(f"{path} is {what} of the run folder {folder}, not a trace file; "
                               f"pass the folder instead: {usage}")


def _bad_trace_file(exc: Any, *, given_a_file: bool) -> str:
    """A TraceFileError in command-line terms: what is wrong (without the
    advice for Python callers), then what to do at the prompt."""
    from .core.store import formats

    if given_a_file and (exc.line or 1) == 1:
        return (f"{exc.reason}; pass a run folder (the --out of rollkit eval) or a trace file in one of the "
                f"formats rk.load reads ({', '.join(formats())})")
    where = f"line {exc.line} of {exc.path}" if exc.line else str(exc.path)
    return f"{exc.reason}; the file is damaged there: fix or delete {where} and run the command again"


# The page `rollkit view` serves: one code cell calling the notebook layer's
# `view` (this layer never imports it; Voila's kernel does).
_VIEW_CELL = "import rollkit as rk\n\nrk.notebook.view({folders!r}, poll_every={poll!r}, read={read!r})"


def _view_notebook(folders: list[str], poll: float, read: dict[str, str]) -> dict[str, Any]:
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "id": "rollkit-view", "metadata": {}, "outputs": [],
                   "source": _VIEW_CELL.format(folders=folders, poll=poll, read=read)}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@cli.command(name="view")
@click.argument("folders", metavar="DIR...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0, help="Port on 127.0.0.1 (default: a free one).")
@click.option("--poll", type=click.FloatRange(min=0.05), default=0.5, show_default=True, help="Seconds between reads of each folder.")
@click.option("--export", "export_to", type=click.Path(path_type=Path), default=None,
              help="Write a static copy to this folder (opens from disk, no server) instead of serving.")
@click.option("--where", default=None, help="With --export: only the rollouts where this filter over the run's columns holds.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="With --export: at most N rollouts per run.")
def view_command(folders: tuple[Path, ...], port: int, poll: float, export_to: Path | None, where: str | None,
                 limit: int | None) -> None:
    """Serve a page (Voila, on 127.0.0.1 only) that follows each run folder
    DIR as it is written: done / in flight / failed, the rollouts in flight,
    running means with 95% intervals, stop reasons and errors, the slowest
    and failed rollouts (click one to read it); with two runs, a button
    compares them. DIR may also be a trace file of any format rk.load reads
    (an inspect-ai log, a verifiers results.jsonl, ...): the page shows its
    summary and a trace browser. A folder holding runs (run folders, trace
    files) shows the list of its runs, newest first: open one, or compare
    two. Every run and rollout has its own address; a rollout's page shows
    its timeline beside its transcript. Prints the URL; Ctrl-C stops the
    server.

    With --export DIR it serves nothing: it writes DIR, a static copy of
    the runs list, the runs' charts and grids and the rollouts' pages that
    opens from disk (file://) with no server. --where and --limit (per run)
    choose the rollouts; a run too large to take whole needs one of them.
    DIR must exist then, and so must the folder that holds --export's DIR.

    A DIR that does not exist yet, in a folder that does, is waited for (a
    run may be about to start there): the terminal and the page say so. A
    DIR whose parent folder does not exist either is an error.

    \b
    Example:
      rollkit view runs/a runs/b
      rollkit view runs
      rollkit view logs/2025-01-01_task.eval
      rollkit view runs/a --export share/a --where 'reward < 1'
    """
    if export_to is None and (where is not None or limit is not None):
        raise click.UsageError("--where and --limit choose what --export writes; give --export DIR with them")
    if export_to is not None:
        _export_view(folders, export_to, where, limit)
    else:
        _serve_view(folders, port, poll)


def _serve_view(folders: tuple[Path, ...], port: int, poll: float) -> None:
    """`rollkit view DIR...`: the page, served by Voila until stopped."""
    import importlib.util
    import shutil
    import tempfile

    if importlib.util.find_spec("voila") is None:
        raise click.ClickException("rollkit view serves its page with Voila, which is not installed: pip install 'rollkit[view]'")
    # A trace file is read once, here (a bad one is refused before any server starts); the page's
    # kernel gets its traces as rollkit's own JSON lines in the view's folder, never the file again.
    files: dict[Path, list[Any]] = {}
    for folder in folders:
        _refuse_run_folder_file(folder, "view")
        if folder.exists() and not folder.is_dir():  # a FIFO or a device too: refused as rk.load refuses it
            files[folder] = _check_trace_file(folder)
            continue
        _check_view_folder(folder)
    if port:
        _check_port_free(port)
    from .programs import watchdog

    home = Path(tempfile.mkdtemp(prefix="rollkit-view-"))
    watchdog.watch_folder(home)  # removed even if this command is killed (SIGKILL)
    try:
        from .core.store import save

        read = {}
        for n, folder in enumerate(list(files)):
            read[str(folder.resolve())] = str(save(files.pop(folder), home / f"read-{n}.jsonl"))
        notebook = home / "rollkit-view.ipynb"
        notebook.write_text(json.dumps(_view_notebook([str(f.resolve()) for f in folders], poll, read)),
                            encoding="utf-8")
        _serve(notebook, home, port or _free_port())
    finally:
        shutil.rmtree(home, ignore_errors=True)
        watchdog.forget_folder(home)


def _export_view(folders: tuple[Path, ...], out: Path, where: str | None, limit: int | None) -> None:
    """`rollkit view ... --export OUT`: the static copy (rollkit.notebook.export), no server."""
    import shutil
    import tempfile

    from .core.errors import UsageError
    from .core.store import save

    parent = out.absolute().parent
    if not parent.is_dir():  # a mistyped path: --export makes its last folder only
        raise click.BadParameter(f"the folder {parent} that would hold {out} does not exist; make it first, "
                                 "or export into a folder that exists", param_hint="--export")
    files = {}
    for folder in folders:
        _refuse_run_folder_file(folder, "view")
        _must_exist(folder, "DIR", "--export writes runs that are there")
        if not folder.is_dir():
            files[folder] = _check_trace_file(folder)
    home = Path(tempfile.mkdtemp(prefix="rollkit-export-"))
    try:
        read = {str(f.resolve()): str(save(traces, home / f"read-{n}.jsonl")) for n, (f, traces) in enumerate(files.items())}
        from .notebook.export import export

        try:
            done = export(folders, out, where=where, limit=limit, read=read)
        except UsageError as exc:
            raise click.UsageError(str(exc)) from None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for name, taken, total in done.runs:
        click.echo(f"run {name}: {taken:,} of {total:,} rollouts")
    for name, why in done.skipped:
        click.echo(f"run {name}: not exported ({why})", err=True)
    click.echo(f"wrote {out}: {done.files:,} files, {done.bytes / 1e6:.1f} MB; open {out / 'index.html'}")


def _check_view_folder(folder: Path) -> None:
    """A folder `rollkit view` follows: one that does not exist is waited
    for, saying so, if its parent exists (a run may be about to start
    there); otherwise the path is mistyped: an error naming it."""
    from .tables.runfolder import is_run_folder, runs_in

    if not folder.exists():
        if not folder.absolute().parent.is_dir():
            raise click.UsageError(f"{folder} does not exist, and neither does its folder {folder.absolute().parent}; "
                                   "check the path (rollkit view waits only for a run folder about to be made "
                                   "in a folder that exists)")
        click.echo(f"{folder} does not exist (yet): the page waits for a run to start there "
                   f"(rollkit eval ... --out {folder}); if the path is mistyped, stop with Ctrl-C", err=True)
    elif not (is_run_folder(folder) or runs_in(folder)):
        click.echo(f"warning: {folder} is not a run folder (yet); the page says so and follows it if a run starts there",
                   err=True)


def _check_port_free(port: int) -> None:
    """A taken --port is an error naming it (Voila would quietly take the
    next port, and the URL printed would be someone else's page)."""
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise click.ClickException(f"--port {port}: 127.0.0.1:{port} is taken ({exc.strerror}); choose another "
                                       "port, or leave --port out for a free one") from None


def _check_trace_file(path: Path) -> list[Any]:
    """The traces of a file `rollkit view` shows; refuses, before any server
    starts, a file it cannot show: one rk.load does not read, or one holding
    no traces."""
    import warnings

    from .core.store import formats, load

    what = (f"pass the --out folder of rollkit eval, or a trace file in one of the formats rk.load reads "
            f"({', '.join(formats())})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn last line is no reason to refuse: the page shows what is whole
            traces = load(path)
    except ModuleNotFoundError as exc:  # a format whose reader is an optional extra
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # TraceFileError (its reason, without the advice for Python), or undecodable bytes
        reason = getattr(exc, "reason", exc)
        raise click.ClickException(f"{path} is neither a run folder nor a trace file rollkit reads ({reason}): {what}") from None
    if not traces:
        raise click.ClickException(f"{path} holds no traces: {what}")
    return traces


# The page Voila serves is its "lab" page but for the stylesheets that page
# asks of a public CDN (Font Awesome, which Voila's own scripts bundle): a
# link to them failed offline and told a third party someone was looking at
# a run. They become empty data: URLs, so the page loads nothing off the machine.
_TEMPLATE = """{%- extends 'voila/templates/lab/index.html.j2' -%}
{%- block notebook_css -%}
{{ super() | replace('https://', 'data:text/css,/*off-machine:') | replace('http://', 'data:text/css,/*off-machine:') }}
{%- endblock notebook_css -%}
"""


# Leaving a page, Voila's page asks its server to shut its kernel down, sending back
# the _xsrf cookie, which nothing of Voila's sets: refused (403), the kernel of every
# page left stayed up. Reading the handler's xsrf_token sets that cookie on the page.
_VOILA_CONFIG = """
def _xsrf_cookie(handler, notebook, cwd):
    handler.xsrf_token


c.VoilaConfiguration.prelaunch_hook = _xsrf_cookie
"""


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable and writable by its owner only (0600), from its creation on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _voila_home(home: Path, token: str) -> dict[str, str]:
    """Voila's settings (the token, the Host check) and rollkit's page
    template in `home`, and the environment that points Voila there."""
    # A dict setting does not pass on Voila's command line; it reads voila.json in its working folder.
    settings = {"Voila": {"token": token,
                          "tornado_settings": {"allow_remote_access": False, "local_hostnames": ["localhost"]}},
                "VoilaConfiguration": {"template": "rollkit"}}
    _write_private(home / "voila.json", json.dumps(settings))
    # voila.py, found through JUPYTER_CONFIG_DIR: in Voila's working folder it would hide the voila package.
    (home / "config").mkdir()
    (home / "config" / "voila.py").write_text(_VOILA_CONFIG, encoding="utf-8")
    templates = home / "jupyter" / "voila" / "templates" / "rollkit"
    templates.mkdir(parents=True)
    (templates / "conf.json").write_text(json.dumps({"base_template": "lab"}), encoding="utf-8")
    (templates / "index.html.j2").write_text(_TEMPLATE, encoding="utf-8")
    (home / "tmp").mkdir()  # Voila's connection folder and the kernel's temp files go with `home`
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "TMPDIR": str(home / "tmp"),
           "JUPYTER_CONFIG_DIR": str(home / "config"),
           "PYTHONUNBUFFERED": "1",
           "JUPYTER_PATH": os.pathsep.join(filter(None, [str(home / "jupyter"), os.environ.get("JUPYTER_PATH")]))}
    return env


def _serve(notebook: Path, home: Path, port: int) -> None:
    """Voila in its own process group, until SIGINT (Ctrl-C), SIGTERM or
    SIGHUP, whatever the command inherited for them (a `&` job of a script
    starts with SIGINT ignored); the handlers are this command's, put back
    when it ends. Stopping takes Voila and its kernels down within about a
    second (`_stop_served`); the watchdog kills Voila's group if this
    command dies any other way (its kernel, in a session of its own, exits
    when Voila does: it polls its parent).

    The page is locked down as Jupyter's own server is: a token in the URL
    (then a cookie), and the Host header must name a loopback address or
    localhost, so a page from another site whose name was rebound to
    127.0.0.1 (DNS rebinding) reaches neither the page nor the kernel's
    websocket (Voila turns that check off by default; its settings turn it
    back on). The token reaches Voila in its settings file (voila.json,
    mode 0600, in the view's own 0700 folder), never on its command line,
    which every local user can read in /proc. The page loads nothing from
    off the machine (`_TEMPLATE`)."""
    import secrets
    import subprocess

    from .programs import watchdog

    token = secrets.token_urlsafe(32)
    env = _voila_home(home, token)
    interrupt = lambda *_: (_ for _ in ()).throw(KeyboardInterrupt())  # noqa: E731
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    proc = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
             "--Voila.port_retries=0", "--show_tracebacks=True"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env, cwd=home,
        )
        watchdog.watch_group(proc.pid)
        log: list[str] = []
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            if "is running at" in line:
                click.echo(f"rollkit view: http://127.0.0.1:{port}/?token={token} (Ctrl-C stops it)", err=False)
                sys.stdout.flush()
                break
        else:
            raise click.ClickException(f"Voila did not start (exit status {proc.wait()}):\n" + "".join(log[-20:]))
        for line in proc.stderr:  # keep reading, so Voila never blocks on a full pipe
            log.append(line)
            del log[:-50]
        if proc.wait() != 0:
            raise click.ClickException("Voila stopped:\n" + "".join(log[-20:]))
    except KeyboardInterrupt:
        pass
    finally:
        for sig in previous:  # another signal while stopping: the stop is under way already
            signal.signal(sig, lambda *_: None)
        if proc is not None:
            _stop_served(proc)
            watchdog.forget_group(proc.pid)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _stop_served(proc: Any) -> None:
    """Stop Voila's process group and each of its kernels' (in sessions of
    their own): SIGTERM, then SIGKILL to what is left after a second, each
    waited for on its pidfd."""
    import select

    groups = [proc.pid, *_children(proc.pid)] if proc.poll() is None else []
    fds = []
    for pid in groups:
        try:
            fds.append(os.pidfd_open(pid))
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass
    try:
        for sig_after in (1.0, 5.0):
            waiting = list(fds)
            deadline = time.monotonic() + sig_after
            while waiting and (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select(waiting, [], [], left)
                waiting = [fd for fd in waiting if fd not in ready]
            if not waiting:
                break
            for pid in groups:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
    finally:
        for fd in fds:
            os.close(fd)
    proc.wait()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `rollkit` script and of `python -m rollkit`.

    A shell that is not interactive starts its `&` jobs with SIGINT ignored,
    and Python keeps that: such a `rollkit eval` would never react to
    Ctrl-C (or `kill -INT`). The command puts Python's default handling
    back first, so it always does, and puts the disposition it found back
    when the command ends (`rollkit.cli.main` may be called from Python)."""
    inherited = signal.getsignal(signal.SIGINT)
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli.main(args=argv, prog_name="rollkit")
    finally:
        if inherited is signal.SIG_IGN:
            signal.signal(signal.SIGINT, inherited)


if __name__ == "__main__":  # pragma: no cover
    main()
