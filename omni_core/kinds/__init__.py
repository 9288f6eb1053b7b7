"""Built-in stage kinds with real engines: ``vllm``, ``vocoder``, ``torch`` (a plugin's engine).

Registration (config models, factories) imports no engine library; the engines themselves run in
their own stage processes, which import torch/vLLM.
"""
