"""A fake vLLM OpenAI server for tests: the real command line, /health, /v1/models, /metrics and
streamed completions, with a known batching behaviour.

A scheduler gives every active request one token per step; a step takes
FAKE_VLLM_STEP_MS + FAKE_VLLM_PER_SEQ_MS x (active requests) milliseconds. So with c requests at
once each one's ITL is that step and the aggregate is c tokens per step. It starts a helper
process (like vLLM's engine core) to check that a whole process group is stopped.
Other switches (environment): FAKE_VLLM_FAIL_REQUEST=k answers the k-th completion (1-based) with
an HTTP 500; FAKE_VLLM_EXIT_AT_START=1 exits before listening; FAKE_VLLM_PIDS=path appends the
server's and its helper's pids to that file; FAKE_VLLM_SCRAPES=path appends, for each /metrics read,
how many requests were still streaming tokens then; FAKE_VLLM_STAGGER_MS=m holds the k-th request
(k mod 4) x m ms before its first step, so that streams sent together end apart;
FAKE_VLLM_STALL_FROM=k answers the k-th completion and every later one with headers and no token;
FAKE_VLLM_ARGV=path appends the server's command-line arguments to that file (a JSON list a line);
FAKE_VLLM_MAX_SEQS=k steps at most k requests at once (first come, first served; the others wait:
1 is a batch-1 server).
--dtype takes vLLM's own choices and refuses any other, as vLLM's parser does.
With --speculative-config (vLLM's JSON; method "ngram" only, as the app passes it) each step after
a request's first grants num_speculative_tokens + 1 tokens, sent as one event with all their ids (as vLLM streams a
speculative step), every proposal kept, and /metrics carries vLLM's spec_decode counters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STEP_MS = float(os.environ.get("FAKE_VLLM_STEP_MS", "20"))
PER_SEQ_MS = float(os.environ.get("FAKE_VLLM_PER_SEQ_MS", "5"))
FAIL_REQUEST = int(os.environ.get("FAKE_VLLM_FAIL_REQUEST", "0"))
SCRAPES = os.environ.get("FAKE_VLLM_SCRAPES")
STAGGER_MS = float(os.environ.get("FAKE_VLLM_STAGGER_MS", "0"))
STALL_FROM = int(os.environ.get("FAKE_VLLM_STALL_FROM", "0"))
MAX_SEQS = int(os.environ.get("FAKE_VLLM_MAX_SEQS", "0")) or None


class Scheduler:
    def __init__(self, per_step: int = 1) -> None:
        self.per_step = per_step  # tokens a step grants each request (a speculative step: proposals + 1)
        self.spec = [0, 0, 0]  # drafts, draft tokens, accepted tokens
        self.cond = threading.Condition()
        self.active: dict[int, int] = {}  # request -> tokens granted
        self.next_id = 0
        self.ttft = [0.0, 0]  # sum seconds, count
        self.itl = [0.0, 0]
        self.streaming = 0  # requests whose last token is not yet sent
        threading.Thread(target=self.loop, daemon=True).start()

    def add(self) -> int:
        with self.cond:
            self.next_id += 1
            self.active[self.next_id] = 0
            self.cond.notify_all()
            return self.next_id

    def remove(self, rid: int) -> None:
        with self.cond:
            self.active.pop(rid, None)

    def loop(self) -> None:
        while True:
            with self.cond:
                while not self.active:
                    self.cond.wait()
                count = len(list(self.active)[:MAX_SEQS])
            time.sleep((STEP_MS + PER_SEQ_MS * count) / 1000)
            with self.cond:
                for rid in list(self.active)[:MAX_SEQS]:
                    step = self.per_step if self.active[rid] else 1  # a request's first step is its prefill's
                    self.active[rid] += step
                    if step > 1:
                        self.spec = [self.spec[0] + 1, self.spec[1] + step - 1, self.spec[2] + step - 1]
                self.cond.notify_all()

    def wait_token(self, rid: int, have: int) -> int:
        with self.cond:
            while self.active.get(rid, 0) <= have:
                self.cond.wait(5)
            return self.active[rid]


SCHEDULER: Scheduler | None = None
REQUESTS = [0]
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, "text/plain", b"")
        elif self.path.startswith("/v1/models"):
            body = {"object": "list", "data": [{"id": self.server.model_name, "object": "model", "owned_by": "vllm"}]}
            self._send(200, "application/json", json.dumps(body).encode())
        elif self.path == "/metrics":
            s = SCHEDULER
            if SCRAPES:
                with open(SCRAPES, "a", encoding="utf-8") as handle:
                    handle.write(f"{s.streaming}\n")
            text = (
                f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {s.ttft[0]}\n'
                f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {s.ttft[1]}\n'
                f'vllm:inter_token_latency_seconds_sum{{model_name="m"}} {s.itl[0]}\n'
                f'vllm:inter_token_latency_seconds_count{{model_name="m"}} {s.itl[1]}\n'
            )
            if s.per_step > 1:
                text += (
                    f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {s.spec[0]}\n'
                    f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {s.spec[1]}\n'
                    f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {s.spec[2]}\n'
                )
            self._send(200, "text/plain; version=0.0.4", text.encode())
        else:
            self._send(404, "application/json", b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with LOCK:
            REQUESTS[0] += 1
            number = REQUESTS[0]
        if number == FAIL_REQUEST:
            self._send(500, "application/json", b'{"error": {"message": "fake engine failure"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if STALL_FROM and number >= STALL_FROM:
            time.sleep(30)  # a hung server: the stream stays open, silent
            return
        s = SCHEDULER
        began = time.perf_counter()
        with s.cond:
            s.streaming += 1
        streaming = True
        time.sleep(STAGGER_MS * (number % 4) / 1000)
        rid = s.add()
        try:
            have, last = 0, began
            prompt = body.get("prompt") or [0]
            index, wanted = 0, int(body["max_tokens"])
            while index < wanted:
                granted = s.wait_token(rid, have)
                now = time.perf_counter()
                with s.cond:
                    if index == 0:
                        s.ttft[0] += now - began
                        s.ttft[1] += 1
                    else:
                        s.itl[0] += now - last
                        s.itl[1] += 1
                last = now
                take = min(granted - have, s.per_step)  # one step's tokens per event
                step = range(index, min(wanted, index + take))
                have += take
                # deterministic in the prompt's tail
                ids = [(sum(prompt[-3:]) + 7 * i) % 50000 + 100 for i in step]
                event = {"choices": [{"index": 0, "text": "x" * len(ids), "token_ids": ids, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                index += len(ids)
            with s.cond:
                s.streaming, streaming = s.streaming - 1, False
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            if streaming:
                with s.cond:
                    s.streaming -= 1
            s.remove(rid)

    def _send(self, status: int, kind: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main() -> None:
    global SCHEDULER
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--served-model-name", default="m")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--speculative-config", type=json.loads, default=None)  # as vLLM's: a JSON object
    parser.add_argument("--dtype", choices=("auto", "half", "float16", "bfloat16", "float", "float32"), default="auto")
    args, _ = parser.parse_known_args()
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(sys.argv[1:]) + "\n")
    spec = args.speculative_config
    if spec is not None and (spec.get("method") != "ngram" or int(spec.get("num_speculative_tokens", 0)) < 1):
        print(f"fake vLLM: ValueError: unsupported speculative config {spec}", flush=True)
        sys.exit(2)
    print("fake vLLM: starting", flush=True)
    if os.environ.get("FAKE_VLLM_EXIT_AT_START"):
        print("fake vLLM: RuntimeError: no engine for you", flush=True)
        sys.exit(3)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    pids = os.environ.get("FAKE_VLLM_PIDS")
    if pids:
        with open(pids, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {helper.pid}\n")
    SCHEDULER = Scheduler(1 + int(spec["num_speculative_tokens"]) if spec else 1)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.model_name = args.served_model_name
    print("fake vLLM: Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
