"""Figures, offscreen PNG rendering, the bandwidth probe and its cache, and HTML reports."""

import json
import subprocess
import sys

import pytest

from whistle_stop.backends.cli.main import main
from whistle_stop.backends.machine import bandwidth as bw
from whistle_stop.backends.report import figures as fg
from whistle_stop.backends.report import sweep_figures as sf
from whistle_stop.backends.report.html import build_report, environment_differences
from whistle_stop.backends.results.export import write_csv, write_results
from whistle_stop.backends.results.records import TokenRecord
from whistle_stop.backends.runs.quality import QUALITY_COLUMNS, QUALITY_CSV, QualityRow

from .run_records import run_record

WEIGHT_BYTES = {"hf": ("fp32", 4e8), "hf-int8": ("int8", 1e8)}


def _run(backend, prompt, new, repeat, ttft, tok_s, dtype="fp32"):
    return run_record(
        backend,
        repeat,
        itl=1e3 / tok_s,
        run_id=f"{backend}/p{prompt}n{new}/r{repeat}",
        model="random:tiny",
        weights="random",
        dtype=dtype,
        prompt_tokens=prompt,
        new_tokens=new,
        import_s=1.0,
        load_s=0.1,
        ttft_ms=ttft,
        itl_p90_ms=None,
        itl_p99_ms=None,
        bandwidth_gb_s=WEIGHT_BYTES[backend][1] * tok_s / 1e9,
    )


def _records():
    runs, tokens = [], []
    for backend, scale, dtype in (("hf", 1.0, "fp32"), ("hf-int8", 0.5, "int8")):
        for prompt in (16, 64):
            for new in (8, 32):
                for repeat, jitter in ((1, 0.9), (2, 1.0), (3, 1.1)):
                    run = _run(backend, prompt, new, repeat, prompt * scale * jitter, 50 / scale * jitter, dtype)
                    runs.append(run)
                    for i in range(new):
                        tokens.append(
                            TokenRecord(
                                run.run_id,
                                backend,
                                repeat,
                                False,
                                i,
                                100 + i,
                                "x",
                                i * 20.0,
                                None if i == 0 else 20.0 * scale + (prompt + i) / 100,
                                "decode",
                            )
                        )
    return runs, tokens


def test_sweep_figures_hold_medians_intervals_and_limits():
    runs, tokens = _records()
    ttft = sf.ttft_vs_prompt(runs, gb_s=10.0)
    hf = next(s for s in ttft.series if s.name == "hf")
    assert hf.x == [16.0, 64.0] and hf.y == pytest.approx([16.0, 64.0])  # pooled over output lengths
    assert all(e > 0 for e in hf.err)
    # One dashed line per precision: bytes / bandwidth, in ms (and tokens/s for decode).
    assert sorted(line.value for line in ttft.limits) == pytest.approx([10.0, 40.0])
    decode = sf.decode_vs_output(runs, gb_s=10.0)
    assert "16-token prompt" in decode.title
    assert sorted(line.value for line in decode.limits) == pytest.approx([25.0, 100.0])
    position = sf.itl_vs_position(runs, tokens, gb_s=10.0, bins=8)
    int8 = next(s for s in position.series if s.name == "hf-int8")
    assert int8.x == sorted(int8.x) and len(int8.x) > 3 and min(int8.y) >= 10.0
    assert sf.itl_vs_position(runs, [], gb_s=None).empty


