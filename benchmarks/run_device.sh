#!/usr/bin/env bash
# The GPU evidence run (device machine: one H100 or H200 is what is lent; the code plans for any
# number of GPUs). Writes everything under $OUT.
#   bash benchmarks/run_device.sh            (bash benchmarks/run_device.sh startup: issue 35 alone)
#   bash benchmarks/run_device.sh decode     # issue 34 only (one H200), see its section
#   bash benchmarks/run_device.sh decode-vss / decode-user / ground-batch   # issue 34's others
#   bash benchmarks/run_device.sh ask        # issue 39: ask's latency with the 7B (one H200)
#   bash benchmarks/run_device.sh live       # issue 37: streams per H200 within chunk + 1 s
#   bash benchmarks/run_device.sh throughput / throughput-entail / throughput-core  # issue 36
#   bash benchmarks/run_device.sh throughput-rest   # issue 36: batch-1 decode, Thinking, W1 phases
#   bash benchmarks/run_device.sh entail-profile    # issue 36: one pass's kernels, vision apart
#   bash benchmarks/run_device.sh decode-user then-vss   # issue 34: the CLI cold, then VSS
#   bash benchmarks/run_device.sh recheck   # issues 36 + 34: Thinking, then the CLI cold
#   bash benchmarks/run_device.sh decode-user then-ground   # the CLI cold (its first model
#       calls' times from its store), then the hour grounded at 128 frames a call
#   bash benchmarks/run_device.sh first-read   # a fresh process's first reads, profiled
#   bash benchmarks/run_device.sh decode-user then-ab   # the CLI cold, one-shot defaults
#       (the decode step uncompiled) against the same with CHORD_COMPILE=1
#   bash benchmarks/run_device.sh all-in-one   # the CLI cold, the entailment split with the
#       vision MLP narrow vs aligned, the Thinking row: one call (see its section)
#   bash benchmarks/run_device.sh prefill-ab   # issues 36 + 34: CHORD_FUSE and CHORD_FP8
#       against the default (each pass round-robin), then the OFA-VE loop without and with both
#       (the other entries read them too: CHORD_FP8=1 CHORD_FUSE=1 bash … decode-vss half)
#   bash benchmarks/run_device.sh ofa-gpus   # issue 36 on several GPUs (nvidia-h200-x4):
#       the OFA-VE loop on one GPU, then on all, the idle workers sharing each request
#   bash benchmarks/run_device.sh levers-long   # issue 34: the hour grounded, default then
#       both levers; VSS density on the half hour with both (carry .whl/av .whl/nvc .devtmp/seg)
#   bash benchmarks/run_device.sh h200-36   # issue 36 on one H200: tower-ab, then the OFA-VE
#       loop on photographs and on noise (carry .devtmp/tp .devtmp/photos)
#   bash benchmarks/run_device.sh one-call [ground]   # tower-ab (not with ground: the GPU
#       varlen test then), then the hour grounded at 256 and 128
#       (carry .devtmp/tp/vocab .whl/av .whl/nvc .devtmp/seg)
#   bash benchmarks/run_device.sh fuse-kinds   # which fused kinds pay (carry .devtmp/tp)
#   bash benchmarks/run_device.sh tower-ab   # issues 36 + 34: the vision attention's varlen
#       kernel and fused rotary against sessions 10's and 11's defaults (carry .devtmp/tp)
#   bash benchmarks/run_device.sh h200-long   # issue 34 on one H200: the hour grounded at 128
#       and 256 frames a call, then VSS density on the whole hour (the same carry)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CHORD_CACHE_DIR=/tmp/chord-cache HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/chord-out}; mkdir -p "$OUT"
if [ "${1:-}" = ask ]; then
  # Issue 39 (one H200, no extra wheels): ask across the library with the random-weight 7B,
  # 5 hits checked a question (search → entail jobs on the frames → the answer); goal ≤ 3 s
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
    python3 benchmarks/ask_latency.py --model /tmp/chord-rand-7b --device cuda --clips 20 \
        --questions 8 --check 5 --out "$OUT/ask.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/ask.log"
  exit 0
