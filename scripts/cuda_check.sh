#!/usr/bin/env bash
# The CUDA paths on a machine with an NVIDIA GPU and a CUDA build of torch: the CUDA tests, then
# one fair bench (hf on the CPU as the reference for token agreement) and a profile of the two
# CUDA engines on random:gpt2. Everything lands in $OUT (default: results/cuda-check).
#   bash scripts/cuda_check.sh            # from the repository root
# The app is installed (editable) into a venv that sees the machine's own packages (its CUDA torch);
# wheels a bare machine lacks can sit in .whl/ and go into that venv first.
# CPU_ENGINES=hf,torch-static,...: also a bench of those pinned to two cores with two threads
# (`taskset -c 0,1`), i.e. the dev machines' shape on this machine's CPU.
set -uo pipefail
OUT=${OUT:-results/cuda-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WHISTLE_STOP_CACHE=${WHISTLE_STOP_CACHE:-/tmp/ws-cuda-cache}
VENV=${VENV:-/tmp/ws-cuda-venv}
python3 -m venv --system-site-packages "$VENV" || exit 1
PY="$VENV/bin/python"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl || exit 1
fi
"$PY" -m pip install -q --no-deps --no-build-isolation -e . || exit 1
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    lscpu | grep -E "Model name|^CPU\(s\)"
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/machine.txt"
ENGINES=${ENGINES:-hf,torch-static,torch-static-cuda,torch-static-cuda-graphs}
"$PY" -m pytest -m cuda tests/test_torch_static.py tests/test_bandwidth.py -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log"
"$PY" main.py bench --model random:gpt2 --backends "$ENGINES" --repeats "${REPEATS:-5}" \
    --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log"
"$PY" main.py profile --model random:gpt2 --backends torch-static-cuda,torch-static-cuda-graphs \
    --out "$OUT/profile" 2>&1 | tee "$OUT/profile.log"
if [ -n "${CPU_ENGINES:-}" ]; then
    taskset -c 0,1 "$PY" main.py bench --model random:gpt2 --backends "$CPU_ENGINES" --threads 2 \
        --repeats "${REPEATS:-5}" --out "$OUT/cpu2" 2>&1 | tee "$OUT/cpu2.log"
fi
tar czf "$OUT/results.tgz" -C "$OUT" $(cd "$OUT" && ls -d bench profile cpu2 2>/dev/null)
rm -rf "$OUT/bench" "$OUT/profile" "$OUT/cpu2"  # the tarball holds them (the device returns files two folders deep)
