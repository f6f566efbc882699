"""benchmarks/library_bound.py: the same-library ceiling of torch_models.py rests on it
recording exactly the library calls (linear GEMMs, convolutions, forward and backward) of an
eager step and replaying them on their layouts."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import library_bound  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv(x)).mean((2, 3))
        q = h.unsqueeze(1)
        att = (q @ q.transpose(1, 2)).softmax(-1) @ q  # bmm: not a library call here
        return self.fc(att.squeeze(1)).sum()


def step(net: nn.Module):
    def run(x: torch.Tensor, y: torch.Tensor) -> None:
        net(x).backward()
    return run


def names(calls) -> list[str]:
    return [func.overloadpacket.__name__ for func, _, _ in calls]


def test_records_linear_and_convolution_calls_forward_and_backward() -> None:
    net = Net()
    calls = library_bound.record(step(net), torch.randn(2, 3, 5, 7), None)
    # forward: conv, addmm; backward: dX and dW GEMMs of the linear, the conv's gradients
    assert sorted(names(calls)) == ["addmm", "convolution", "convolution_backward", "mm", "mm"]
    with torch.no_grad():
        inference = library_bound.record(lambda x, y: net(x), torch.randn(1, 3, 4, 4), None)
    assert sorted(names(inference)) == ["addmm", "convolution"]


def test_replay_runs_the_same_calls_on_the_same_layouts() -> None:
    net = Net()
    x = torch.randn(2, 3, 5, 7)
    calls = library_bound.record(step(net), x, None)
    again = library_bound.record(lambda a, b: library_bound.replayer(calls)(), x, None)
    assert again == calls  # op, sizes, strides (transposed weights included) and dtypes


def test_library_only_step_picks_the_calls_of_the_batch_shape() -> None:
    net = Net()
    small, big = torch.randn(1, 3, 4, 4), torch.randn(3, 3, 9, 6)
    only = library_bound.library_only_step(step(net), [(small, None), (big, None)])
    for x in (small, big):
        want = library_bound.record(step(net), x, None)
        assert library_bound.record(only, x, None) == want
