"""Engines and native code under test in a spawned process, as the app runs them.

A native runtime (llama.cpp, CTranslate2, OpenVINO, the GenAI runtimes, TensorFlow, our C kernels)
that crashes takes its whole process down. Loaded inside pytest, one crash would end the suite and
report nothing; here it ends one child, and the test that used it fails with the engine's name and
the signal that killed it (`ChildCrashed`).

- `EngineProcess(name, model)`: one engine loaded in a child; its methods and attributes are
  reached over a pipe (`engine.prefill(ids)`, `engine.folder`), so a test reads as if in-process.
  A generator's items come back as a list; `apply(fn, ...)` runs a module-level `fn(engine, ...)`
  in the child, for what cannot be pickled (a torch module, a cancel event).
- `in_child(fn, *args)`: any module-level function in a fresh child, for kernel tests.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.errors import describe_exit
from whistle_stop.backends.registry import EngineSpec, get
from whistle_stop.backends.sampling import Sampler, SamplingParams

CALL_TIMEOUT_S = 300.0  # a call that takes longer counts as hung: the child is killed


class ChildCrashed(RuntimeError):
    """The child died (a signal, an exit) or hung: the test fails with what and how."""


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling (so `pytest.raises` sees its type), else its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _answer(conn, work: Callable[[], Any]) -> None:
    try:
        value = work()
        if isinstance(value, Iterator):
            value = list(value)
        conn.send(("ok", value, ""))
    except BaseException as exc:  # everything goes back to the test, SystemExit included
        conn.send(("error", _portable(exc), traceback.format_exc()))


def _serve_engine(conn, spec: EngineSpec, model, options: EngineOptions) -> None:
    from whistle_stop.backends import registry

    state: dict[str, Any] = {}

    def load():
        state["engine"] = registry.create_from_spec(spec, replace(options, owns_process=True))  # as a worker
        return state["engine"].load(model, lambda *args, **kwargs: None)

    _answer(conn, load)
    if "engine" not in state:
        return
    engine = state["engine"]
    while (request := conn.recv()) is not None:
        kind, name, args, kwargs = request
        # each lambda below runs inside _answer, at once: the loop's variables are this request's
        if kind == "get":
            _answer(conn, lambda: _Method if callable(getattr(engine, name)) else getattr(engine, name))  # noqa: B023
        elif kind == "call":
            _answer(conn, lambda: getattr(engine, name)(*args, **kwargs))  # noqa: B023
        else:  # "apply": a module-level function of the test, given the engine
            _answer(conn, lambda: name(engine, *args, **kwargs))  # noqa: B023
    engine.close()


def _run_function(conn, fn: Callable, args: tuple, kwargs: dict) -> None:
    _answer(conn, lambda: fn(*args, **kwargs))


class _Method:
    """What the child answers for an attribute that is a method: the parent returns a proxy."""


class _Child:
    """A spawned process that answers requests over a pipe; a crash or a hang becomes ChildCrashed."""

    def __init__(self, what: str, target: Callable, args: tuple, timeout_s: float) -> None:
        context = mp.get_context("spawn")
        self.what, self.timeout_s = what, timeout_s
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=target, args=(child_conn, *args), name=f"test:{what}", daemon=True)
        self.process.start()
        child_conn.close()

    def receive(self, doing: str) -> Any:
        try:
            ready = self.conn.poll(self.timeout_s)
            answer = self.conn.recv() if ready else None
        except (EOFError, OSError):
            answer = None
            ready = True
        if answer is None:
            self.kill()
            how = describe_exit(self.process.exitcode) if ready else f"hung for {self.timeout_s:g} s and was killed"
            raise ChildCrashed(f"{self.what} {how} during {doing}")
        status, value, trace = answer
        if status == "error":
            raise value from RuntimeError(f"in the child process:\n{trace}")
        return value

    def ask(self, request: tuple, doing: str) -> Any:
        try:
            self.conn.send(request)
        except (OSError, ValueError) as exc:
            raise ChildCrashed(f"{self.what} is gone ({describe_exit(self.process.exitcode)}): {exc}") from None
        return self.receive(doing)

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.process.join(30)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()


class EngineProcess:
    """One engine created and loaded in a spawned child; attribute access and calls go over a pipe."""

    def __init__(
        self,
        engine: str | EngineSpec,
        model,
        threads: int = 1,
        timeout_s: float = CALL_TIMEOUT_S,
        options: EngineOptions | None = None,
    ) -> None:
        spec = get(engine) if isinstance(engine, str) else engine
        self.name = spec.name
        self._child = _Child(
            f"engine {spec.name!r}", _serve_engine, (spec, model, options or EngineOptions(threads=threads)), timeout_s
        )
        try:
            self.info = self._child.receive("load")
        except BaseException:
            self._child.kill()
            raise

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = self._child.ask(("get", name, (), {}), f"getattr {name}")
        if value is _Method:
            return lambda *args, **kwargs: self._child.ask(("call", name, args, kwargs), name)
        return value

    @property
    def alive(self) -> bool:
        """Whether the child still runs: a crash or a hang ended it."""
        return self._child.process.is_alive()

    def apply(self, fn: Callable, *args, **kwargs) -> Any:
        """`fn(engine, *args, **kwargs)` in the child (fn must be importable: module-level)."""
        return self._child.ask(("apply", fn, args, kwargs), getattr(fn, "__name__", "apply"))

    def tokens(self, ids, new_tokens: int, sampling: SamplingParams | None = None) -> list[int]:
        """`new_tokens` ids from the engine's own `stream`, through the shared sampler."""
        return self.apply(_stream, list(ids), new_tokens, sampling or SamplingParams())

    def close(self) -> None:
        self._child.close()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stream(engine, ids: list[int], new_tokens: int, sampling: SamplingParams) -> list[int]:
    return [int(t) for t in engine.stream(ids, new_tokens, Sampler(sampling))]


def cancelled_stream(engine, ids: list[int], new_tokens: int, sampling: SamplingParams, cancel_after: int) -> list[int]:
    """For `apply`: the engine's `stream` with a cancel event, set once `cancel_after` tokens came."""
    cancel, tokens = threading.Event(), []
    for token in engine.stream(ids, new_tokens, Sampler(sampling), cancel):
        tokens.append(int(token))
        if len(tokens) == cancel_after:
            cancel.set()
    return tokens


def in_child(fn: Callable, *args, timeout_s: float = CALL_TIMEOUT_S, **kwargs) -> Any:
    """`fn(*args, **kwargs)` in a fresh spawned process; its result, its exception, or ChildCrashed."""
    child = _Child(getattr(fn, "__qualname__", "function"), _run_function, (fn, args, kwargs), timeout_s)
    try:
        return child.receive(getattr(fn, "__name__", "call"))
    finally:
        child.close()