fi
if [ "${1:-}" = live ]; then
  # Issue 37 (one H200): alert latency with N live streams at once on the random-weight 7B,
  # 10 s chunks, one standing check a chunk; the figure is the largest N whose p99 stays
  # within one chunk + 1 s. The device has no GStreamer, so the streams are live HLS
  # playlists from chord_core/testing/hls.py (PyAV + the standard library, on 127.0.0.1).
  #   run: bash benchmarks/run_device.sh live        carry: .whl/av (PyAV 18.1.0, as decode)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/av/*.whl && export PYTHONPATH=/tmp/site
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
    python3 benchmarks/live_streams.py --latency --source hls --model /tmp/chord-rand-7b \
        --device cuda --streams 1,8,32,64 --seconds 45 --chunk-s 10
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/live.log"
  exit 0
fi
if [ "${1:-}" = entail-profile ]; then
  # Issue 36: where one 32-pair entailment pass goes (the vision tower was half of it on
  # 2026-12-03, at ≈ 170 TFLOP/s against the language model's ≈ 500): kernels of the pass
  # and of the tower alone. Carry .devtmp/tp; ≈ 2 minutes with the model built.
  TP=${TP:-.devtmp/tp}; VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    python3 benchmarks/prefill_split.py --model $M7 --pairs 32 --out "$OUT/split.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/entail-profile.log"
  exit 0
