"""disc_paddle.report() returns this process's coverage report of paddle graphs only."""

import disc_paddle
from disc_core import report


def test_report_lists_only_paddle_graphs() -> None:
    collector = report.get_collector()
    for fw, name in (("paddle", "mine"), ("torch", "theirs")):
        collector.add_graph(report.GraphReport(name=name, run=""), framework=fw)
    names = [g.name for g in disc_paddle.report().graphs]
    assert "mine" in names and "theirs" not in names
    assert {r.framework for r in disc_paddle.report().runs} == {"paddle"}


SCRIPT = '''
import sys
sys.path.insert(0, {tests!r})
import numpy as np, paddle, disc_paddle
from test_bridge import MLP
model = disc_paddle.compile(MLP(), min_cluster_size=1, excluded_ops="pd_op.relu")
for batch in (3, 5):
    (model(paddle.randn([batch, 5])) ** 2).mean().backward()
'''


def test_report_file_names_fallbacks_and_renders(tmp_path) -> None:
    """DISC_REPORT=path writes the Paddle programs' report at exit; it names each pd_op
    that fell back and why, `disc report` renders it, and it merges with another
    bridge's report."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "paddle.json"
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "DISC_REPORT": str(path)}
    subprocess.run([sys.executable, str(script)], check=True, env=env, capture_output=True,
                   cwd=tmp_path)
    data = json.loads(path.read_text())
    assert {r["framework"] for r in data["runs"]} == {"paddle"}
    nodes = [n for g in data["graphs"] for n in g["nodes"]]
    relu = [n for n in nodes if n["op"] == "pd_op.relu"]
    assert relu and all(n["status"] == "fallback" and n["reason"] == "excluded_by_user"
                        for n in relu)
    assert any(n["status"] == "compiled" for n in nodes)
    # every built cluster ran native code: that, and only that, counts as compiled
    clusters = [c for g in data["graphs"] for c in g["clusters"]]
    assert clusters and {c.get("engine") for c in clusters} <= {"native", "framework"}
    assert any(c.get("engine") == "native" for c in clusters)
    cli = [sys.executable, "-m", "disc_core.cli"]
    shown = subprocess.run(cli + ["report", str(path)], check=True, capture_output=True,
                           text=True).stdout
    assert "pd_op.relu" in shown and "excluded" in shown
    assert "engines: " in shown and " native" in shown
    # another bridge's report (another run: its own id and framework) merges with it
    other = json.loads(path.read_text())
    for r in other["runs"]:
        r["id"], r["framework"] = r["id"] + "-torch", "torch"
    for g in other["graphs"]:
        g["run"] += "-torch"
    (tmp_path / "torch.json").write_text(json.dumps(other))
    merged = tmp_path / "all.json"
    subprocess.run(cli + ["report", "merge", str(path), str(tmp_path / "torch.json"), "-o",
                          str(merged)], check=True, capture_output=True)
    both = json.loads(merged.read_text())
    assert len(both["graphs"]) == 2 * len(data["graphs"])
    assert {r["framework"] for r in both["runs"]} == {"paddle", "torch"}
