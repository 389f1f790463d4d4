#!/usr/bin/env bash
# The GPU evidence run (device machine, 2 × H200). Writes everything under $OUT.
#   bash benchmarks/run_device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CHORD_CACHE_DIR=/tmp/chord-cache HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/chord-out}; mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  # 1. the real loading path on a random-weight 3B checkpoint, through the CLI
  python3 -m chord_core make-tiny-model /tmp/chord-rand-3b --shape 3b --device cuda
  python3 -c "from chord_core.testing.videos import make_video as m; m('/tmp/c10.mp4', duration_s=10, fps=10, size_wh=(448, 252))"
  CUDA_VISIBLE_DEVICES=0 python3 -m chord_core describe /tmp/c10.mp4 --model /tmp/chord-rand-3b \
      --max-new-tokens 128 --json "$OUT/describe_3b.json" -q
  python3 -c "import json; d=json.load(open('$OUT/describe_3b.json')); print('3B model', d['model']); print('3B timing', d['timing']); print('3B sampling', {k: d['sampling'][k] for k in ('fps', 'input_wh', 'visual_tokens')})"
  # 2. the GPU sampler against real H200s
  python3 -m pytest -q tests/gpu -p no:cacheprovider
  # 3. workers: replicate vs one GPU, split grounding, shard, greedy agreement
  python3 benchmarks/multigpu.py --shape 7b --clips 8 --out "$OUT/multigpu.json"
} 2>&1 | grep -v "Loading weights" | tee "$OUT/device.log"
