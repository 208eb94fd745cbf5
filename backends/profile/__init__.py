"""Where the time goes: per-engine breakdowns of prefill and decode steps (the `profile` command).

capture.py    what a profiler adapter hands back (ops per phase, runtime span), and its interface
categories.py operation names -> categories (matmul, attention, KV cache, ...), per runtime family
torch_ops.py  torch.profiler adapter (hf, torch-static, nanogpt)
ort_ops.py    ONNX Runtime session profiling adapter
timers.py     timers around a module's functions (the numpy runtime)
llamacpp_timings.py  llama.cpp's own evaluation timers (no per-op split)
openvino_counters.py OpenVINO's performance counters
breakdown.py  a capture + the run's own timers + the memory floor -> one engine's breakdown
files.py      breakdown.csv, top_ops.csv, profile.json (traces are written by the adapters)
table.py      the rows `profile` prints and the window's Profile tab shows
"""