def test_the_position_chart_draws_decode_s_floor_growing_with_the_kv_cache():
    """ms/token against position: (weights + KV bytes per position x position) / bandwidth, one line
    per precision, and apart for two cache sizes of one precision (an 8-bit cache beside float32)."""
    runs, tokens = _records()
    environment = {
        "engines": {
            "hf": {"dtype": "fp32", "weight_bytes_per_token": 4e8, "kv_bytes_per_position": 1e5},
            "hf-int8": {"dtype": "int8", "weight_bytes_per_token": 1e8, "kv_bytes_per_position": 1e5},
        }
    }
    figure = sf.itl_vs_position(runs, tokens, gb_s=10.0, environment=environment)
    last = max(run.prompt_tokens + index for run in runs for index in range(run.new_tokens)) + 1
    fp32, int8 = sorted(figure.limits, key=lambda limit: -limit.y[0])
    assert fp32.x == [0.0, float(last)] and fp32.y == pytest.approx([40.0, (4e8 + 1e5 * last) / 1e7])
    assert int8.y == pytest.approx([10.0, (1e8 + 1e5 * last) / 1e7]) and "int8 floor" in int8.label
    assert "KV cache up to that position" in figure.note
    environment["engines"]["hf"] = {"dtype": "int8", "weight_bytes_per_token": 1e8, "kv_bytes_per_position": 2.5e4}
    two = sf.itl_vs_position(runs, tokens, gb_s=10.0, environment=environment).limits
    assert len(two) == 2 and {"KV 100 kB/position", "KV 25 kB/position"} <= {
        label.split(", ")[1].split(":")[0] for label in (limit.label for limit in two)
    }


def test_a_bench_s_position_chart_says_its_floor_is_flat_and_labels_it_with_one_value():
    """A bench records no KV bytes per position: its floor is one flat line per precision (what a run's
    mean step read, from its GB/s), so neither its note nor its label may say it grows with the position."""
    runs, tokens = _records()
    figure = sf.itl_vs_position(runs, tokens, gb_s=10.0)
    assert figure.limits and not any(limit.x for limit in figure.limits)
    assert all("->" not in limit.label for limit in figure.limits)
    assert "up to that position" not in figure.note and "flat" in figure.note


