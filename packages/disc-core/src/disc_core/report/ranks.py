"""Which rank of a distributed job this process is, from its launcher's environment.

Every rank of a job usually shares one environment, so ``DISC_REPORT=report.json`` alone
would have the ranks overwrite each other's file; ``{rank}`` in the path gives each its
own, and the rank in the report's run record says which file came from where once
``disc report merge`` has joined them. The lookup lives here, in core, so every bridge
gets it without knowing any framework's launcher:

* ``RANK`` / ``WORLD_SIZE``: torchrun (``torch.distributed.run``) and most MPI-style
  launchers that follow it;
* ``PADDLE_TRAINER_ID`` / ``PADDLE_TRAINERS_NUM``: ``python -m paddle.distributed.launch``;
* ``TF_CONFIG``: tf.distribute's multi-worker strategies; the chief is rank 0 and the
  workers follow it in index order (the order the strategy numbers its tasks in);
  parameter servers and evaluators have no rank;
* ``LOCAL_RANK`` alone (a launcher that sets only the rank on this machine): that rank.

These are launcher conventions, not DISC settings, so they are read here directly rather
than through the option tables (which hold ``DISC_*`` variables only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RankInfo", "process_rank", "rank_label"]


@dataclass(frozen=True)
class RankInfo:
    """A process's place in its job: ``rank`` None when the launcher gives it none (a TF
    parameter server), ``label`` what ``{rank}`` in a report path expands to."""

    rank: int | None
    world_size: int | None
    label: str


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _from_tf_config(text: str) -> RankInfo | None:
    """chief -> 0, worker i -> i (+1 when there is a chief); other tasks have no rank."""
    try:
        config = json.loads(text)
        task = config.get("task") or {}
        kind, index = str(task.get("type", "")), int(task.get("index", 0))
        cluster = config.get("cluster") or {}
    except (ValueError, TypeError, AttributeError):
        return None
    chiefs = len(cluster.get("chief") or ()) if isinstance(cluster, dict) else 0
    workers = len(cluster.get("worker") or ()) if isinstance(cluster, dict) else 0
    size = chiefs + workers or None
    if kind == "chief":
        return RankInfo(index, size, str(index))
    if kind == "worker":
        rank = index + chiefs
        return RankInfo(rank, size, str(rank))
    if not kind:
        return None
    return RankInfo(None, size, f"{kind}-{index}")


def process_rank(environ: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's rank in a distributed job, or None outside one (no launcher
    variable set, or none that parses)."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in (("RANK", "WORLD_SIZE"),
                               ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM")):
        rank = _int(env.get(rank_var))
        if rank is not None:
            return RankInfo(rank, _int(env.get(size_var)), str(rank))
    tf_config = env.get("TF_CONFIG")
    if tf_config:
        found = _from_tf_config(tf_config)
        if found is not None:
            return found
    local = _int(env.get("LOCAL_RANK"))
    if local is not None:
        return RankInfo(local, _int(env.get("LOCAL_WORLD_SIZE")), str(local))
    return None


def rank_label(environ: Mapping[str, str] | None = None) -> str:
    """What ``{rank}`` in ``DISC_REPORT`` expands to: the rank, a TF task's
    ``type-index`` when it has none, and ``0`` outside a distributed job (a single
    process is the only rank of its job)."""
    found = process_rank(environ)
    return "0" if found is None else found.label
