"""The aiperf cross-check stays runnable: scripts/aiperf_check.py against one `serve` of random:tiny, one
level, a couple of requests (`-m slow`; skipped where `.venv-aiperf` has no aiperf: `make aiperf`).

It checks that both tools measured the same server and the table came out whole, not how fast anything
is (the figures themselves are for a quiet machine: docs/methodology.md#checked-against-other-tools)."""

from __future__ import annotations

import math

import pytest

from scripts import aiperf_check

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aiperf():
    exe = aiperf_check.AIPERF_VENV / "bin" / "aiperf"
    if not exe.exists():
        pytest.skip(f"aiperf is not installed in {aiperf_check.AIPERF_VENV.name} (make aiperf)")
    return exe


def test_aiperf_and_bench_measure_one_server_side_by_side(aiperf, tmp_path, capsys):
    argv = ["--levels", "1", "--requests", "2", "--repeats", "1", "--probe", "2", "--new-tokens", "16"]
    assert aiperf_check.main([*argv, "--no-install", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ")
    row = next(line for line in out.splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 10 and all(c != "-" for c in cells), row
    assert all(math.isfinite(float(c)) and float(c) > 0 for c in cells[1:8]), row
    assert (tmp_path / "bench" / "load.csv").exists() and list(tmp_path.glob("aiperf-c1/**/profile_export_aiperf.json"))
    referee = out.split("The server's own clock", 1)[1]
    counts = [int(line.split("|")[2]) for line in referee.splitlines() if line.startswith(("| aiperf", "| whistle"))]
    assert len(counts) == 2 and all(c > 0 for c in counts), referee
