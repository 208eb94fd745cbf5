"""Cross-check `bench --backends remote`'s load figures with NVIDIA's aiperf, against one `serve`.

    python -m scripts.aiperf_check                                  # random:tiny, levels 1,2,4
    python -m scripts.aiperf_check --model random:gpt2 --threads 1 --requests 20 --repeats 5

It starts `python main.py serve --backend numpy --model M` on a free port, then for each concurrency
level runs aiperf (completions endpoint, streaming, the GPT-2 tokenizer from resources/ as a tokenizer
folder, prompts of --prompt-tokens, --new-tokens out with end-of-text ignored, token counts from the
server's usage) and `bench --backends remote --concurrency LEVELS` against the same server, with each
client's CPU (its process tree, psutil) over its wall time. It prints a Markdown table ready to paste:
TTFT, ITL and output throughput medians side by side, the client's CPU in % of one core, the CPU model
line and the commands. A third TTFT column times the same requests to the first chunk that carries
text (what aiperf counts as the first token) with a plain client: docs/methodology.md#checked-against-other-tools.

aiperf runs from its own virtual environment, `.venv-aiperf` (made on first use, or `make aiperf`):
its dependencies need not agree with the app's. HF_HUB_OFFLINE is left unset: aiperf in offline mode
cannot load a local tokenizer folder.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from whistle_stop.backends.serve.request_log import parse as parse_request_line
from whistle_stop.backends.sources.prompts import prompt_of_length

ROOT = Path(__file__).resolve().parent.parent
AIPERF_VENV = ROOT / ".venv-aiperf"
TOKENIZER = ROOT / "resources" / "tokenizer"
READY_TIMEOUT_S = 120.0


@dataclass
class Figures:
    """One tool at one level: medians (ms, tokens/s) and the client's CPU."""

    ttft_ms: float
    itl_ms: float
    output_tok_s: float
    client_cpu_pct: float = float("nan")  # of one core, over the client's wall time
    tpot_ms: float = float("nan")  # whistle-stop's TPOT p50: what aiperf calls ITL
    ttft_text_ms: float = float("nan")  # to the first chunk with text (a plain client)


def aiperf_bin(install: bool) -> Path:
    """aiperf in its own venv; made (pip install aiperf) when missing and `install`."""
    exe = AIPERF_VENV / "bin" / "aiperf"
    if exe.exists():
        return exe
    if not install:
        raise SystemExit("aiperf is not installed: run `make aiperf` (or this script without --no-install)")
    subprocess.run([sys.executable, "-m", "venv", str(AIPERF_VENV)], check=True)
    subprocess.run([str(AIPERF_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "aiperf"], check=True)
    return exe


def tokenizer_folder(into: Path) -> Path:
    """The bundled GPT-2 tokenizer as a folder transformers' AutoTokenizer loads (aiperf's --tokenizer)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(TOKENIZER / name, into / name)
    special = "<|endoftext|>"
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024}
    config |= {"bos_token": special, "eos_token": special, "unk_token": special}
    (into / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (into / "config.json").write_text(json.dumps({"model_type": "gpt2"}), encoding="utf-8")
    return into


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, threads: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "main.py", "serve", "--backend", "numpy", "--model", model, "--port", str(port)]
    command += ["--threads", str(threads), "--served-model-name", "gpt2"]
    handle = log.open("w", encoding="utf-8")
    server = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"serve exited ({server.returncode}): see {log}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v1/models")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"serve did not answer within {READY_TIMEOUT_S:g} s: see {log}")


def run_measured(command: list[str], log: Path, env: dict | None = None) -> float:
    """Run `command` to its end; its process tree's CPU seconds over its wall seconds, in % of one core."""
    with log.open("w", encoding="utf-8") as handle:
        began = time.perf_counter()
        process = psutil.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env)
        seen: dict[int, float] = {}
        while process.poll() is None:
            for member in [process, *process.children(recursive=True)]:
                try:
                    times = member.cpu_times()
                    seen[member.pid] = times.user + times.system + times.children_user + times.children_system
                except psutil.Error:
                    continue
            time.sleep(0.2)
        wall = time.perf_counter() - began
    if process.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({process.returncode}): see {log}")
    return 100.0 * sum(seen.values()) / wall