def test_the_position_chart_gives_a_speculative_engine_its_time_per_decoded_token():
    """Tokens in bursts (4 per 20 ms pass after a first pass of 3): a median gap falls inside a burst
    (~0); each token's figure is its pass's time shared by the pass's tokens, 5 ms, the record's
    ms/token, in every bin however bins cut the passes; the first pass's tokens (in the TTFT) are
    left out, and each bin sits where its tokens are. Records without steps (older files) are left
    out and said so: a bin of in-burst tokens read a false ~0 ms/token."""
    from whistle_stop.backends.results.records import fill_metrics, token_records
    from whistle_stop.backends.worker.events import Token

    stamps = [10.0] * 3 + [10.0 + 20.0 * (1 + i // 4) for i in range(40)]
    steps = [0] * 3 + [1 + i // 4 for i in range(40)]
    events = [Token("spec/r1", i, 100 + i, "", int(t * 1e6), step=s) for i, (t, s) in enumerate(zip(stamps, steps))]
    record = run_record("spec", multi_token_steps=True, new_tokens=43, prompt_tokens=16)
    fill_metrics(record, 0, events, 1_000_000, decoded_tokens=40)
    assert record.ms_per_token == pytest.approx(5.0)
    tokens = token_records("spec/r1", "spec", 1, False, 0, events)
    (series,) = sf.itl_vs_position([record], tokens, bins=5).series
    assert series.y == pytest.approx([5.0] * len(series.y)) and len(series.y) >= 4
    assert min(series.x) >= 16 + 3 and max(series.x) <= 16 + 42  # positions of its decoded tokens
    for t in tokens:
        t.step = None
    older = sf.itl_vs_position([record], tokens, bins=48)
    assert not older.series and "not drawn: spec" in older.note and "not drawn: spec" in older.empty_reason


def test_the_decode_speed_limit_counts_the_kv_cache_a_run_reads():
    """Decode tokens/s against output length: a run's steps read the weights and, on average, the KV
    cache of prompt + n/2 positions (what its GB/s counts), so the limit falls with n."""
    runs, _ = _records()
    environment = {
        "engines": {
            "hf": {"dtype": "fp32", "weight_bytes_per_token": 4e8, "kv_bytes_per_position": 1e5},
            "hf-int8": {"dtype": "int8", "weight_bytes_per_token": 1e8, "kv_bytes_per_position": 1e5},
        }
    }
    figure = sf.decode_vs_output(runs, gb_s=10.0, environment=environment)
    lengths = sorted({r.new_tokens for r in runs})
    int8 = next(limit for limit in figure.limits if limit.label.startswith("int8"))
    assert int8.x == [float(n) for n in lengths]
    assert int8.y == pytest.approx([1e10 / (1e8 + 1e5 * (16 + n / 2)) for n in lengths])
    assert "KV cache" in figure.note


def test_the_limit_lines_take_each_precision_s_fewest_bytes_and_no_speculative_guess():
    """Without the engines' bytes (a bench folder) they are recovered from GB/s / tokens/s, except a
    speculative engine's (what target and draft read per decoded token, not its weights); two
    engines of one precision: the line of the fewer bytes, the bound of them both."""
    runs = [
        run_record("a", bandwidth_gb_s=4.0, decode_tok_s=10.0, dtype="int8"),
        run_record("b", bandwidth_gb_s=3.0, decode_tok_s=10.0, dtype="int8"),
        run_record("spec", bandwidth_gb_s=1.0, decode_tok_s=10.0, dtype="fp32", multi_token_steps=True),
    ]
    weights = fg.weight_bytes_by_backend(runs)
    assert "spec" not in weights and weights["b"] == ("int8", pytest.approx(3e8))
    (line,) = fg.limits(weights, 10.0, "ms")
    assert line.value == pytest.approx(30.0)


def test_plots_render_offscreen_to_pngs_of_the_right_size(tmp_path):
    from PySide6.QtGui import QImage

    from whistle_stop.backends.report.plots import render_png

    runs, tokens = _records()
    roofline = {
        "prefill_roofline": [{"arithmetic": "fp32", "peak_gops": 9.0, "isa": "x", "points": [[1, 1.0], [64, 9.0]]}]
    }
    figures = [
        sf.ttft_vs_prompt(runs, 10.0),
        sf.ttft_vs_prompt(runs, 10.0, roofline),
        sf.itl_vs_position(runs, tokens, 10.0),
        fg.bench_bars(runs),
        fg.speed_vs_quality([{"backend": "hf", "decode_tok_s": 50.0, "perplexity": 30.0}]),
        fg.Figure("empty", "nothing", "x", "y"),
    ]
    for index, figure in enumerate(figures):
        size = (640 + 10 * index, 400)
        path = render_png(figure, tmp_path / f"{figure.name}.png", size)
        image = QImage(str(path))
        assert path.stat().st_size > 1000 and (image.width(), image.height()) == size
    assert not list(tmp_path.glob(".*tmp*"))


def test_ttft_over_a_doubling_grid_is_drawn_on_log_axes_with_its_bars_where_the_points_are():
    """A 1..1,024 grid on linear axes leaves its short prompts in one corner: both axes go
    logarithmic, x marked at powers of two. pyqtgraph maps curves in log mode but not error bars or
    limit lines, so those are placed in log10 coordinates; the next linear figure drawn into the same
    item (the window reuses its plots) is linear again, with the axis's own ticks."""
    import math

    import pyqtgraph as pg

    from whistle_stop.backends.report.plots import draw, ensure_qt_app, log_ticks

    ensure_qt_app()
    lengths = (1, 4, 16, 64, 256, 1024)
    runs = [
        _run("hf", p, 8, r, (2.0 + p / 10) * jitter, 50) for p in lengths for r, jitter in ((1, 0.9), (2, 1), (3, 1.2))
    ]
    figure = sf.ttft_vs_prompt(runs, gb_s=10.0)
    assert figure.log_axes and "both axes logarithmic" in figure.note
    assert not sf.ttft_vs_prompt(_records()[0], gb_s=10.0).log_axes  # 16 and 64: linear

    plot = pg.PlotItem()
    draw(plot, figure)
    assert plot.getAxis("bottom").logMode and plot.getAxis("left").logMode
    major, minor = ({round(v, 6): text for v, text in level} for level in plot.getAxis("bottom")._tickLevels)
    assert [major.get(round(math.log10(p), 6)) for p in (1, 4, 64, 1024)] == ["1", "4", "64", "1024"]
    assert [minor.get(round(math.log10(p), 6)) for p in (2, 512)] == ["2", "512"]  # written where they fit
    (bars,) = [item for item in plot.items if isinstance(item, pg.ErrorBarItem)]
    series = figure.series[0]
    assert list(bars.opts["x"]) == pytest.approx([math.log10(p) for p in lengths])
    assert list(bars.opts["y"]) == pytest.approx([math.log10(y) for y in series.y])
    tops = [math.log10(y + e) - math.log10(y) for y, e in zip(series.y, series.err)]
    assert list(bars.opts["top"]) == pytest.approx(tops) and min(tops) > 0
    (line,) = [item for item in plot.items if isinstance(item, pg.InfiniteLine)]  # weights / bandwidth
    assert line.value() == pytest.approx(math.log10(figure.limits[0].value))
    low, high = plot.getViewBox().viewRange()[1]
    assert low < math.log10(min(series.y)) and high > math.log10(max(series.y))

    draw(plot, sf.ttft_vs_prompt(_records()[0], gb_s=10.0))
    assert not plot.getAxis("bottom").logMode and plot.getAxis("bottom")._tickLevels is None

    tens, twos_fives = log_ticks(math.log10(3), math.log10(600))
    assert [t for _, t in tens] == ["10", "100"] and [t for _, t in twos_fives] == ["5", "20", "50", "200", "500"]


def test_a_ttft_grid_says_why_it_has_no_decode_figures_instead_of_drawing_empty_axes(tmp_path):
    """Every run of `--grid ttft-vs-length` makes one token: the decode figures have nothing to draw.
    The report leaves them out with a line saying why, and a figure drawn empty (the window's fixed
    plots) shows that line in the middle of its view, not a limit line over blank axes."""
    import pyqtgraph as pg

    from whistle_stop.backends.report.plots import draw, ensure_qt_app

    runs = [
        run_record("hf", r, itl=None, run_id=f"hf/p{p}n1/r{r}", prompt_tokens=p, new_tokens=1, ttft_ms=2.0 + p / 10)
        for p in (1, 64, 1023)
        for r in (1, 2)
    ]
    figures = [sf.ttft_vs_prompt(runs, 10.0), sf.decode_vs_output(runs, 10.0), sf.itl_vs_position(runs, [], 10.0)]
    shown, left_out = fg.with_data(figures)
    assert shown == figures[:1] and len(left_out) == 2
    assert all(line.endswith(sf.ONE_TOKEN) for line in left_out)
    assert sf.itl_vs_position(_records()[0], [], 10.0).empty_reason == "no data"  # decoding runs, no tokens read

    ensure_qt_app()
    plot = pg.PlotItem()
    draw(plot, figures[1])
    texts = [item.textItem.toPlainText().replace("\n", " ") for item in plot.items if isinstance(item, pg.TextItem)]
    assert texts == [sf.ONE_TOKEN] and not any(isinstance(item, pg.InfiniteLine) for item in plot.items)
    assert plot.getAxis("left")._tickLevels == [[]]  # no values on axes that have none
    (x_low, x_high), (y_low, y_high) = plot.getViewBox().viewRange()
    assert x_low < 0 < x_high and y_low < 0 < y_high  # the text's place, (0, 0), in view

    write_results(tmp_path / "sweep", runs, [], {"sweep": {"completed": [[1, 1]]}})
    report = build_report([tmp_path / "sweep"], tmp_path / "out")
    page = report.read_text(encoding="utf-8")
    assert page.count("<img") == 1 and f"Decode speed vs output length (1-token prompt): {sf.ONE_TOKEN}" in page
    assert [p.name for p in (tmp_path / "out").glob("*.png")] == ["1-ttft_vs_prompt.png"]


def test_bandwidth_probe_is_positive_and_cached(monkeypatch):
    first = bw.probe_bandwidth(threads=1, n_bytes=16 << 20)
    assert first.gb_s > 0 and first.median_gb_s > 0 and not first.cached and first.threads == 1

    def no_second_measurement(*args, **kwargs):
        raise AssertionError("measured again instead of using the cache")

    monkeypatch.setattr(bw, "measure_bandwidth", no_second_measurement)
    again = bw.probe_bandwidth(threads=1)
    assert again.cached and again.gb_s == first.gb_s
    assert bw.cached_bandwidth(threads=7) is None  # keyed by thread count (and CPU model)
    assert bw.limit_ms_per_token(1e9, 10.0) == pytest.approx(100.0)


def _folder(path, runs, tokens, cpu, extra=None):
    env = {
        "machine": {"cpu": cpu},
        "model": {"id": "random:tiny", "weights": "random"},
        "libraries": {"torch": "2.13"},
        "settings": {"backends": ["hf", "hf-int8"]},
        "bandwidth": {"gb_s": 10.0},
        "finished_at": cpu,
        **(extra or {}),
    }
    write_results(path, runs, tokens, env)
    return path


def test_report_embeds_figures_and_lists_environment_differences(tmp_path):
    runs, tokens = _records()
    sweep = _folder(
        tmp_path / "sweep",
        runs,
        tokens,
        "CPU one",
        {"sweep": {"skipped": [{"reason": "512 + 600 tokens exceed the context of 1024"}]}},
    )
    bench_runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) == (16, 8)]
    bench = _folder(
        tmp_path / "bench", bench_runs, [t for t in tokens if t.run_id in {r.run_id for r in bench_runs}], "CPU two"
    )
    quality = _folder(tmp_path / "quality", bench_runs, [], "CPU one")
    write_csv(
        quality / QUALITY_CSV,
        QUALITY_COLUMNS,
        [
            QualityRow("hf", "fp32", perplexity=30.0, decode_tok_s=50.0, reference="hf"),
            QualityRow(
                "hf-int8", "int8", perplexity=30.6, decode_tok_s=100.0, reference="hf", ppl_diff=0.6, ppl_diff_pct=2.0
            ),
        ],
    )
    out = tmp_path / "report"
    html_path = build_report([sweep, bench, quality], out)
    page = html_path.read_text(encoding="utf-8")
    images = sorted(p.name for p in out.glob("*.png"))
    # sweep 3, bench 3, quality 3, comparison 2; a figure with nothing to draw is a line saying so: these
    # records hold no cold starts, and the quality folder kept no tokens for its position chart
    assert page.count("data:image/png;base64,") == len(images) == 3 + 3 + 3 + 2
    assert page.count("Starting an engine: cold start and one-time build: no data") == 2
    assert "3-itl_vs_position.png" not in images and "ms/token vs position in the sequence: no data" in page
    assert {
        "1-ttft_vs_prompt.png",
        "1-decode_vs_output.png",
        "1-itl_vs_position.png",
        "3-speed_vs_quality.png",
        "compare_decode_tok_s.png",
    } <= set(images)
    assert "machine.cpu" in page and "CPU two" in page and "finished_at" not in page
    assert "exceed the context" in page and "random weights - timing only" in page
    assert "30.600" in page and "<td>+0.600 (+2.00%)</td>" in page and "<td>reference</td>" in page
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    # a sweep's runs are many lengths: one median of them all stands beside no other folder's
    from whistle_stop.backends.report.folder_data import comparison_figures, load_folder

    compared = comparison_figures([load_folder(f) for f in (sweep, bench, quality)])
    assert all("1: " not in series.name for figure in compared for series in figure.series)
    assert all(figure.note.startswith("left out: 1: ") for figure in compared)


def test_report_pairs_medians_with_their_interval_and_marks_native_sampling(tmp_path):
    import dataclasses

    runs, tokens = _records()
    bench_runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) == (16, 8)]
    bench_runs = [dataclasses.replace(r, decoding="sample", native_sampling=r.backend == "hf-int8") for r in bench_runs]
    kept = {r.run_id for r in bench_runs}
    bench = _folder(
        tmp_path / "bench",
        bench_runs,
        [t for t in tokens if t.run_id in kept],
        "CPU",
        {"harness": {"null_itl_us_median": 46.5, "sampled": {"null_itl_us_median": 180.0}}},
    )
    # The bars: median with the median's interval (3 runs: min..max), asymmetric allowed.
    bars = fg.bench_bars(bench_runs, "ttft_ms")
    (series,) = bars.series
    assert series.y[0] == pytest.approx(16.0)
    assert series.err[0] == pytest.approx(16 * 1.1 - 16) and series.err_low[0] == pytest.approx(16 - 16 * 0.9)
    page = build_report([bench], tmp_path / "report").read_text(encoding="utf-8")
    assert "hf-int8 †" in page and "not comparable" in page and "ITL p50/p90/p99 ms" in page
    assert "3 runs: 75.0% (min–max)" in page and "interval of the mean" not in page
    assert "harness cost per token (null engine): 46 us (greedy), 180 us (sampled)" in page
    assert "<p class=warn>† hf-int8: samples in its own code" in page  # a warning: not comparable
    greedy_runs = [dataclasses.replace(r, decoding="greedy") for r in bench_runs]
    greedy = _folder(tmp_path / "greedy", greedy_runs, [t for t in tokens if t.run_id in kept], "CPU")
    page = build_report([greedy], tmp_path / "report2").read_text(encoding="utf-8")
    assert "<p class=note>hf-int8 samples in its own code when sampling; these greedy runs are comparable" in page


