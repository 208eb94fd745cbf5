"""`main.py serve`: one engine behind an OpenAI-compatible completions API, until SIGTERM or Ctrl+C.

Status lines go to stderr; stdout carries one line per request (backends/serve/request_log.py),
so `serve ... | tee requests.log` keeps exactly the request log.
"""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape

from .. import registry
from ..engine import EngineOptions
from ..machine.threads import resolve_threads
from ..runs.preparation import check_available
from ..serve.config import ServeConfig
from ..serve.server import ServeServer, bind
from ..serve.service import Service
from ..sources.model_files import resolve_model
from ..worker.timeouts import Timeouts
from .common import stderr_console
from .engine_flags import settings_from_args


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    return ServeConfig(
        args.backend.strip(),
        args.model,
        args.host.strip(),
        args.port,
        args.workers,
        args.queue,
        args.threads,
        args.shutdown_timeout,
        args.timeout,
        (args.api_key_env or "").strip(),
        (args.served_model_name or "").strip(),
        args.head_timeout,
    ).validate()


def serve_command(args: argparse.Namespace) -> int:
    err = stderr_console()
    config = config_from_args(args)
    spec = registry.get(config.backend)
    check_available({config.backend: spec})
    api_key = config.api_key()
    settings = settings_from_args(args, (config.backend,)).get(config.backend)
    sock = bind(config.host, config.port)  # a busy port is said before anything loads

    def progress(message: str, fraction: float | None = None) -> None:
        err.print(f"  {escape(message)}")

    try:
        model = resolve_model(config.model, progress)
    except BaseException:
        sock.close()
        raise
    if model.notice:
        err.print(f"[yellow]warning:[/] {escape(model.notice)}")
    threads = config.threads or max(1, resolve_threads().threads // config.workers)

    def log(line: str) -> None:
        print(line, flush=True)

    def say(line: str) -> None:
        err.print(escape(line))

    service = Service(
        spec,
        model,
        EngineOptions(threads=threads, settings=settings),
        workers=config.workers,
        queue=config.queue,
        served_name=config.served_model_name,
        api_key=api_key,
        timeouts=Timeouts.from_flag(config.token_timeout_s),
        log=log,
        say=say,
    )
    server = ServeServer(
        service, config.host, config.port, config.shutdown_timeout_s, sock, head_timeout_s=config.head_timeout_s
    )
    err.print(
        f"serving {config.backend} ({escape(model.label)}) at {server.url}/v1 as "
        f"{escape(service.info.name)!r}: {config.workers} worker(s) x {threads} thread(s), queue "
        f"{config.queue}{', API key required' if api_key else ''}; /health, /metrics; Ctrl+C stops"
    )
    if config.exposed and not api_key:
        err.print(
            f"[yellow]warning:[/] listening on {escape(config.host)} without an API key: anyone who can reach "
            "this port can use it (--api-key-env VAR)"
        )
    code = server.run()
    err.print("stopped" if code == 0 else f"[red]stopped:[/] {escape(service.fatal)}")
    sys.stdout.flush()
    return code