def aiperf_level(exe: Path, port: int, tokenizer: Path, level: int, args, out: Path) -> Figures:
    folder = out / f"aiperf-c{level}"
    command = [str(exe), "profile", "--model", "gpt2", "--url", f"http://127.0.0.1:{port}"]
    command += ["--endpoint-type", "completions", "--streaming", "--tokenizer", str(tokenizer)]
    command += ["--prompt-input-tokens-mean", str(args.prompt_tokens), "--prompt-input-tokens-stddev", "0"]
    command += ["--prompt-output-tokens-mean", str(args.new_tokens), "--prompt-output-tokens-stddev", "0"]
    command += ["--extra-inputs", "ignore_eos:true", "--use-legacy-max-tokens", "--use-server-token-count"]
    command += ["--concurrency", str(level), "--request-count", str(args.requests * level)]
    command += ["--warmup-request-count", str(level), "--random-seed", "0", "--ui-type", "none"]
    command += ["--output-artifact-dir", str(folder), "--no-server-metrics", "--no-gpu-telemetry"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # offline, a local folder fails
    cpu = run_measured(command, out / f"aiperf-c{level}.log", env)
    found = sorted(folder.rglob("profile_export_aiperf.json"))
    if not found:
        raise SystemExit(f"aiperf wrote no profile_export_aiperf.json under {folder}")
    data = json.loads(found[0].read_text(encoding="utf-8"))

    def p50(tag: str) -> float:
        metric = data.get(tag) or (data.get("records") or {}).get(tag) or {}
        return float(metric.get("p50", metric.get("avg", "nan")))

    return Figures(p50("time_to_first_token"), p50("inter_token_latency"), p50("output_token_throughput"), cpu)


def bench_levels(port: int, levels: list[int], args, out: Path) -> tuple[dict[int, Figures], float]:
    folder = out / "bench"
    command = [sys.executable, "main.py", "bench", "--backends", "remote", "--model", args.model]
    command += ["--remote-url", f"http://127.0.0.1:{port}/v1", "--remote-model", "gpt2"]
    command += ["--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(args.new_tokens)]
    command += ["--concurrency", ",".join(map(str, levels)), "--repeats", str(args.repeats)]
    command += ["--no-harness-calibration", "--out", str(folder)]
    cpu = run_measured(command, out / "bench.log")
    rows = json_rows(folder / "load.csv")
    figures = {
        int(row["concurrency"]): Figures(
            float(row["ttft_p50_ms"]),
            float(row["itl_p50_ms"]),
            float(row["output_tok_s"]),
            cpu,
            float(row["tpot_p50_ms"] or "nan"),
        )
        for row in rows
        if row["backend"] == "remote" and not row.get("request_rate")
    }
    return figures, cpu


def json_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def first_text_probe(port: int, args, requests: int) -> tuple[float, float]:
    """Median ms from sending a streamed completion to its first chunk, and to its first chunk with
    text, one request at a time (the bench's prompt ids; what each tool calls the first token)."""
    prompt = prompt_of_length(args.prompt_tokens)
    first, text = [], []
    for _ in range(requests):
        body = {"model": "gpt2", "prompt": prompt, "max_tokens": args.new_tokens, "stream": True}
        body |= {"ignore_eos": True, "temperature": 0}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        began = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        got_first = got_text = None
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: {"):
                continue
            now = time.perf_counter()
            choices = json.loads(line[6:]).get("choices") or [{}]
            got_first = got_first or now
            if choices[0].get("text") and got_text is None:
                got_text = now
        conn.close()
        first.append(1000 * ((got_first or began) - began))
        text.append(1000 * ((got_text or began) - began))
    return statistics.median(first), statistics.median(text)


@dataclass
class Phase:
    """One client's run against the server: its name and wall-clock span (local time, as the request log)."""

    name: str
    start: str
    end: str
    client: str = ""  # what the client read, for the referee's table


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()) + f".{int(time.time() % 1 * 1000):03d}"


def server_view(log_lines: list[str], phase: Phase) -> tuple[int, float, float]:
    """The server's own clock on the requests it finished within the phase (its request log): how many,
    their median TTFT and median (e2e - TTFT) / (tokens - 1). The referee when the two clients disagree."""
    entries = [e for e in map(parse_request_line, log_lines) if e is not None and e.status == 200]
    chosen = [e for e in entries if phase.start <= e.time <= phase.end and e.ttft_ms is not None and e.tokens > 1]
    if not chosen:
        return 0, float("nan"), float("nan")
    ttft = statistics.median(e.ttft_ms for e in chosen if e.ttft_ms is not None)
    tpot = statistics.median((e.total_ms - (e.ttft_ms or 0.0)) / (e.tokens - 1) for e in chosen)
    return len(chosen), ttft, tpot


def referee(log_lines: list[str], phases: list[Phase]) -> str:
    rows = [
        "The server's own clock (its request log) on each client's requests, split by when each client ran:",
        "",
        "| client's phase | requests | server TTFT p50 ms | server (e2e - TTFT)/(N - 1) p50 ms | the client read |",
        "|---|---|---|---|---|",
    ]
    for phase in phases:
        count, ttft, tpot = server_view(log_lines, phase)
        rows.append(f"| {phase.name} | {count} | {ttft:.1f} | {tpot:.1f} | {phase.client} |")
    return "\n".join(rows)


def cpu_line() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def table(levels: list[int], ours: dict[int, Figures], theirs: dict[int, Figures], probe, args) -> str:
    def f(value: float, digits: int = 1) -> str:
        return "-" if value != value else f"{value:.{digits}f}"

    lines = [
        f"CPU: {cpu_line()} ({psutil.cpu_count(logical=True)} logical cores); model {args.model}, "
        f"numpy engine on {args.threads} thread(s); {args.prompt_tokens}-token prompts, {args.new_tokens} tokens; "
        f"aiperf {args.requests} requests per level and stream; bench {args.repeats} rounds per level",
        "",
        "| concurrency | TTFT p50 ms whistle-stop | TTFT p50 ms aiperf | ITL p50 ms whistle-stop | ITL p50 ms aiperf "
        "| TPOT p50 ms whistle-stop | output tok/s whistle-stop | output tok/s aiperf | client CPU % whistle-stop "
        "| client CPU % aiperf |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for level in levels:
        a, b = ours.get(level), theirs.get(level)
        nan = Figures(float("nan"), float("nan"), float("nan"))
        a, b = a or nan, b or nan
        lines.append(
            f"| {level} | {f(a.ttft_ms)} | {f(b.ttft_ms)} | {f(a.itl_ms, 2)} | {f(b.itl_ms, 2)} | {f(a.tpot_ms, 2)} | "
            f"{f(a.output_tok_s)} | {f(b.output_tok_s)} | {f(a.client_cpu_pct, 0)} | {f(b.client_cpu_pct, 0)} |"
        )
    lines += [
        "",
        f"First token, one request at a time (a plain client, {args.probe} requests): first chunk "
        f"{f(probe[0])} ms, first chunk with text {f(probe[1])} ms (aiperf's TTFT counts the latter).",
        "",
        "aiperf's ITL is per request (e2e - TTFT) / (tokens - 1), a median over requests (whistle-stop's TPOT "
        "p50); whistle-stop's ITL is every gap pooled. Client CPU: the client's process tree (bench: the "
        "orchestrator and its worker, start-up included), over its wall time, the server apart.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="random:tiny", help="random:tiny (default) or random:gpt2")
    parser.add_argument("--levels", default="1,2,4", help="concurrency levels (default: %(default)s)")
    parser.add_argument("--prompt-tokens", type=int, default=50)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=10, help="aiperf requests per level and stream")
    parser.add_argument("--repeats", type=int, default=3, help="bench rounds per level")
    parser.add_argument("--threads", type=int, default=1, help="the server engine's threads (default: 1)")
    parser.add_argument("--probe", type=int, default=5, help="requests of the first-text probe")
    parser.add_argument("--out", type=Path, help="where the tools' files go (default: a temporary folder)")
    parser.add_argument("--no-install", action="store_true", help="fail instead of making .venv-aiperf")
    args = parser.parse_args(argv)
    levels = sorted({int(v) for v in args.levels.split(",") if v.strip()})
    exe = aiperf_bin(not args.no_install)
    out = args.out or Path(tempfile.mkdtemp(prefix="aiperf-check-"))
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_folder(out / "tokenizer")
    port = free_port()
    server = start_server(args.model, port, args.threads, out / "serve.log")
    try:
        probe = first_text_probe(port, args, args.probe)
        theirs, phases = {}, []
        for level in levels:
            began = now_stamp()
            theirs[level] = aiperf_level(exe, port, tokenizer, level, args, out)
            read = f"TTFT {theirs[level].ttft_ms:.1f}, ITL {theirs[level].itl_ms:.2f}"
            phases.append(Phase(f"aiperf, concurrency {level}", began, now_stamp(), read))
        began = now_stamp()
        ours, _ = bench_levels(port, levels, args, out)
        read = ", ".join(f"c{lv}: TTFT {f.ttft_ms:.1f}, TPOT {f.tpot_ms:.2f}" for lv, f in sorted(ours.items()))
        phases.append(Phase(f"whistle-stop bench, levels {args.levels}", began, now_stamp(), read))
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
    print(table(levels, ours, theirs, probe, args))
    print()
    print(referee((out / "serve.log").read_text(encoding="utf-8", errors="replace").splitlines(), phases))
    print(f"\nfiles: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