def test_report_gives_every_interval_its_true_level(tmp_path):
    """Six runs: the interval is still min..max, at 96.9% (not 95%), under the table and under
    every figure with error bars; a second folder of nine runs: 96.1%, narrower than min..max."""
    import dataclasses
    import re

    runs, tokens = _records()
    bench_runs = [
        dataclasses.replace(r, repeat=r.repeat + 3 * k, run_id=f"{r.run_id}-{k}")
        for r in runs
        if (r.prompt_tokens, r.new_tokens) == (16, 8)
        for k in (0, 1)
    ]
    six = _folder(tmp_path / "six", bench_runs, [], "CPU")
    nine = _folder(
        tmp_path / "nine",
        [
            dataclasses.replace(r, repeat=r.repeat + 3 * k, run_id=f"{r.run_id}-{k}")
            for r in bench_runs
            if r.run_id.endswith("-0")
            for k in (0, 1, 2)
        ],
        [],
        "CPU",
    )
    page = build_report([six, nine], tmp_path / "report").read_text(encoding="utf-8")
    assert "with 6 runs: 96.9% (min–max)" in page and "with 9 runs: 96.1%" in page
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    bars = [c for c in captions if "error bars" in c]
    assert len(bars) >= 4  # each folder's two bars, and the comparison's
    assert all("96.9% (min–max)" in c or "96.1%" in c for c in bars)
    assert any("6 runs: 96.9% (min–max), 9 runs: 96.1%" in c for c in bars)  # the comparison holds both
    assert "95%" not in page


