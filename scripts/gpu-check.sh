#!/usr/bin/env bash
# A GPU host's check before it serves GPU slots: the sandbox hands a job the
# slot's GPU and nothing else of /dev, tenant and built-in torch trainers run
# and resume on cuda, and a 33.9M-parameter tenant model's chunk costs what
# docs/tenant-code.md says. CI has no GPU, so these tests skip there.
#
# Needs bubblewrap, a CUDA build of torch and the project's Python packages
# (PYTHONPATH or the venv); runs without Redis or a database. Usage:
#   bash scripts/gpu-check.sh [OUTPUT_DIR]
# SANDBOX_CGROUP_PARENT names a delegated cgroup v2 parent where the shell's
# own cgroup cannot have children (docs/tenant-code.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-artifacts/gpu-check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 SANDBOX_MEMORY_MIB=${SANDBOX_MEMORY_MIB:-8192}

nvidia-smi -L
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
status=0
"$py" -m pytest --noconftest -p no:cacheprovider -q -rs \
    tests/integration/test_sandbox_gpu.py tests/unit/test_torch_trainers.py 2>&1 \
    | tee "$out/pytest.log" || status=1
"$py" -m tests.bench.sandbox_overhead --torch --chunks 3 --hidden 4096 --layers 3 2>&1 \
    | tee "$out/sandbox_torch.log" || status=1
exit $status
