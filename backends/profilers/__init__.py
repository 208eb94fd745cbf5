"""The profiler adapters an engine hands the worker (`Engine.profiler()`), and what they capture.

capture.py    what a profiler adapter hands back (ops per phase, runtime span), and its interface
categories.py operation names -> categories (matmul, attention, KV cache, ...), per runtime family
torch_ops.py  torch.profiler adapter (hf, torch-static, nanogpt)
ort_ops.py    ONNX Runtime session profiling adapter
timers.py     timers around a module's functions (the numpy runtime)
native_timers.py     the C runtime's own step timers
llamacpp_timings.py  llama.cpp's own evaluation timers (no per-op split)
openvino_counters.py OpenVINO's performance counters

The adapters that wrap a runtime (torch, ONNX Runtime, llama.cpp) import it: engines import them
inside `profiler()`, so a process that never profiles never loads them.
"""
