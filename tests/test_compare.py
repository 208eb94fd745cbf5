"""`compare BASE NEW`: the shift's maths, the verdict on scripted records, refusals and the gate."""

from __future__ import annotations

import json
import math
import random

import pytest

from tests.run_records import run_record
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.report.comparison import compare_folders
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.shift import hodges_lehmann, moses_rank


def _folder(path, itl: dict[str, list[float]], env: dict | None = None, ttft: float = 10.0, **fields):
    runs = [
        run_record(name, i + 1, itl=value, ttft_ms=ttft + 0.01 * i, **fields)
        for name, values in itl.items()
        for i, value in enumerate(values)
    ]
    write_results(path, runs, [], env if env is not None else {"settings": {"threads": 0, "prompt": None}})
    return path


def _noisy(center: float, n: int = 8, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-0.02, 0.02)) for _ in range(n)]


def test_moses_rank_matches_the_mann_whitney_table():
    assert moses_rank(10, 10)[0] == 24  # two-sided 5%: U critical 23, so the 24th difference
    assert moses_rank(5, 5)[0] == 3
    c, level = moses_rank(3, 3)  # 20 orderings: the widest interval covers 90%
    assert c == 1 and level == pytest.approx(0.9)


def test_shift_recovers_a_known_ratio():
    base = [1.0, 1.1, 1.2, 1.3, 1.4]
    shift = hodges_lehmann(base, [v * 1.5 for v in base])
    assert shift.ratio == pytest.approx(1.5)
    assert shift.low <= 1.5 <= shift.high


def test_shift_interval_covers_at_its_level():
    rng = random.Random(3)
    covered = 0
    trials = 400
    for _ in range(trials):
        x = [rng.lognormvariate(0, 0.2) for _ in range(6)]
        y = [1.3 * rng.lognormvariate(0, 0.2) for _ in range(6)]
        s = hodges_lehmann(x, y)
        covered += s.low <= 1.3 <= s.high
    assert covered / trials >= s.level - 0.04  # binomial noise of 400 trials


@pytest.mark.parametrize(
    ("new_itl", "word"),
    [(2.6, "slower"), (1.4, "faster"), (2.0, "not distinguishable")],
    ids=["clearly-slower", "clearly-faster", "overlapping"],
)
def test_verdict_on_scripted_records(tmp_path, new_itl, word):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0), "numpy": _noisy(3.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(new_itl, seed=1), "numpy": _noisy(3.0, seed=2)})
    c = compare_folders([base], [new])
    verdicts = {(r.engine, r.metric): r.verdict for r in c.rows}
    assert verdicts[("hf", "ms_per_token")] == word
    assert verdicts[("numpy", "ms_per_token")] == "not distinguishable"


def test_an_engine_missing_from_one_folder_is_named_not_compared(tmp_path, capsys):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0), "numpy": _noisy(3.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0, seed=4)})
    assert main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "only in BASE (not compared): numpy" in out


def test_different_settings_are_refused_in_one_line(tmp_path, capsys):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0)}, new_tokens=40)
    assert main(["compare", str(base), str(new)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "new_tokens 20 vs 40" in err and "--allow-different" in err
    assert main(["compare", str(base), str(new), "--allow-different"]) == 0


def test_different_thread_settings_are_refused(tmp_path, capsys):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)}, env={"settings": {"threads": 0}})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0)}, env={"settings": {"threads": 1}})
    assert main(["compare", str(base), str(new)]) == 2
    assert "threads default vs 1" in capsys.readouterr().err


def test_gate_exit_codes(tmp_path, capsys):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0), "numpy": _noisy(3.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.6, seed=1), "numpy": _noisy(3.0, seed=2)})
    assert main(["compare", str(base), str(new), "--fail-if-slower", "10"]) == 1
    err = capsys.readouterr().err
    assert "hf" in err and "numpy" not in err
    assert main(["compare", str(base), str(new), "--fail-if-slower", "50"]) == 0  # 30% slower: within 50%
    assert main(["compare", str(base), str(base), "--fail-if-slower", "1"]) == 0


