"""Tokens from a runtime's own generate loop run in a thread: the library hands each token to a
streamer that puts it on a queue, stamped as it is made (`StampedToken.now`), and the engine's stream yields
them as they come. One mechanism for the engines whose runtime drives its own loop (transformers'
assisted generation, OpenVINO GenAI)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator

from ..engine import StampedToken


def tokens_from_thread(
    generate: Callable[[], None],
    tokens: queue.Queue,
    done: object,
    stop: threading.Event,
    new_tokens: int,
    cancel: threading.Event | None,
    name: str,
) -> Generator[StampedToken, None, None]:
    """Run `generate` in a thread and yield what it puts on `tokens` until `done`, `new_tokens` or a
    cancel. Closing the iterator sets `stop` (the streamer tells the runtime to stop at its next
    token) and joins the thread, so the runtime never outlives the stream; an exception raised in
    `generate` is raised here, on the consumer's side."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            generate()
        except BaseException as exc:  # re-raised on the consumer's side
            failure.append(exc)
        finally:
            tokens.put(done)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    count = 0
    try:
        while count < new_tokens:
            token = tokens.get()
            if token is done:
                break
            count += 1
            yield token
            if cancel is not None and cancel.is_set():
                return
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
