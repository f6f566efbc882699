"""Start the processes of a multi-process (multi-rank) job and wait for all of them.

The distributed tests launch real jobs (torchrun, TF_CONFIG workers, paddle's launcher)
as child processes: a collective that hangs must fail the test within its time limit and
take every rank down with it, and a rank that fails must be reported with its own output,
not as a timeout of the others. One module does that for every framework.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: what each rank's failure message shows of its output
TAIL_CHARS = 4000


@dataclass
class RankResult:
    """One finished process of a job."""

    rank: int
    returncode: int
    stdout: str
    stderr: str


class JobFailed(AssertionError):
    """A rank exited non-zero, or the job ran past its time limit."""


def free_port() -> int:
    """A TCP port nothing listens on now (for a rendezvous or a TF_CONFIG cluster)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: our interpreter's directory first on PATH
    (so ``torchrun`` and friends of the test env are found), one thread per rank unless
    told otherwise (two ranks on two cores), plus ``extra``."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def run_job(commands: Sequence[Sequence[str]], *, envs: Sequence[Mapping[str, str]] | None = None,
            timeout: float, cwd: str | Path | None = None) -> list[RankResult]:
    """Run ``commands`` at once (one per rank, or a single launcher) and wait for all.

    Raises :class:`JobFailed` naming each rank that failed, with the tail of its output,
    or the ranks still running at the time limit (all of them are killed, with their
    process groups, so launchers' children go too)."""
    envs = list(envs) if envs is not None else [child_env() for _ in commands]
    if len(envs) != len(commands):
        raise ValueError(f"{len(commands)} commands but {len(envs)} environments")
    procs = [subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
             for cmd, env in zip(commands, envs)]
    deadline = time.monotonic() + timeout
    outputs: dict[int, tuple[str, str]] = {}
    late: list[int] = []
    for rank, proc in enumerate(procs):
        try:
            outputs[rank] = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late.append(rank)
    for rank in late:
        _kill_group(procs[rank])
        outputs[rank] = procs[rank].communicate()
    results = [RankResult(r, p.returncode, *outputs[r]) for r, p in enumerate(procs)]
    failed = [r for r in results if r.returncode != 0 or r.rank in late]
    if failed:
        head = (f"job ran past its {timeout:.0f} s limit (ranks {late} killed)" if late
                else "job failed")
        raise JobFailed(head + "\n" + "\n".join(_describe(r) for r in failed))
    return results


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _describe(r: RankResult) -> str:
    return (f"--- rank {r.rank} exited {r.returncode}\n"
            f"stdout: ...{r.stdout[-TAIL_CHARS:]}\nstderr: ...{r.stderr[-TAIL_CHARS:]}")
