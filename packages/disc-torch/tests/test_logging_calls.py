"""A logging call inside a model does not split what ``optimize`` compiles: it is skipped
in compiled code and named in one warning (disc_torch.logging_calls); off, torch's graph
break comes back."""

from __future__ import annotations

import functools
import logging
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

import disc_torch
from disc_torch.logging_calls import SkippedLogging

LOG = logging.getLogger("disc_test.logging_calls")


class _Chatty(nn.Module):
    """Logs between its ops, as transformers' models do (``warning_once`` on GPT-2's loss
    path)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        LOG.warning("hidden width %d", h.shape[-1])
        LOG.warning_once("computed once")  # type: ignore[attr-defined]
        return F.gelu(h).sum(-1)


class _Branchy(nn.Module):
    """Branches on ``isEnabledFor``: not an emitter, so not skipped (skipped, it would
    answer None, and the scale would be 3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = 2.0 if LOG.isEnabledFor(logging.CRITICAL) else 3.0
        return torch.tanh(x).sum(-1) * scale


@pytest.fixture
def warning_once(monkeypatch):
    """``Logger.warning_once`` as transformers adds it: a cached method named after an
    emitter."""

    @functools.lru_cache(None)
    def warning_once(self, *args, **kwargs):
        self.warning(*args, **kwargs)

    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)


def _run(model: nn.Module, **options) -> tuple[list[str], int]:
    counters.clear()
    compiled = disc_torch.optimize(model, cache_graphs=False, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 1, 7):
            x = torch.randn(2, n, 8)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    return [str(w.message) for w in caught], int(counters["stats"]["unique_graphs"])


def test_logging_calls_are_skipped_instead_of_splitting_the_graph(warning_once):
    said, graphs = _run(_Chatty())
    assert graphs == 1, "a logging call split the graph"
    skipped = [m for m in said if "inside the traced code is skipped" in m]
    assert any("'disc_test.logging_calls'.warning(" in m for m in skipped), said
    assert any("'disc_test.logging_calls'.warning_once(" in m for m in skipped), said
    # each names the line of the model that logs
    assert all(f"{__file__}:" in m for m in skipped), skipped
    for graph in disc_torch.report().graphs:  # the training step's forward and backward
        assert all(n.status.value == "compiled" for n in graph.nodes
                   if n.op.startswith("aten.")), [(n.op, n.status) for n in graph.nodes]


def test_off_the_graph_breaks_at_each_logging_call_as_in_torch(warning_once, caplog):
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        said, graphs = _run(_Chatty(), skip_logging_calls=False)
    assert graphs > 1
    assert not any("inside the traced code is skipped" in m for m in said)
    assert "hidden width 16" in caplog.text  # the call ran, in Python


def test_a_logger_query_is_not_skipped():
    said, _ = _run(_Branchy())  # matches eager: the scale is 2
    assert not any("inside the traced code is skipped" in m for m in said)


def test_only_message_emitting_logger_methods_are_skipped():
    skipped = SkippedLogging({print})
    assert print in skipped  # what torch's set held stays in it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in (LOG.debug, LOG.info, LOG.warning, LOG.warn, LOG.error,
                       LOG.exception, LOG.critical, LOG.log):
            assert method in skipped, method
    for other in (LOG.isEnabledFor, LOG.getEffectiveLevel, LOG.getChild, LOG.setLevel,
                  logging.warning, len):
        assert other not in skipped, other
