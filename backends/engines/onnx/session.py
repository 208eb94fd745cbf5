"""The one way the ONNX engines open a session: same threads, order, optimisation and provider,
so engines built on different exports differ only in their graphs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ...machine.threads import cpus_to_bind
from ...progress import ProgressFn
from ...storage.artifact_cache import Artifact
from .cache import model_path

PROVIDER = "CPUExecutionProvider"


def open_session(model_path: Path, threads: int, profile_prefix: str = "", bind: bool = False) -> ort.InferenceSession:
    """A CPU session; with `profile_prefix`, ORT's own profiling on, its JSON written there. A team
    that takes every CPU is bound one thread to a CPU, as the native engines' is (threads.cpus_to_bind);
    ORT's affinity string counts processors from 1. `bind`: only where the engine owns its process
    (EngineOptions.owns_process; binding narrows the caller's thread and what it starts later)."""
    options = ort.SessionOptions()
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    options.intra_op_num_threads = max(0, int(threads))  # 0: ORT's default (physical cores, which it binds)
    cpus = cpus_to_bind(int(threads)) if bind else []
    if cpus:  # the caller's thread runs ORT's thread 0 and is not ORT's to bind: it is bound here
        os.sched_setaffinity(0, cpus[:1])
        options.add_session_config_entry("session.intra_op_thread_affinities", ";".join(str(c + 1) for c in cpus[1:]))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initialisers are noise here
    return ort.InferenceSession(str(model_path), options, providers=[PROVIDER])


def threads_note(threads: int, bind: bool) -> str:
    """The engine note on its threads, as open_session set them."""
    bound = ", each bound to a CPU of its own" if bind and cpus_to_bind(int(threads)) else ""
    return f"threads={threads or 'ort default'}{bound}"


def open_cached(
    ensure: Callable[[], Artifact],
    rebuild: Callable[[], Artifact],
    threads: int,
    label: str,
    progress: ProgressFn,
    bind: bool = False,
) -> tuple[ort.InferenceSession, Artifact, float]:
    """(session, artefact, build seconds) for a cached export: a cached file ORT cannot read is
    rebuilt once; a file built just now that ORT cannot read is an error."""
    artefact = ensure()
    try:
        return open_session(model_path(artefact), threads, bind=bind), artefact, artefact.build_s
    except Exception as exc:  # noqa: BLE001 - ORT raises several types for an unreadable model
        if artefact.built:
            raise
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        progress(f"cached ONNX {label} model is unusable ({why}); rebuilding", None)
        rebuilt = rebuild()
        return open_session(model_path(rebuilt), threads, bind=bind), rebuilt, artefact.build_s + rebuilt.build_s


def token_array(token_ids, context: int) -> np.ndarray:
    """Token ids as the graphs' int64 input [1, T]; empty or longer than the context: ValueError."""
    ids = np.asarray(list(token_ids), dtype=np.int64).reshape(1, -1)
    if ids.shape[1] == 0:
        raise ValueError("at least one token is needed")
    if ids.shape[1] > context:
        raise ValueError(f"{ids.shape[1]} tokens exceed the model's context of {context}")
    return ids
