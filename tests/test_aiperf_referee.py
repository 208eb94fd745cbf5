"""scripts/aiperf_check.py's referee: the server's own request log, split by when each client ran, decides
which client read the server right when the two disagree (docs/methodology.md#checked-against-other-tools)."""

from __future__ import annotations

import math

from scripts.aiperf_check import Phase, referee, server_view

LOG = [
    "serving numpy (random:gpt2) at http://127.0.0.1:1/v1 as 'gpt2'",
    "2026-12-02T12:10:53.920 200 cmpl-a tokens=64 ttft_ms=300.0 total_ms=3135.0 stream finish=length",
    "2026-12-02T12:10:56.750 200 cmpl-b tokens=64 ttft_ms=200.0 total_ms=3035.0 stream finish=length",
    '2026-12-02T12:10:57.000 400 - tokens=0 ttft_ms=- total_ms=0.4 error="bad"',
    "2026-12-02T12:15:10.000 200 cmpl-c tokens=64 ttft_ms=250.0 total_ms=3652.0 stream finish=length",
]


def test_the_server_view_takes_the_phase_s_finished_requests_only():
    count, ttft, tpot = server_view(LOG, Phase("aiperf", "2026-12-02T12:10:50.000", "2026-12-02T12:11:00.000"))
    assert count == 2 and ttft == 250.0 and tpot == 45.0  # (3135 - 300) / 63 and (3035 - 200) / 63
    count, ttft, tpot = server_view(LOG, Phase("bench", "2026-12-02T12:15:00.000", "2026-12-02T12:16:00.000"))
    assert (count, ttft, tpot) == (1, 250.0, 54.0)


def test_a_phase_without_requests_reads_nan_and_the_table_has_a_row_per_phase():
    assert math.isnan(server_view(LOG, Phase("none", "2026-12-02T13:00:00", "2026-12-02T13:01:00"))[1])
    table = referee(LOG, [Phase("aiperf, concurrency 1", "2026-12-02T12:10:50", "2026-12-02T12:11:00", "TTFT 1")])
    assert "| aiperf, concurrency 1 | 2 | 250.0 | 45.0 | TTFT 1 |" in table