def test_environment_differences_ignore_volatile_keys():
    a = {"machine": {"cpu": "A"}, "libraries": {"torch": "2.1"}, "finished_at": "x", "settings": {"repeats": 3}}
    b = {
        "machine": {"cpu": "B"},
        "libraries": {"torch": "2.1", "onnx": "1.17"},
        "finished_at": "y",
        "settings": {"repeats": 3},
    }
    assert environment_differences([a, b]) == [("machine.cpu", ["A", "B"]), ("libraries.onnx", ["(absent)", "1.17"])]


def test_which_probe_a_peak_came_from_is_no_difference():
    """Each peak names its probe (when, which process): two folders' peaks from other probes differ only
    where their figures do."""
    entry = {"gops": 500.0, "isa": "f", "measured_at": "t1", "probe_pid": 11}
    a = {"compute_peaks": {"peaks": {"fp32": entry}, "measured_at": "t1", "probe_pid": 11}}
    b = {"compute_peaks": {"peaks": {"fp32": dict(entry, gops=520.0, measured_at="t2", probe_pid=22)}, "probe_pid": 22}}
    assert environment_differences([a, b]) == [("compute_peaks.peaks.fp32.gops", ["500.0", "520.0"])]


def test_environment_differences_compare_whole_values_however_long_they_are():
    """Thirteen engines make a list longer than a cell shows: two lists that differ only in the last
    engine are a difference, shown whole so that the two cells do not read the same."""
    engines = [f"engine-{i:02d}" for i in range(13)]
    a = {"settings": {"backends": engines}}
    b = {"settings": {"backends": engines[:-1] + ["other"]}}
    ((key, values),) = environment_differences([a, b])
    assert key == "settings.backends" and values[0] != values[1]
    assert values[1].endswith('"other"]')


