"""A first export or compile is `build_s`, never part of the cold start (spawn to first token
with the artefacts cached): both appear in runs.csv, the summary table and the verdict."""

import csv

from tests import fake_engines
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.summary import SUMMARY_HEADERS, summarize_backends, summary_rows
from whistle_stop.backends.results.verdict import verdict
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession

BUILD_S = 1.5


def test_cold_start_excludes_the_build_and_build_s_shows_it(tiny_model, tmp_path, use_engines):
    # The built engine decodes clearly faster, so the verdict picks it and shows its build.
    use_engines(fake_engines.spec("builds", build_s=BUILD_S, decode_s=0.001), fake_engines.spec("plain", decode_s=0.02))
    config = BenchConfig(
        model="random:tiny", backends=("builds", "plain"), threads=1, repeats=2, warmup=0, new_tokens=3
    )
    result = BenchSession(config).run()
    first = {r.backend: r for r in result.runs if r.cold_start_s is not None}
    built, plain = first["builds"], first["plain"]
    assert built.build_s is not None and BUILD_S <= built.build_s < BUILD_S + 0.5
    assert built.cold_start_s < BUILD_S  # a worker without the sleep starts in well under a second
    assert abs(built.cold_start_s - plain.cold_start_s) < 1.0 and plain.build_s == 0.0
    write_results(tmp_path, result.runs, result.tokens, result.environment)
    with (tmp_path / "runs.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "builds" and r["cold_start_s"]]
    assert float(rows[0]["build_s"]) >= BUILD_S and float(rows[0]["cold_start_s"]) < BUILD_S
    summaries = summarize_backends(result.runs)
    row = summary_rows(summaries)[0]
    assert float(row[SUMMARY_HEADERS.index("build s")]) >= BUILD_S
    assert float(row[SUMMARY_HEADERS.index("cold start s")]) < BUILD_S
    assert f"one-time build {built.build_s:.2f} s" in verdict(result.runs, reference="plain").text()


def test_charts_show_the_cold_start_and_the_build_apart(tiny_model, use_engines):
    """The report's startup figure stacks the build on the cold start, and the window's Summary has a
    bar chart for each: the first export shows as a build, never as a slow start."""
    from whistle_stop.backends.report.figures import startup_bars
    from whistle_stop.gui.summary_chart import METRICS

    use_engines(fake_engines.spec("builds", build_s=BUILD_S), fake_engines.spec("plain"))
    config = BenchConfig(
        model="random:tiny", backends=("builds", "plain"), threads=1, repeats=1, warmup=0, new_tokens=2
    )
    result = BenchSession(config).run()
    figure = startup_bars(result.runs)
    assert figure.kind == "stacked" and figure.categories == ["builds", "plain"]
    cold, build = figure.series
    assert (cold.name, build.name) == ("cold start", "one-time build")
    assert all(0 < s < BUILD_S for s in cold.y) and build.y[0] >= BUILD_S and build.y[1] == 0.0
    bars = {title: metric for title, metric, _ in METRICS}
    built = next(s for s in summarize_backends(result.runs) if s.backend == "builds")
    assert bars["build (s)"](built) >= BUILD_S and bars["cold start (s)"](built) < BUILD_S