fi
if [[ "${1:-}" == prefill-ab ]]; then
  # Issues 36 and 34 (one H200 or H100; carry .devtmp/tp, ≈ 7 minutes with the model built):
  # the prefill's opt-in levers against the default on the same weights in one process
  # (CHORD_FUSE, CHORD_FP8, both: a 32-pair entailment pass, a 128-frame grounding prefill,
  # one MLP's GEMMs; how far the answers moved), then the OFA-VE seed client's loop through
  # serve, the default first, then CHORD_FP8=1 CHORD_FUSE=1
  TP=${TP:-.devtmp/tp}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      "$TP"/whl/*.whl && export PYTHONPATH=/tmp/site
  VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    t0=$SECONDS
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    python3 benchmarks/prefill_ab.py --model $M7 --pairs 32 --ground-rows 128 \
        --out "$OUT/prefill_ab.json"
    echo "device s so far: $((SECONDS - t0))"
    [[ "${2:-}" == no-loop ]] && exit 0  # "prefill-ab no-loop": the in-process A/B alone
    # neither lever (CHORD_FUSE=0: fusing is the GPU default since 2026-12-07), then both
    CHORD_FUSE=0 CHORD_COMPILE=0 CHORD_WARMUP=off python3 benchmarks/entail.py --shape 7b \
        --vocab "$VOCAB" --pairs 384 --gpus 1 --parts ofa-loop --out "$OUT/entail_default.json"
    CHORD_FP8=1 CHORD_FUSE=1 CHORD_COMPILE=0 CHORD_WARMUP=off python3 benchmarks/entail.py \
        --shape 7b --vocab "$VOCAB" --pairs 384 --gpus 1 --parts ofa-loop \
        --out "$OUT/entail_fp8_fused.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/prefill-ab.log"
  exit 0
fi
if [[ "${1:-}" == h200-36 ]]; then
  # Issue 36's OFA-VE row on the goal's card (one H200; carry .devtmp/tp .devtmp/photos; ≈ 8
  # minutes with the model built): first tower-ab (the vision attention's changes in
  # process), then the OFA-VE seed client's loop through serve with the prefill fused (serve's
  # default; the decode step uncompiled and no warm-up only so that the service starts
  # sooner: the loop's passes never decode), unique pairs: on unique JPEG crops of real
  # photographs (benchmarks/photos.py, as OFA-VE's Flickr30k data) beside the naive
  # baseline, then on the 448×448 noise PNGs of every earlier row. (Batch-1 decode, Thinking
  # and W1: throughput-rest.) "h200-36 loop": the loops alone (after one-call)
  [[ "${2:-}" == loop ]] || bash "$0" tower-ab
  TP=${TP:-.devtmp/tp}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      "$TP"/whl/*.whl && export PYTHONPATH=/tmp/site
  VOCAB=$(realpath "$TP/vocab/qwen.tiktoken")
  {
    t0=$SECONDS
    for kind in photos noise; do
      [[ $kind == photos ]] && parts=naive,ofa-loop || parts=ofa-loop
      CHORD_FUSE=1 CHORD_COMPILE=0 CHORD_WARMUP=off timeout 200 python3 benchmarks/entail.py \
          --shape 7b --vocab "$VOCAB" --pairs 384 --naive-pairs 16 --gpus 1 --parts $parts \
          --images $kind --photo-sources .devtmp/photos --out "$OUT/entail_$kind.json"
      echo "device s: $((SECONDS - t0))"
    done
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/h200-36.log"
  exit 0
fi
if [[ "${1:-}" == tower-ab ]]; then
  # Issues 36 and 34 (one H200 or H100; carry .devtmp/tp; ≈ 3 minutes with the model built):
  # the vision tower's attention on the varlen flash kernel and its rotary fused, against
  # session 10's default (nothing fused, grouped SDPA) and session 11's (norms and gated MLPs
  # fused), on a 32-pair entailment pass and a 128-frame grounding prefill, round-robin
  TP=${TP:-.devtmp/tp}; VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    t0=$SECONDS
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    python3 benchmarks/prefill_ab.py --model $M7 --pairs 32 --ground-rows 128 \
        --variants tower --no-gemm --out "$OUT/tower_ab.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/tower-ab.log"
  exit 0
fi
if [[ "${1:-}" == fuse-kinds ]]; then
  # Issues 36 and 34 (one H100 or H200; carry .devtmp/tp; ≈ 1 minute with the model built):
  # which fused kinds pay. On session 13's H100 the norms and gated activations fused without
  # the rotary were slower than nothing fused, and everything fused the fastest: "now",
  # "rope-only" (the norms and MLPs unfused) and "unfused", round-robin
  TP=${TP:-.devtmp/tp}; VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    python3 benchmarks/prefill_ab.py --model $M7 --pairs 32 --ground-rows 128 --rounds 2 \
        --variants kinds --no-gemm --out "$OUT/kinds_ab.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/fuse-kinds.log"
  exit 0
fi
if [[ "${1:-}" == ofa-gpus ]]; then
  # Issue 36 on a host of several GPUs (nvidia-h200-x4 or -x2, when status lends one; carry
  # .devtmp/tp .devtmp/photos, the photographs' crops as in h200-36; ≈ 6 minutes with the model built): the OFA-VE seed client's loop (one request
  # of 32 unique pairs after another) on one GPU, then on every GPU, where the idle workers
  # share each request (scheduling.batch_mates' share: 16 + 16 on two, 8 each on four)
  TP=${TP:-.devtmp/tp}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      "$TP"/whl/*.whl && export PYTHONPATH=/tmp/site
  VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  ALL=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
  {
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    CHORD_FUSE=1 CHORD_COMPILE=0 python3 benchmarks/entail.py --shape 7b --vocab "$VOCAB" \
        --pairs 384 --parts ofa-loop --ofa-gpus "0;$ALL" --images photos \
        --photo-sources .devtmp/photos --out "$OUT/entail_ofa_gpus.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/ofa-gpus.log"
  exit 0
fi
if [ "${1:-}" = throughput-rest ]; then
  # Issue 36's rows that no call has reached since 2026-12-03 (one H200, carry .devtmp/tp,
  # well inside one 10-minute call): batch-1 and batch-8 decode against the bandwidth bound,
  # the Thinking entailment at a 64-token budget in one batch of 64, then W1's phases
  TP=${TP:-.devtmp/tp}; VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    t0=$SECONDS
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    python3 benchmarks/speed.py --shape 7b --ckpt $M7 --workloads decode --repeats 2 \
        --out "$OUT/speed_decode.json"
    python3 benchmarks/thinking.py --shape 8b --pairs 64 --batch 64 --think-tokens 64 \
        --out "$OUT/thinking.json"
    echo "device s so far: $((SECONDS - t0))"
    timeout $((540 - (SECONDS - t0))) python3 benchmarks/w1_phases.py --ckpt $M7 --clips 24 \
        --batches 0,8 --out "$OUT/w1_phases.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/throughput-rest.log"
  exit 0
fi
if [ "${1:-}" = throughput ] || [ "${1:-}" = throughput-entail ] || [ "${1:-}" = throughput-core ]; then
  # Issue 36 (one H200): the OFA-VE seed client's loop through serve (32 tasks a request, one
  # request after another, UNIQUE pairs; a request's time by stage) against the naive path,
  # and a 32-pair worker call as one pass vs two halves (in process, alternated); W1 via
  # describe_many (the default batch, the memory planner's, and batches of 8 and 24), W1's
  # phases (benchmarks/w1_phases.py), and batch-1/8 decode against the bandwidth bound; the
  # Thinking entailment at a 64-token budget, batch 64, against its first-token floor. The
  # random-weight 7B is built with Qwen's vocabulary (qwen.tiktoken from the dashscope wheel);
  # the service's wheels are carried (the device has no FastAPI):
  #   here: pip download --no-deps … -d .devtmp/tp/whl fastapi starlette pydantic pydantic_core
  #         typing-inspection annotated-types uvicorn httptools python-multipart opentelemetry-api
  #         unzip -j dashscope-*.whl dashscope/resources/qwen.tiktoken -d .devtmp/tp/vocab
  #   run:  bash benchmarks/run_device.sh throughput      (carry .devtmp/tp)
  TP=${TP:-.devtmp/tp}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      "$TP"/whl/*.whl && export PYTHONPATH=/tmp/site
  VOCAB=$(realpath "$TP/vocab/qwen.tiktoken"); M7=/tmp/chord-rand-7b-vocab
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    # throughput-core (a short call): W1 first (the default batch, 8 and 24; describe_many's
    # GPU path), then the entailment rows; no batch-1 decode, W1 phases or Thinking rows
    if [ "$1" = throughput-core ]; then
      python3 benchmarks/speed.py --shape 7b --ckpt $M7 --workloads w1 --clips 24 \
          --naive-clips 2 --repeats 1 --describe-batches 8,24 --out "$OUT/speed.json"
    fi
    CHORD_COMPILE=0 CHORD_WARMUP=off python3 benchmarks/entail.py --shape 7b --vocab "$VOCAB" \
        --pairs 384 --naive-pairs 16 \
        --gpus 1 --parts naive,halves,ofa-loop --out "$OUT/entail.json"
    [ "$1" = throughput-entail ] && exit 0   # the entailment rows alone
    [ "$1" = throughput-core ] && exit 0
    python3 benchmarks/speed.py --shape 7b --ckpt $M7 --workloads decode,w1 --clips 24 \
        --naive-clips 2 --repeats 1 --describe-batches 8,24 --out "$OUT/speed.json"
    # where W1's wall time goes (read / inputs / generate / text), default batch and 8
    python3 benchmarks/w1_phases.py --ckpt $M7 --clips 24 --batches 0,8 --out "$OUT/w1_phases.json"
    python3 benchmarks/thinking.py --shape 8b --pairs 64 --batch 64 --think-tokens 64 \
        --out "$OUT/thinking.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/throughput.log"
  exit 0
fi
if [ "${1:-}" = startup ]; then  # issue 35: start-up on one H200, random-weight 7B
  # serve needs the service's wheels (the device has no FastAPI; FastAPI needs
  # opentelemetry-api): here, pip download --no-deps … -d .devtmp/startup/whl fastapi starlette
  # pydantic pydantic_core typing-inspection annotated-types uvicorn httptools python-multipart
  # opentelemetry-api importlib-metadata; run: bash benchmarks/run_device.sh startup
  # (carry .devtmp/startup/whl)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      .devtmp/startup/whl/*.whl && export PYTHONPATH=/tmp/site
  {
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    [ -f /tmp/chord-rand-7b/config.json ] || \
        python3 -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
    python3 -c "from chord_core.testing.videos import make_video as m; m('/tmp/c10.mp4', duration_s=10, fps=10, size_wh=(1280, 720))"
    # what a worker imports, and what each import costs (docs/benchmarks.md)
    # (the second with the bytecode the first wrote: the hosts set PYTHONDONTWRITEBYTECODE)
    imp="import torch, transformers; from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration; from chord_core.model import fastgen, loading"
    for run in cold warm; do PYTHONPYCACHEPREFIX=/tmp/pyc python3 -X importtime -c "$imp" 2> "$OUT/importtime_$run.txt"; done
    python3 benchmarks/startup.py --model /tmp/chord-rand-7b --clip /tmp/c10.mp4 --timeout 240 \
        --out "$OUT/startup.json"
    # the imports' thread on vs off, fresh worker processes on GPU 0 (docs/benchmarks.md)
    python3 benchmarks/startup_imports.py --pairs 3 --gpu 0 --model /tmp/chord-rand-7b
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/startup.log"
  exit
fi

# --- issue 34: readers (NVDEC / CPU pool / default), the real-footage hour ----------------
# Carried (device README's wheel recipe, all ignored paths of the checkout): .whl/av (PyAV
# 18.1.0, 36 MB), .whl/nvc (pynvvideocodec 2.2.4 with its FFmpeg source tarball, samples and
# benchmarks left out of the wheel: 10 MB), .devtmp/seg (the H.264 segment that
# `benchmarks/footage.py --minutes 2 --source vtest.avi` encodes from opencv-doc's vtest.avi).
# Three entries, one 10-minute device call each (a fresh H200; the first call took 512 s):
#   run: bash benchmarks/run_device.sh decode       carry: .whl/av .whl/nvc .devtmp/seg
#        readers' frames/s, the GPU test, then the hour's grounding and chapters at the
#        defaults (ground-long's: 448×252, 64 tokens, batch 32; chapters: keyframe snap)
#   run: bash benchmarks/run_device.sh decode-vss   carry: the same
#        VSS density: 360 chunks × 20 frames (10 s chunks at 2 fps, ≈ 9k visual tokens each);
#        the map's progress lines in decode-vss.log give the rate if the call runs out first
#   run: bash benchmarks/run_device.sh ground-batch carry: the same
#        the hour's grounding at 256 (the default), 512 and 128 frames a generate call
#   run: bash benchmarks/run_device.sh decode-user  carry: the same
#        `python -m chord_core chapters hour.mp4` at its defaults from a cold start (fresh
#        compile cache and store), timed from outside with Chord's GPU sampler (cli_timed.py)
decode_prelude() {  # the wheels, the hour of real footage, the random-weight 7B
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/av/*.whl .whl/nvc/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  # a warm machine keeps /tmp between calls: the hour and the model are built once
  [ -s /tmp/real_hour.mp4 ] || python3 benchmarks/footage.py \
      --segment .devtmp/seg/real.segment.mp4 --minutes 60 --out /tmp/real_hour.mp4
  if [[ "${1:-}" == model ]] && [ ! -f /tmp/chord-rand-7b/model.safetensors.index.json ]; then
    python3 -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
  fi
}
show_runs() {  # a long_video.py result file: "all" as $2 prints its summary first; then a
  # line for each run
  python3 - "$1" "${2:-}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if sys.argv[2] == "all":
    print(json.dumps({k: v for k, v in d.items() if k != "runs"}))
for r in d["runs"]:
    print(json.dumps(r))
PY
}
if [[ "${1:-}" == decode ]]; then
  {
    t0=$SECONDS
    decode_prelude
    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_nvdec_reader.py -rs
    python3 benchmarks/decode_readers.py --clip /tmp/real_hour.mp4 --frames 9000 \
        --readers nvdec,chord --decoders 4,8 --reader all --nvdec-decoders 4,8 --on-gpu \
        --out "$OUT/decode_readers.json" > /dev/null
    python3 -c "import json; d=json.load(open('$OUT/decode_readers.json')); [print(k, v) for k, v in d.items()]"
    # the same dense read in 4,096-frame reads (68 GOPs: the sessions' shares even out)
    python3 benchmarks/decode_readers.py --clip /tmp/real_hour.mp4 --frames 9000 \
        --readers chord --reader nvdec --kinds dense --nvdec-decoders 8 --slice 4096 \
        --on-gpu --out "$OUT/decode_readers_4096.json" > /dev/null
    python3 -c "import json; d=json.load(open('$OUT/decode_readers_4096.json')); [print(k, v) for k, v in d.items()]"
    # 512-frame reads, 3 submitted ahead (the next reads' GOPs queue behind this one's on
    # the sessions): with decoder_busy_share / session_busy_share, is the decoder the limit?
    python3 benchmarks/decode_readers.py --clip /tmp/real_hour.mp4 --frames 9000 \
        --readers chord --reader nvdec --kinds dense,sparse --nvdec-decoders 8 \
        --in-flight 3 --on-gpu --out "$OUT/decode_readers_q3.json" > /dev/null
    python3 -c "import json; d=json.load(open('$OUT/decode_readers_q3.json')); [print(k, v) for k, v in d.items()]"
    echo "device s so far: $((SECONDS - t0))"
    python3 -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
    python3 benchmarks/long_video.py --device cuda --model /tmp/chord-rand-7b \
        --clip /tmp/real_hour.mp4 --task both --chunk-s 60 --chapter-s 300 \
        --frames-per-chunk 16 --chunk-tokens 192 --batch-size 16 --warmup \
        --decode-only-fraction 0.1 --out "$OUT/long_video.json" > /dev/null
    show_runs "$OUT/long_video.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/decode.log"
  exit 0
fi
if [[ "${1:-}" == first-read ]]; then
  # where a fresh process's first read of the hour goes (a cold CLI's first two chunks: 10.6 s
  # of decode on an H100, the next ones 0.15 s); carry: .whl/av .whl/nvc .devtmp/seg
  {
    decode_prelude
    python3 benchmarks/first_read.py --clip /tmp/real_hour.mp4 --out "$OUT/first_read.json"
  } 2>&1 | tee "$OUT/first-read.log"
  exit 0
fi
if [[ "${1:-}" == decode-vss ]]; then
  # "decode-vss half": the first 30 minutes (183 chunks), for a call with less time left
  CLIP=/tmp/real_hour.mp4
  {
    t0=$SECONDS
    decode_prelude model
    if [[ "${2:-}" == half ]]; then
      CLIP=/tmp/real_half_hour.mp4
      [ -s $CLIP ] || python3 benchmarks/footage.py --segment .devtmp/seg/real.segment.mp4 \
          --minutes 30 --out $CLIP
    fi
    echo "device s before the run: $((SECONDS - t0))"
    timeout 480 python3 benchmarks/long_video.py --device cuda --model /tmp/chord-rand-7b \
        --clip $CLIP --task chapters --chunk-s 10 --chapter-s 300 \
        --frames-per-chunk 20 --describe-fps 2 --chunk-tokens 192 --batch-size 16 \
        --decode-only-fraction 0.02 --out "$OUT/long_video_vss.json" > /dev/null
    show_runs "$OUT/long_video_vss.json" all
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/decode-vss.log"
  exit 0
fi
if [[ "${1:-}" == ground-batch ]]; then
  # the hour grounded at 256 (the default, the same-run baseline), 512 and 128 frames a
  # generate call (chunks of at least that many frames, a target of its own each). On an H100
  # (2026-12-07) 32 / 64 / 128 took 117.2 / 92.4 / 81.7 s, generation-bound: a decode step
  # reads the weights once for all its rows; session 13's H100 took 50.9 s at 256 (72 GB at
  # its peak) against 52.3 at 128, and 256 became the default. 512 needs an H200's room (an
  # H100 halves it on out-of-memory). The decode-only pass reads 2 % of the jobs.
  {
    t0=$SECONDS
    decode_prelude model
    echo "device s before the runs: $((SECONDS - t0))"
    timeout 500 python3 benchmarks/long_video.py --device cuda --model /tmp/chord-rand-7b \
        --clip /tmp/real_hour.mp4 --task ground --ground-batch 256,512,128 --warmup \
        --decode-only-fraction 0.02 --out "$OUT/long_video_ground_batch.json" > /dev/null
    show_runs "$OUT/long_video_ground_batch.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/ground-batch.log"
  exit 0
fi
if [[ "${1:-}" == recheck ]]; then
  # after 4fcb750 and 5bd281f, one call: the Thinking row (issue 36: the answer scored from
  # the reasoning's cache), then `chapters` from a cold start (issue 34: no warm-up for a
  # one-shot run, two batches of chunks queued); carry: .whl/av .whl/nvc .devtmp/seg
  {
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    python3 benchmarks/thinking.py --shape 8b --pairs 64 --batch 64 --think-tokens 64 \
        --out "$OUT/thinking.json"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/recheck.log"
  bash "$0" decode-user
  exit 0
fi
if [[ "${1:-}" == all-in-one ]]; then
  # One call for a session with little device time (carry .whl/av .whl/nvc .devtmp/seg
  # .devtmp/tp/vocab: 55 MB): the CLI cold at the one-shot defaults (issue 34), then the
  # entailment pass's split with the vision MLP narrow against aligned (issue 36) and one
  # long-clip grounding call of 128 frames split the same way (issue 34's ground row), then
  # the Thinking row, each inside what is left of 570 s
  # (all-in-one no-cli: the split and the Thinking row alone, ≈ 5 minutes)
  t0=$SECONDS
  [[ "${2:-}" == no-cli ]] || {
    decode_prelude model
    rm -rf /tmp/chord-cold-cache /tmp/chord-cold-data
    echo "device s before the CLI: $((SECONDS - t0))"
    CHORD_CACHE_DIR=/tmp/chord-cold-cache CHORD_DATA_DIR=/tmp/chord-cold-data \
        timeout 300 python3 benchmarks/cli_timed.py --out "$OUT/chapters_user.json" -- \
        python3 -m chord_core chapters /tmp/real_hour.mp4 --model /tmp/chord-rand-7b \
        --json "$OUT/chapters_user_doc.json"
    echo "device s after the CLI: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/decode-user.log"
  VOCAB=$(realpath .devtmp/tp/vocab/qwen.tiktoken); M7=/tmp/chord-rand-7b-vocab
  {
    [ -f $M7/model.safetensors.index.json ] || \
        python3 -m chord_core make-tiny-model $M7 --shape 7b --device cuda --vocab "$VOCAB"
    timeout $((500 - (SECONDS - t0))) python3 benchmarks/prefill_split.py --model $M7 \
        --pairs 32 --ground-rows 128 --out "$OUT/split.json"
    echo "device s after the split: $((SECONDS - t0))"
    timeout $((575 - (SECONDS - t0))) python3 benchmarks/thinking.py --shape 8b --pairs 64 \
        --batch 64 --think-tokens 64 --out "$OUT/thinking.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/entail-profile.log"
  exit 0
fi
if [[ "${1:-}" == levers-long ]]; then
  # Issue 34 with the prefill levers (carry .whl/av .whl/nvc .devtmp/seg; ≈ 8 minutes with
  # the model built): the hour grounded at 128 frames a call, neither lever (CHORD_FUSE=0, the
  # same-run baseline) then CHORD_FP8=1 CHORD_FUSE=1; then VSS density on the half hour with
  # both, in what is left of the call (its baseline: "decode-vss half", 111.5 s on an H100)
  {
    t0=$SECONDS
    decode_prelude model
    [ -s /tmp/real_half_hour.mp4 ] || python3 benchmarks/footage.py \
        --segment .devtmp/seg/real.segment.mp4 --minutes 30 --out /tmp/real_half_hour.mp4
    echo "device s before the runs: $((SECONDS - t0))"
    for levers in "CHORD_FUSE=0" "CHORD_FP8=1 CHORD_FUSE=1"; do
      [[ "$levers" == CHORD_FUSE=0 ]] && tag= || tag=_levers
      env $levers timeout $((420 - (SECONDS - t0))) python3 benchmarks/long_video.py \
          --device cuda --model /tmp/chord-rand-7b --clip /tmp/real_hour.mp4 --task ground \
          --ground-batch 128 --warmup --decode-only-fraction 0.02 \
          --out "$OUT/long_video_ground$tag.json" > /dev/null
      echo "ground $levers:"
      show_runs "$OUT/long_video_ground$tag.json"
      echo "device s: $((SECONDS - t0))"
    done
    CHORD_FP8=1 CHORD_FUSE=1 timeout $((575 - (SECONDS - t0))) python3 benchmarks/long_video.py \
        --device cuda --model /tmp/chord-rand-7b --clip /tmp/real_half_hour.mp4 \
        --task chapters --chunk-s 10 --chapter-s 300 --frames-per-chunk 20 --describe-fps 2 \
        --chunk-tokens 192 --batch-size 16 --decode-only-fraction 0.02 \
        --out "$OUT/long_video_vss_levers.json" > /dev/null
    show_runs "$OUT/long_video_vss_levers.json" all
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/levers-long.log"
  exit 0
fi
if [[ "${1:-}" == one-call ]]; then
  # For a session with time for one call (any H100 or H200; carry .devtmp/tp/vocab .whl/av
  # .whl/nvc .devtmp/seg: 56 MB; ≈ 7 minutes with the model built): tower-ab, then the hour
  # grounded at 256 and 128 frames a call (as h200-long) on the same random-weight 7B.
  # The OFA-VE loop's wheels and photographs do not fit beside these: "h200-36 loop" next.
  # "one-call ground": the GPU tests of the varlen kernel and of NVDEC (its sessions on
  # streams of their own since session 13), then the grounding (tower-ab in its own call)
  M7=/tmp/chord-rand-7b-vocab
  [[ "${2:-}" == ground ]] || bash "$0" tower-ab
  {
    t0=$SECONDS
    decode_prelude
    if [[ "${2:-}" == ground ]]; then
      python3 -m pytest -q -p no:cacheprovider tests/gpu/test_vision_varlen_gpu.py \
          tests/gpu/test_nvdec_reader.py -rs | tail -8
      [ -f $M7/model.safetensors.index.json ] || python3 -m chord_core make-tiny-model $M7 \
          --shape 7b --device cuda --vocab "$(realpath .devtmp/tp/vocab/qwen.tiktoken)"
    fi
    timeout 480 python3 benchmarks/long_video.py --device cuda \
        --model $M7 --clip /tmp/real_hour.mp4 --task ground --ground-batch 256,128 --warmup \
        --decode-only-fraction 0.02 --out "$OUT/long_video_ground_one.json" > /dev/null
    show_runs "$OUT/long_video_ground_one.json"
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/one-call.log"
  exit 0
fi
if [[ "${1:-}" == h200-long ]]; then
  # Issue 34's two open rows on the goal's card (one H200; carry .whl/av .whl/nvc .devtmp/seg;
  # ≈ 9 minutes with the model built), at the defaults (CHORD_FUSE on: the workers compile):
  # the hour grounded at 128 frames a call (the default before session 13) and at 256 (the
  # default now), then VSS density on the whole hour in what is left of the call
  {
    t0=$SECONDS
    decode_prelude model
    echo "device s before the runs: $((SECONDS - t0))"
    timeout 300 python3 benchmarks/long_video.py --device cuda --model /tmp/chord-rand-7b \
        --clip /tmp/real_hour.mp4 --task ground --ground-batch 128,256 --warmup \
        --decode-only-fraction 0.02 --out "$OUT/long_video_ground_h200.json" > /dev/null
    show_runs "$OUT/long_video_ground_h200.json"
    echo "device s: $((SECONDS - t0))"
    timeout $((585 - (SECONDS - t0))) python3 benchmarks/long_video.py --device cuda \
        --model /tmp/chord-rand-7b --clip /tmp/real_hour.mp4 --task chapters --chunk-s 10 \
        --chapter-s 300 --frames-per-chunk 20 --describe-fps 2 --chunk-tokens 192 \
        --batch-size 16 --decode-only-fraction 0.02 --out "$OUT/long_video_vss_h200.json" \
        > /dev/null
    show_runs "$OUT/long_video_vss_h200.json" all
    echo "device s: $((SECONDS - t0))"
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/h200-long.log"
  exit 0
fi
if [[ "${1:-}" == decode-user ]]; then
  {
    t0=$SECONDS
    decode_prelude model
    echo "device s before the run: $((SECONDS - t0))"
    # cold means cold on a warm machine too: no compile cache or store from an earlier call
    rm -rf /tmp/chord-cold-cache /tmp/chord-cold-data /tmp/chord-cold-cache-ab \
        /tmp/chord-cold-data-ab
    CHORD_CACHE_DIR=/tmp/chord-cold-cache CHORD_DATA_DIR=/tmp/chord-cold-data \
        timeout 480 python3 benchmarks/cli_timed.py --out "$OUT/chapters_user.json" \
        --store /tmp/chord-cold-data/chord.sqlite3 -- \
        python3 -m chord_core chapters /tmp/real_hour.mp4 --model /tmp/chord-rand-7b \
        --json "$OUT/chapters_user_doc.json"
    echo "device s: $((SECONDS - t0))"
    if [[ "${2:-}" == then-ab ]]; then  # the same cold start with the step compiled
      # (the one-shot default is CHORD_COMPILE=0 since 2026-12-07: 15.2 s of compiling at
      # the first chunk, from an empty cache, against the decode steps it speeds up)
      CHORD_COMPILE=1 CHORD_CACHE_DIR=/tmp/chord-cold-cache-ab \
          CHORD_DATA_DIR=/tmp/chord-cold-data-ab timeout $((570 - (SECONDS - t0))) \
          python3 benchmarks/cli_timed.py --out "$OUT/chapters_user_compiled.json" -- \
          python3 -m chord_core chapters /tmp/real_hour.mp4 --model /tmp/chord-rand-7b \
          --json "$OUT/chapters_user_compiled_doc.json"
      echo "device s: $((SECONDS - t0))"
    fi
    if [[ "${2:-}" == then-ground ]]; then  # the hour grounded at the default 128 frames
      timeout $((570 - (SECONDS - t0))) python3 benchmarks/long_video.py --device cuda \
          --model /tmp/chord-rand-7b --clip /tmp/real_hour.mp4 --task ground \
          --ground-batch 128 --warmup --decode-only-fraction 0.02 \
          --out "$OUT/long_video_ground.json" > /dev/null
      show_runs "$OUT/long_video_ground.json"
      echo "device s: $((SECONDS - t0))"
    fi
    if [[ "${2:-}" == then-vss ]]; then  # VSS density in what is left of a 10-minute call
      timeout $((560 - (SECONDS - t0))) python3 benchmarks/long_video.py --device cuda \
          --model /tmp/chord-rand-7b --clip /tmp/real_hour.mp4 --task chapters --chunk-s 10 \
          --chapter-s 300 --frames-per-chunk 20 --describe-fps 2 --chunk-tokens 192 \
          --batch-size 16 --decode-only-fraction 0.02 --out "$OUT/long_video_vss.json"
      echo "device s: $((SECONDS - t0))"
    fi
  } 2>&1 | grep -v "Loading weights" | tee "$OUT/decode-user.log"
  exit 0
fi
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