def test_a_cancelled_folder_says_in_the_report_what_it_kept(tmp_path):
    """environment.json's "cancelled": the folder's section says how many of the planned measured runs
    it holds (a sweep: of its finished cells only, which a resume does not run again)."""
    runs, tokens = _records()
    bench_runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) == (16, 8) and r.repeat < 3]
    bench = _folder(
        tmp_path / "bench",
        bench_runs,
        [],
        "CPU",
        {"cancelled": True, "settings": {"backends": ["hf", "hf-int8"], "repeats": 3}},
    )
    sweep_runs = [r for r in runs if r.prompt_tokens == 16]
    sweep = _folder(
        tmp_path / "sweep",
        sweep_runs,
        [],
        "CPU",
        {
            "cancelled": True,
            "settings": {"backends": ["hf", "hf-int8"], "repeats": 3},
            "sweep": {"completed": [[16, 8]], "pending": [[16, 32], [64, 8], [64, 32]]},
        },
    )
    whole = _folder(tmp_path / "whole", bench_runs, [], "CPU", {"cancelled": False})
    page = build_report([bench, sweep, whole], tmp_path / "report").read_text(encoding="utf-8")
    assert "cancelled: 4 of 6 planned runs kept; partial results" in page
    assert "cancelled: 6 of 24 planned runs kept (1 of 4 cells complete); partial results" in page
    assert page.count("cancelled: ") == 2


