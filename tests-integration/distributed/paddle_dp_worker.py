"""One process of test_paddle_distributed.py's jobs (a file: ``paddle.jit.to_static`` needs
the source of what it converts).

``python paddle_dp_worker.py OUT dp``: a rank of a ``paddle.distributed.launch`` job. A
small model (layer norm, two linear layers, GELU, MSE loss inside the forward) wrapped as
``disc_paddle.compile(paddle.DataParallel(model))`` trains with SGD on global batches of
varying size, this rank taking its half; Paddle all-reduces the gradients. Each step also
averages the loss over the ranks with a DISC-compiled function that calls
``paddle.distributed.all_reduce`` between two computations (the all-reduce must stay in
Paddle and happen: were it skipped, each rank would see its own loss).

``python paddle_dp_worker.py OUT single``: the same training in one process on the whole
global batch, in Paddle alone: the reference.

Each process writes ``OUT/result-<rank>.json`` (losses, counts) and ``OUT/arrays-<rank>.npz``
(every parameter's gradient at every step and the final parameters).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F

#: global batch sizes, one per step: each rank takes half (4, 3, 5, 1, 6, 2 rows): every
#: step a size the compiled programs never saw
GLOBAL_BATCHES = (8, 6, 10, 2, 12, 4)
D_IN, HIDDEN, D_OUT = 16, 32, 4


class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.norm = paddle.nn.LayerNorm(D_IN)
        self.l1 = paddle.nn.Linear(D_IN, HIDDEN)
        self.l2 = paddle.nn.Linear(HIDDEN, D_OUT)

    def forward(self, x, y):
        h = F.gelu(self.l1(self.norm(x)))
        return F.mse_loss(self.l2(h), y)


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + step)
    n = GLOBAL_BATCHES[step]
    return (rng.standard_normal((n, D_IN)).astype(np.float32),
            rng.standard_normal((n, D_OUT)).astype(np.float32))


def averaged(loss):
    """The mean of ``loss`` over the ranks: computed, all-reduced in place by Paddle,
    computed again (so DISC has clusters on both sides of the collective)."""
    t = loss * 2.0 + 1.0
    dist.all_reduce(t)
    return (t - dist.get_world_size()) * (0.5 / dist.get_world_size())


def main(out: Path, mode: str) -> None:
    distributed = mode == "dp"
    if distributed:
        import disc_paddle

        dist.init_parallel_env()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    paddle.seed(2024)
    net = Net()
    model = disc_paddle.compile(paddle.DataParallel(net)) if distributed else net
    mean_over_ranks = disc_paddle.compile(averaged, min_cluster_size=1) if distributed \
        else None
    opt = paddle.optimizer.SGD(0.2, parameters=model.parameters())
    losses, averages, arrays = [], [], {}
    for step in range(len(GLOBAL_BATCHES)):
        x, y = batch(step)
        rows = len(x) // world
        part = slice(rank * rows, (rank + 1) * rows)
        loss = model(paddle.to_tensor(x[part]), paddle.to_tensor(y[part]))
        loss.backward()  # DataParallel all-reduces (averages) the gradients
        for name, p in net.named_parameters():
            arrays[f"grad/{step}/{name}"] = p.grad.numpy()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
        if mean_over_ranks is not None:
            with paddle.no_grad():
                averages.append(float(mean_over_ranks(loss.detach())))
    for name, p in net.named_parameters():
        arrays[f"param/{name}"] = p.numpy()
    result = {"rank": rank, "world": world, "losses": losses, "averages": averages}
    if distributed:
        from disc_paddle import custom_op

        result.update(compile_count=disc_paddle.compile_count(),
                      library_builds=custom_op.build_count(),
                      rewrites=net.forward.rewrites)
    np.savez(out / f"arrays-{rank}.npz", **arrays)
    (out / f"result-{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
