"""load_results reads back exactly what write_results wrote, with the right types."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pytest

from whistle_stop.backends.results.export import RUNS_CSV, TOKENS_CSV, write_results
from whistle_stop.backends.results.reader import ResultsError, load_results
from whistle_stop.backends.results.records import RunRecord, TokenRecord
from whistle_stop.backends.status import RunStatus

from .run_records import run_record


def _run(run_id: str, **changes) -> RunRecord:
    """A record with every kind of field set to a value other than its default (and `changes` set after
    construction, as a reader would find them)."""
    record = run_record(
        "hf",
        1,
        run_id=run_id,
        model="random:tiny",
        weights="random",
        threads=2,
        prompt_tokens=12,
        new_tokens=3,
        top_p=0.9,
        seed=7,
        import_s=1.25,
        load_s=0.5,
        ttft_ms=12.5,
        tpot_ms=1.5,
        itl_p50_ms=1.4,
        itl_p90_ms=1.9,
        itl_p99_ms=2.0,
        decode_tok_s=666.0,
        e2e_s=0.0155,
        peak_rss_mb=371.5,
        status=RunStatus.OK,
        tokens_generated=3,
        cold_start_s=None,
        bandwidth_gb_s=0.125,
        concurrent=True,
        reference="hf",
        agree_tokens=3,
        first_divergence=None,
        notes="attn=sdpa; threads=2",
    )
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def _tokens(run_id: str) -> list[TokenRecord]:
    texts = [' hello, "world"', "", "\nline two\n"]  # commas, quotes, empty text, newlines
    return [
        TokenRecord(
            run_id,
            "hf",
            1,
            False,
            i,
            100 + i,
            text,
            12.5 + 1.5 * i,
            None if i == 0 else 1.5,
            "prefill" if i == 0 else "decode",
        )
        for i, text in enumerate(texts)
    ]


def test_round_trip_keeps_values_and_types(tmp_path):
    runs = [
        _run("hf/r1"),
        _run(
            "hf/w1",
            is_warmup=True,
            status=RunStatus.CRASHED,
            error="worker crashed: exit 3",
            ttft_ms=None,
            tpot_ms=None,
            agree_tokens=None,
            first_divergence=2,
            concurrent=False,
        ),
    ]
    tokens = _tokens("hf/r1")
    env = {"reference": "hf", "settings": {"prompt": "Hi"}}
    write_results(tmp_path, runs, tokens, env)

    runs_back, tokens_back, env_back = load_results(tmp_path)
    assert env_back == env
    assert runs_back == runs
    assert tokens_back == tokens
    for record in runs_back:
        for f in fields(RunRecord):
            value = getattr(record, f.name)
            assert value is None or type(value) is type(getattr(runs[runs_back.index(record)], f.name))
    assert runs_back[1].is_warmup is True and runs_back[0].concurrent is True
    assert runs_back[1].ttft_ms is None and runs_back[0].cold_start_s is None
    assert isinstance(runs_back[0].threads, int) and isinstance(runs_back[0].ttft_ms, float)
    assert tokens_back[0].itl_ms is None and tokens_back[1].text == ""
    assert runs_back[1].status is RunStatus.CRASHED  # the plain word in the file reads back as the enum
    assert "crashed" in (tmp_path / RUNS_CSV).read_text().splitlines()[2].split(",")


def test_a_status_word_from_a_newer_file_reads_as_an_error(tmp_path):
    write_results(tmp_path, [_run("hf/r1")], [], {})
    path = tmp_path / RUNS_CSV
    path.write_text(path.read_text().replace(",ok,", ",exploded,"))
    (run,) = load_results(tmp_path)[0]
    assert run.status is RunStatus.ERROR and run.status.is_failure


def test_missing_optional_files_give_empty_results(tmp_path):
    write_results(tmp_path, [_run("hf/r1")], [], {})
    (tmp_path / TOKENS_CSV).unlink()
    (tmp_path / "environment.json").unlink()
    runs, tokens, env = load_results(tmp_path)
    assert len(runs) == 1 and tokens == [] and env == {}


def test_not_a_results_folder(tmp_path):
    with pytest.raises(ResultsError, match="no runs.csv"):
        load_results(tmp_path)
    with pytest.raises(ResultsError, match="not a folder"):
        load_results(tmp_path / "nope")


def test_bad_cells_and_columns_are_reported(tmp_path):
    write_results(tmp_path, [_run("hf/r1")], [], {})
    text = (tmp_path / RUNS_CSV).read_text()
    (tmp_path / RUNS_CSV).write_text(text.replace(",2,12,3,", ",two,12,3,"))
    with pytest.raises(ResultsError, match="column threads"):
        load_results(tmp_path)
    (tmp_path / RUNS_CSV).write_text("run_id,backend\nx,hf\n")
    with pytest.raises(ResultsError, match="lacks the column"):
        load_results(tmp_path)
    write_results(tmp_path, [_run("hf/r1")], [], {})
    (tmp_path / "environment.json").write_text("[1, 2]")
    with pytest.raises(ResultsError, match="JSON object"):
        load_results(tmp_path)


def test_a_file_cut_off_mid_row_is_reported(tmp_path):
    write_results(tmp_path, [_run("hf/r1")], _tokens("hf/r1"), {})
    text = (tmp_path / TOKENS_CSV).read_text()
    (tmp_path / TOKENS_CSV).write_text(text[: text.rindex(",", 0, len(text) - 20)])  # the last row loses its tail
    with pytest.raises(ResultsError, match="cut short"):  # was a TypeError from TokenRecord()
        load_results(tmp_path)


@pytest.mark.parametrize(
    "environment, why",
    [
        ({"settings": "x"}, "settings should be an object, not str"),
        ({"harness": "x"}, "harness should be an object, not str"),
        ({"settings": {"backends": 5}}, "settings.backends should be a list, not int"),
        ({"engines": {"hf": [1]}}, "engines\\['hf'\\] should be an object, not list"),
        ({"prefill_roofline": {"x": 1}}, "prefill_roofline should be a list, not dict"),
        ({"prefill_roofline": [5]}, "prefill_roofline\\[0\\] should be an object, not int"),
    ],
)
def test_a_damaged_environment_is_refused_in_one_line(tmp_path, environment, why):
    write_results(tmp_path, [_run("hf/r1")], [], environment)  # the report met these as an AttributeError
    with pytest.raises(ResultsError, match=why):
        load_results(tmp_path)


def test_nan_in_required_float_reads_back_as_nan(tmp_path):
    write_results(tmp_path, [_run("hf/r1", temperature=math.nan)], [], {})
    runs, _, _ = load_results(tmp_path)
    assert math.isnan(runs[0].temperature)


def test_real_bench_folder(tmp_path, tiny_model):
    """A folder written by a real session of scripted engines reads back whole."""
    from tests.fake_engines import spec
    from whistle_stop.backends import registry
    from whistle_stop.backends.runs.bench import BenchConfig, BenchSession

    config = BenchConfig(
        model="random:tiny", backends=("fast", "slow"), prompt="Hello", new_tokens=5, repeats=1, warmup=0
    )
    with registry.use([spec("fast"), spec("slow", decode_s=0.002)]):
        result = BenchSession(config).run()
    write_results(tmp_path, result.runs, result.tokens, result.environment)
    runs, tokens, env = load_results(tmp_path)
    assert [r.run_id for r in runs] == [r.run_id for r in result.runs]
    assert [t.token_id for t in tokens] == [t.token_id for t in result.tokens]
    assert all(r.agree_tokens == 5 for r in runs)
    assert env["reference"] == "fast"
    assert json.loads(json.dumps(env)) == env


@pytest.mark.parametrize("n, level", [(6, 0.96875), (8, 0.992188), (9, 0.960938)])
def test_summary_csv_carries_the_true_level_of_the_median_interval(tmp_path, n, level):
    """summary.csv gives each interval the level of its own run count (min..max up to 8 runs)."""
    from whistle_stop.backends.results.export import SUMMARY_CSV, read_csv
    from whistle_stop.backends.results.summary import interval_label

    write_results(tmp_path, [_run(f"hf/r{i}", repeat=i, ttft_ms=10.0 + i) for i in range(n)], [], {})
    (ttft,) = [row for row in read_csv(tmp_path / SUMMARY_CSV) if row["metric"] == "ttft_ms"]
    assert float(ttft["median_ci_level"]) == pytest.approx(level, abs=1e-6)
    assert f"{100 * level:.1f}%" in interval_label(n)
    min_max = (float(ttft["median_ci_low"]), float(ttft["median_ci_high"])) == (10.0, 10.0 + n - 1)
    assert min_max == (n <= 8) == ("min–max" in interval_label(n))


def test_runs_of_keeps_one_engines_records_in_order():
    from types import SimpleNamespace

    from whistle_stop.backends.results.records import runs_of

    records = [SimpleNamespace(backend=b, i=i) for i, b in enumerate(["a", "b", "a", "c", "a"])]
    assert [r.i for r in runs_of(records, "a")] == [0, 2, 4]
    assert runs_of(records, "missing") == [] and runs_of(iter(records), "c")[0].i == 3