def test_report_command(tmp_path, capsys):
    runs, tokens = _records()
    folder = _folder(tmp_path / "one", runs[:6], tokens[:60], "CPU")
    assert main(["report", str(folder), "--out", str(tmp_path / "r")]) == 0
    assert "data:image/png;base64," in (tmp_path / "r" / "report.html").read_text()
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "r")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert json.loads((folder / "environment.json").read_text())["machine"]["cpu"] == "CPU"


class _Structure:
    """Every <table>'s ancestors (tag, classes), and the CSS classes laid out as flex or grid."""

    def __init__(self, page):
        import re
        from html.parser import HTMLParser

        style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
        self.columns = {
            cls
            for rule, body in re.findall(r"([^{}]+)\{([^}]*)\}", style)
            if re.search(r"display:\s*(flex|grid)", body)
            for cls in re.findall(r"\.([\w-]+)", rule)
        }
        tables = self.tables = []
        void = {"img", "meta", "br", "hr", "input", "link"}

        class Parser(HTMLParser):
            stack: list = []

            def handle_starttag(self, tag, attrs):
                classes = set((dict(attrs).get("class") or "").split())
                if tag == "table":
                    tables.append(list(self.stack))
                if tag not in void:
                    self.stack.append((tag, classes, dict(attrs).get("style") or ""))

            def handle_endtag(self, tag):
                while self.stack and self.stack.pop()[0] != tag:
                    pass

        Parser().feed(page)


def test_report_reads_top_down_and_no_table_sits_in_a_column(tmp_path):
    runs, tokens = _records()
    sweep = _folder(tmp_path / "sweep", runs, tokens, "CPU one")
    bench_runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) == (16, 8)]
    bench = _folder(tmp_path / "bench", bench_runs, [], "CPU two")
    page = build_report([sweep, bench], tmp_path / "report").read_text(encoding="utf-8")
    structure = _Structure(page)
    assert structure.tables and structure.columns == {"figures"}
    for ancestors in structure.tables:
        assert any(tag == "div" and "scroll" in classes for tag, classes, _ in ancestors)
        assert not any(
            classes & structure.columns or "flex" in style or "grid" in style for _, classes, style in ancestors
        )
    # the verdict first (of the bench folder only: a sweep's cells are not one comparison), then the comparison
    assert (
        page.index("<h2>Verdict")
        < page.index("<h2>Comparison")
        < page.index("<h2>1: sweep")
        < page.index("<h2>2: bench")
    )
    assert page.count('<section class="verdict">') == 1 and "Fastest overall" in page


