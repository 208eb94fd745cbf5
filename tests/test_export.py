import csv
import json

import pytest

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.storage.atomic import atomic_write

RUN_COLUMNS_REQUIRED = [
    "run_id",
    "backend",
    "model",
    "weights",
    "device",
    "dtype",
    "threads",
    "prompt_tokens",
    "new_tokens",
    "decoding",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "repeat",
    "is_warmup",
    "import_s",
    "load_s",
    "ttft_ms",
    "tpot_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "decode_tok_s",
    "e2e_s",
    "peak_rss_mb",
    "status",
    "error",
]
TOKEN_COLUMNS_REQUIRED = [
    "run_id",
    "backend",
    "repeat",
    "is_warmup",
    "token_index",
    "token_id",
    "text",
    "t_ms",
    "itl_ms",
    "phase",
]


@pytest.fixture(scope="module")
def result(tiny_model):
    config = BenchConfig(
        model="random:tiny", backends=("a",), prompt_tokens=4, new_tokens=4, repeats=2, warmup=1, threads=1
    )
    with registry.use([fake_engines.spec("a", decode_s=0.002)]):
        return BenchSession(config).run()


def test_schema_of_the_three_files(result, tmp_path):
    write_results(tmp_path, result.runs, result.tokens, result.environment)
    with (tmp_path / "runs.csv").open() as f:
        runs = list(csv.DictReader(f))
    with (tmp_path / "tokens.csv").open() as f:
        tokens = list(csv.DictReader(f))
    assert list(runs[0])[: len(RUN_COLUMNS_REQUIRED)] == RUN_COLUMNS_REQUIRED
    assert list(tokens[0])[: len(TOKEN_COLUMNS_REQUIRED)] == TOKEN_COLUMNS_REQUIRED  # the core schema leads
    assert len(runs) == 3 and [r["is_warmup"] for r in runs] == ["true", "false", "false"]
    assert len(tokens) == 12 and tokens[0]["itl_ms"] == "" and tokens[1]["phase"] == "decode"
    assert float(tokens[1]["t_ms"]) >= float(tokens[0]["t_ms"]) + float(tokens[1]["itl_ms"]) - 1e-3
    env = json.loads((tmp_path / "environment.json").read_text())
    assert {"app", "machine", "python", "libraries", "model", "settings"} <= set(env)
    assert env["machine"]["cores_logical"] >= 1 and env["model"]["weights_sha256_16"]
    with (tmp_path / "summary.csv").open() as f:
        summary = {row["metric"]: row for row in csv.DictReader(f)}
    assert summary["tpot_ms"]["n"] == "2"  # the warm-up is left out
    tpot = summary["tpot_ms"]
    assert float(tpot["mean_ci95_low"]) <= float(tpot["mean"]) <= float(tpot["mean_ci95_high"])
    # The median with its own interval: two runs give min..max at 50% confidence.
    assert float(tpot["median_ci_low"]) <= float(tpot["median"]) <= float(tpot["median_ci_high"])
    assert float(tpot["median_ci_level"]) == 0.5
    assert set(summary) == {
        "ttft_ms",
        "ms_per_token",
        "itl_p50_ms",
        "tpot_ms",
        "decode_tok_s",
        "bandwidth_gb_s",
        "cpu_s_per_token",
        "itl_ms_pooled",
    }
    assert summary["itl_ms_pooled"]["n"] == "6"  # 3 gaps in each of the 2 measured runs
    assert not list(tmp_path.glob(".*.tmp"))
    for name in ("runs.csv", "tokens.csv", "environment.json"):  # ordinary files, not mkstemp's 0600
        assert (tmp_path / name).stat().st_mode & 0o044 == 0o044


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "runs.csv"
    target.write_text("old contents")
    with pytest.raises(RuntimeError), atomic_write(target) as f:
        f.write("half of the new")
        raise RuntimeError("disk full, say")
    assert target.read_text() == "old contents"
    assert list(tmp_path.iterdir()) == [target]


def test_unwritable_folder_is_an_error(result, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        write_results(blocker / "sub", result.runs, result.tokens, result.environment)


def test_numbers_keep_their_digits_in_the_csvs_and_the_window_s_table():
    """6 significant digits below 1,000; above, 9 and no exponent: a token's time 32.5 s into a run
    keeps its microseconds (Replay and a reopened session rebuild its gaps from it), and the window's
    table shows what runs.csv holds (4 digits had turned 12345.6 into 1.235e+04)."""
    from whistle_stop.backends.results.export import format_number

    assert format_number(1.23456789) == "1.23457"
    assert format_number(32512.3456789) == "32512.3457"
    assert format_number(12345.6) == "12345.6"
    assert format_number(497758208.0) == "497758208"
    pytest.importorskip("PySide6")
    from whistle_stop.gui.results_model import format_cell

    assert format_cell(12345.6) == "12345.6"
