"""benchmarks/provenance.py: every result file says on which CPU it was measured, down to
the core generation and cache size a generic VM model name ("AMD EPYC") hides."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import provenance  # noqa: E402


def _cache(root: Path, index: int, level: int, kind: str, size: str) -> None:
    d = root / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_the_last_level_cache_is_the_highest_data_level(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "32K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 2, "Unified", "512K")
    _cache(tmp_path, 3, 3, "Unified", "32768K")
    assert provenance.last_level_cache(str(tmp_path)) == 32 << 20
    assert provenance.last_level_cache(str(tmp_path / "missing")) is None


def test_the_record_and_headline_carry_the_cpu_identity():
    record = provenance.machine(2, {"torch": "2.13.0"}, {"eager": "MKL"})
    ident = record["cpu_id"]
    assert set(ident) >= {"llc_bytes"}
    line = provenance.headline(record)
    assert line.startswith(f"machine: {record['cpu']}") and "2 threads" in line
    fake = {**record, "cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 25,
                                                     "model": 1, "generation": "Zen 3/Zen 4",
                                                     "llc_bytes": 32 << 20}}
    assert provenance.headline(fake).startswith("machine: AMD EPYC [Zen 3/Zen 4, LLC 32 MB] (")
    older = {**fake, "cpu_id": {}}  # a record from before the identity was kept
    assert provenance.headline(older).startswith("machine: AMD EPYC (")


def test_host_speed_measures_copy_matmul_and_interpreter():
    speed = provenance.host_speed(repeats=2, min_seconds=0.0)
    assert set(speed) == {"copy_64mib_gbps", "numpy_sgemm_512_gflops", "python_loop_mips"}
    assert all(v > 0 for v in speed.values())


def test_a_run_whose_host_slowed_down_is_flagged(monkeypatch):
    start = {"copy_64mib_gbps": 26.0, "numpy_sgemm_512_gflops": 150.0, "python_loop_mips": 22.0}
    record = provenance.machine(2, {}, {})
    record["host_speed_start"] = start
    monkeypatch.setattr(provenance, "host_speed", lambda: dict(start, copy_64mib_gbps=25.0))
    line = provenance.finish(record)
    assert record["host_speed_end"]["copy_64mib_gbps"] == 25.0
    assert record["host_speed_drift"]["moved"] == [] and "WARNING" not in line
    assert record["load_avg_1m_end"] is not None and "at end: copy 25.0 GB/s" in line
    slow = dict(start, copy_64mib_gbps=7.0, python_loop_mips=11.0)
    monkeypatch.setattr(provenance, "host_speed", lambda: slow)
    line = provenance.finish(record)
    assert record["host_speed_drift"]["moved"] == ["copy_64mib_gbps", "python_loop_mips"]
    assert record["host_speed_drift"]["end_over_start"]["copy_64mib_gbps"] == 0.269
    assert "WARNING: the host's speed moved" in line