def test_the_gate_catches_a_slower_first_token_with_decode_unchanged(tmp_path, capsys):
    """A prefill regression (a C build without its vector unit) leaves memory-bound decode where it was."""
    base = _folder(tmp_path / "a", {"native": _noisy(2.0)})
    new = _folder(tmp_path / "b", {"native": _noisy(2.0, seed=1)}, ttft=25.0)
    assert main(["compare", str(base), str(new), "--fail-if-slower", "5"]) == 1
    assert "native TTFT" in capsys.readouterr().err


def test_json_and_markdown(tmp_path, capsys):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.6, seed=1)})
    assert main(["compare", str(base), str(new), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = next(r for r in data["rows"] if r["metric"] == "ms_per_token")
    assert row["verdict"] == "slower" and row["low"] > 1 and not math.isnan(row["level"])
    assert main(["compare", str(base), str(new), "--markdown"]) == 0
    assert "| hf | ms/token (ms) |" in capsys.readouterr().out


def test_several_folders_per_side_pool_their_runs(tmp_path):
    a1 = _folder(tmp_path / "a1", {"hf": _noisy(2.0, 3)})
    a2 = _folder(tmp_path / "a2", {"hf": _noisy(2.0, 3, seed=5)})
    b = _folder(tmp_path / "b", {"hf": _noisy(2.6, 6, seed=1)})
    c = compare_folders([a1, a2], [b])
    row = next(r for r in c.rows if r.metric == "ms_per_token")
    assert (row.shift.n_base, row.shift.n_new) == (6, 6) and row.verdict == "slower"


def test_shares_of_each_machines_limits(tmp_path):
    """B's memory is half as fast: the engine is slower there, and at the same share of its floor."""
    env_a = {"settings": {"threads": 0}, "bandwidth": {"gb_s": 20.0}, "machine": {"cpu": "A"}}
    env_b = {"settings": {"threads": 0}, "bandwidth": {"gb_s": 10.0}, "machine": {"cpu": "B"}}
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)}, env=env_a, bandwidth_gb_s=10.0)
    new = _folder(tmp_path / "b", {"hf": _noisy(4.0, seed=1)}, env=env_b, bandwidth_gb_s=5.0)
    c = compare_folders([base], [new])
    share = c.normalised[0]
    assert share.base_floor_share == pytest.approx(0.5) and share.new_floor_share == pytest.approx(0.5)
    assert any("different machines" in text for text in c.caveats)


def test_a_busy_run_is_a_caveat(tmp_path):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)}, machine_flag="steal 9.0% > 5%")
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0)})
    c = compare_folders([base], [new])
    assert any(text.startswith("BASE: the machine was busy") and "steal 9.0%" in text for text in c.caveats)


def test_the_html_report_gets_a_section_against_its_baseline(tmp_path):
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.6, seed=1)})
    assert main(["report", str(new), "--baseline", str(base), "--out", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "Against the baseline" in page and "slower" in page


def test_cold_start_counts_each_worker_once_warm_up_or_not(tmp_path):
    def folder(name, cold):
        runs = [run_record("hf", 0, is_warmup=True, cold_start_s=cold)] + [run_record("hf", r) for r in (1, 2, 3)]
        write_results(tmp_path / name, runs, [], {"settings": {"threads": 0}})
        return tmp_path / name

    c = compare_folders([folder("a", 1.0)], [folder("b", 2.0)])
    row = next(r for r in c.rows if r.metric == "cold_start_s")
    assert row.shift.ratio == pytest.approx(2.0) and row.verdict.startswith("not distinguishable (too few runs")


def test_a_change_inside_the_smallest_effect_reads_same_not_smaller(tmp_path, capsys):
    """Peak RSS is nearly constant: 600 against 599.4 MB (0.1%) has an interval a hair wide, all below 1.
    That is no news: inside --min-effect (1% by default) the verdict says so; --min-effect 0 reads any change."""
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)}, peak_rss_mb=600.0)
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0, seed=1)}, peak_rss_mb=599.4)
    rss = {m: [r for r in compare_folders([base], [new], m).rows if r.metric == "peak_rss_mb"][0] for m in (1, 0)}
    assert rss[1].verdict == "same within 1%"
    assert rss[0].verdict == "smaller"
    assert main(["compare", str(base), str(new), "--min-effect", "0"]) == 0
    assert "smaller" in capsys.readouterr().out
    assert main(["compare", str(base), str(new), "--min-effect", "nan"]) == 2  # argparse's usage error
    assert "--min-effect" in capsys.readouterr().err
