"""The one way the ONNX engines open a session: same threads, order, optimisation and provider,
so engines built on different exports differ only in their graphs."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

PROVIDER = "CPUExecutionProvider"


def open_session(model_path: Path, threads: int, profile_prefix: str = "") -> ort.InferenceSession:
    """A CPU session; with `profile_prefix`, ORT's own profiling on, its JSON written there."""
    options = ort.SessionOptions()
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    options.intra_op_num_threads = max(0, int(threads))  # 0: ORT's default (physical cores)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initialisers are noise here
    return ort.InferenceSession(str(model_path), options, providers=[PROVIDER])
