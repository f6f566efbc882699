"""compile_clusters' split-and-retry: what a bridge cannot launch is halved, not dropped."""

from __future__ import annotations

from types import SimpleNamespace

from disc_core.bridge import compile_clusters


def _lowered(members: list[str]) -> SimpleNamespace:
    # one output per member, as a cluster whose every op feeds something outside it
    return SimpleNamespace(graph=SimpleNamespace(outputs=list(members)), members=members)


def test_a_cluster_with_more_outputs_than_the_launch_op_allows_is_halved():
    built: list[list[str]] = []

    def compile(low):
        built.append(low.members)
        return SimpleNamespace(artifact=SimpleNamespace(key="k" * 64)), "miss", 0.0

    members = [f"n{i}" for i in range(10)]
    attempts = compile_clusters([members], _lowered, None, need_native=True, min_size=1,
                                compile=compile, max_outputs=4)
    assert all(a.ok for a in attempts)
    assert [len(a.members) for a in attempts] == [2, 3, 2, 3]  # 10 -> 5 + 5 -> 2+3, 2+3
    assert sum((a.members for a in attempts), []) == members
    assert built == [a.members for a in attempts]  # nothing over the limit reached compile


def test_a_piece_that_cannot_be_halved_further_fails_saying_why():
    attempts = compile_clusters([["a", "b", "c"]], _lowered, None, need_native=True,
                                min_size=3, compile=lambda low: (None, "miss", 0.0),
                                max_outputs=2)
    assert len(attempts) == 1 and not attempts[0].ok
    assert "3 outputs; the launch op returns at most 2" in attempts[0].error
