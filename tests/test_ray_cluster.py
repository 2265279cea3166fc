"""Ray across nodes: a head and two worker nodes on this machine, every
address 127.0.0.1 (ray.cluster_utils.Cluster). `rk.evaluate` runs on it, one
rollout actor on each worker; once four rollouts are running (two on each
node, reported to a gate actor on the head, not waited for by a sleep) one
worker node is removed. The rollouts it took with it run again on the node
left; every (task, repeat) is in the run folder exactly once, and a resumed
run finds nothing left to do.

Slow (three Ray nodes on a small machine): marked `slow`."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the rollkit[ray] extra")

from helpers.evaluate_helpers import HERE, Gate, NodeReportingHarness, said_agent, said_tasks  # noqa: E402

from rollkit.runs.evaluation import evaluate_async, load_run  # noqa: E402
from rollkit.runs.ray_backend import RayBackend  # noqa: E402

pytestmark = pytest.mark.slow

TASKS, REPEATS, CONCURRENCY = 6, 2, 4


def _listening(temp: str) -> set[str]:
    """The addresses the processes of this cluster listen on (TCP)."""
    import subprocess

    pids = {entry for entry in os.listdir("/proc") if entry.isdigit() and _names(entry, temp)}
    found = set()
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines():
        if any(f"pid={pid}," in line for pid in pids):
            found.add(line.split()[3].rsplit(":", 1)[0])
    return found


def _loopback(address: str) -> bool:
    """127.0.0.1, ::1, or 127.0.0.1 as an IPv6 socket sees it (::ffff:127.0.0.1)."""
    import ipaddress

    ip = ipaddress.ip_address(address.strip("[]"))
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _names(pid: str, temp: str) -> bool:
    try:
        return temp in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        return False


def _end_processes_under(temp: str) -> None:
    """End what Ray started with `temp` as its folder and left running (a
    node that failed to start leaves its agents to init): by pid, only
    processes whose command line names this test's own folder."""
    import signal

    for entry in os.listdir("/proc"):
        if entry.isdigit() and _names(entry, temp):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A head (no CPU: it runs no rollout, only the gate, by its `head`
    resource) and two worker nodes of 2 CPUs, all on 127.0.0.1."""
    import shutil
    import tempfile

    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    # Ray turns a loopback address it is given to connect to into the
    # machine's network address (services.resolve_ip_for_localhost), except
    # where it runs single-machine clusters only; here every node is on this
    # machine, so it is told so, in this process and in the ones it starts.
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

    assert not ray.is_initialized()
    # Short: Ray's Unix sockets live under it (pytest's tmp_path is too long for them).
    temp = tempfile.mkdtemp(prefix="rk-ray-")
    # The cluster's address file too (Ray writes it under its default temp
    # folder, /tmp/ray, which a fresh machine does not have): in this folder.
    os.makedirs(os.path.join(temp, "ray"))
    monkeypatch.setenv("RAY_TMPDIR", temp)
    loopback = {"node_ip_address": "127.0.0.1", "temp_dir": temp}
    made = Cluster()
    try:
        made.add_node(**loopback, num_cpus=0, resources={"head": 1}, include_dashboard=False,
                      # A removed node is noticed within a second or two, not the default ~30 s.
                      _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3})
        workers = [made.add_node(**loopback, num_cpus=2) for _ in range(2)]
        made.wait_for_nodes()
    except Exception as exc:  # Ray gives each node 30 s to start, a fixed wait
        made.shutdown()
        _end_processes_under(temp)
        shutil.rmtree(temp, ignore_errors=True)
        if "timed out during startup" not in str(exc):
            raise
        pytest.skip(f"Ray could not start a node within its fixed 30 s on this machine (load average "
                    f"{os.getloadavg()[0]:.1f}): {exc}")
    try:
        ray.init(address=made.address, log_to_driver=False, _node_ip_address="127.0.0.1",
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}})
        yield made, workers, temp
    finally:
        ray.shutdown()
        made.shutdown()
        _end_processes_under(temp)
        shutil.rmtree(temp, ignore_errors=True)


async def test_a_worker_node_lost_mid_run_loses_no_rollout_and_resume_finds_the_run_complete(cluster, tmp_path):
    made, workers, temp = cluster
    # Every server of the cluster on loopback: nothing listens on the machine's network address.
    listening = _listening(temp)
    assert listening and all(_loopback(a) for a in listening), listening
    gate = ray.remote(Gate).options(num_cpus=0, resources={"head": 0.01}).remote()
    agent = said_agent(harness=NodeReportingHarness(gate))
    backend = RayBackend(address=made.address, actors=2, actor_options={"scheduling_strategy": "SPREAD"})
    run = asyncio.ensure_future(evaluate_async(agent, said_tasks(TASKS), repeats=REPEATS, concurrency=CONCURRENCY,
                                               out=tmp_path, backend=backend, progress=False))
    # Four rollouts running, two per actor, one actor per worker node.
    for worker in workers:
        await gate.wait_for.remote(f"started on {worker.node_id}", CONCURRENCY // 2)
    made.remove_node(workers[0])  # its actor and the rollouts on it die with it
    await gate.arrive.remote("go")
    result = await run
    seen = await gate.count.remote(f"started on {workers[0].node_id}")
    ids = [json.loads(line)["info"]["rollout_id"] for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    expected = sorted(f"said-{i}#{r}" for i in range(TASKS) for r in range(REPEATS))
    assert sorted(ids) == expected  # each (task, repeat) exactly once
    again = [t for t in result.traces if any("its Ray worker was lost" in w for w in t.warnings)]
    failed = [t for t in result.traces if t.failed]
    # The rollouts lost with the node ran again on the other one (or, past the retries, say why, typed).
    assert 1 <= len(again) <= seen and all(t.completed for t in again), [t.warnings for t in result.traces]
    assert all(t.error.type == "ResourceError" for t in failed), [t.error for t in failed]
    resumed = await evaluate_async(agent, said_tasks(TASKS), repeats=REPEATS, concurrency=CONCURRENCY, out=tmp_path,
                                   resume=True, backend=RayBackend(address=made.address, actors=1), progress=False)
    assert sorted(t.info["rollout_id"] for t in resumed.traces) == expected
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == len(expected)  # nothing ran twice
    assert [t.model_dump() for t in load_run(tmp_path).traces] == [t.model_dump() for t in resumed.traces]