def test_environment_differences_that_matter_come_first_and_the_rest_is_folded(tmp_path):
    runs, _ = _records()
    bench_runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) == (16, 8)]
    one = _folder(tmp_path / "one", bench_runs, [], "CPU", {"libraries": {"torch": "2.13", "onnx": "1.17"}})
    two = _folder(
        tmp_path / "two", bench_runs, [], "CPU", {"libraries": {"torch": "2.14", "onnx": "1.18"}, "python": "3.12"}
    )
    page = build_report([one, two], tmp_path / "report").read_text(encoding="utf-8")
    differences = page[page.index("Environment differences") : page.index("<h2>1: one")]
    folded = differences[differences.index("<details>") :]
    assert "libraries.torch" in differences and "libraries.torch" not in folded  # hf runs on torch
    assert "libraries.onnx" in folded and "python" in folded  # hf does not use onnx
    # settings and versions are text: they wrap inside their column instead of widening the table past the page
    assert differences.count('<table class="text">') == 2 and "table.text{white-space:normal}" in page


def test_bar_names_wrap_at_their_hyphens_where_a_row_of_them_would_overlap():
    from whistle_stop.backends.report.plots import wrap_label

    assert wrap_label("torch-static-compile", 8) == "torch-\nstatic-\ncompile"
    assert wrap_label("native-bf16", 12) == "native-bf16" and wrap_label("native-bf16", 8) == "native-\nbf16"
    assert wrap_label("hf", 1) == "hf" and wrap_label("llamacpp-q8_0", 5) == "llamacpp-\nq8_0"  # never within a word


def test_profile_top_operations_are_one_fold_per_engine(tmp_path):
    from types import SimpleNamespace

    from whistle_stop.backends.report import html as report_html

    op = lambda phase, name: SimpleNamespace(  # noqa: E731
        phase=phase,
        name=name,
        category="matmul",
        ms_per_step=1.0,
        calls_per_step=2.0,
        share=0.5,
    )
    profiles = [
        SimpleNamespace(engine=e, top_ops=[op("decode", f"{e}-mm"), op("prefill", f"{e}-pre")], trace_file="")
        for e in ("hf", "onnx")
    ]
    parts = report_html._top_ops_html(profiles)
    assert (
        parts.count("<details>") == 2 and parts.count("<h4>decode</h4>") == 2 and parts.count("<h4>prefill</h4>") == 2
    )


def test_quality_windows_and_the_machine_s_probes_are_differences_that_matter():
    """Two quality folders scored over other windows, or floors over other bandwidths, differ in their numbers."""
    from whistle_stop.backends.report.environment_diff import split_differences

    rows = [
        ("quality.stride", ["512", "256"]),
        ("bandwidth.gb_s", ["42.9", "48.9"]),
        ("compute_peaks.peaks.fp32.gops", ["519", "550"]),
        ("machine.hostname_build", ["a", "b"]),
        # what a run's own probe read, and the passes' median: no roofline divides by them
        ("compute_peaks.peaks.fp32.probed_gops", ["500", "550"]),
        ("compute_peaks.peaks.int8.median_gops", ["900", "910"]),
    ]
    matter, rest = split_differences(rows, [])
    assert [key for key, _ in matter] == [key for key, _ in rows[:3]]
    assert [key for key, _ in rest] == [key for key, _ in rows[3:]]


def test_no_qt_application_is_made_off_the_main_thread():
    """A QApplication made on another thread dies with that thread's event loop, and every timer of a
    window made later in the main thread never fires (a GUI test after a CLI test run on a thread timed
    out that way): rendering a PNG there refuses, in one line."""
    code = (
        "import threading\n"
        "from whistle_stop.backends.report.plots import ensure_qt_app\n"
        "caught = []\n"
        "def render():\n"
        "    try:\n"
        "        ensure_qt_app()\n"
        "    except RuntimeError as exc:\n"
        "        caught.append(str(exc))\n"
        "thread = threading.Thread(target=render)\n"
        "thread.start(); thread.join()\n"
        "from PySide6.QtWidgets import QApplication\n"
        "assert QApplication.instance() is None, 'made one'\n"
        "print(caught[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "PNG figures are rendered in the main thread (Qt's application lives there)"
