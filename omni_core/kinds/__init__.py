"""Built-in stage kinds with real engines: ``vllm``, ``vocoder``, ``diffusion``.

Registration (config models, factories) imports no engine library; the engines themselves run in
their own stage processes, which import torch/vLLM.
"""
