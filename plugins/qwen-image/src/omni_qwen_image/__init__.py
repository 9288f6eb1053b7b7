"""omni-qwen-image: Qwen-Image on omni-core (text encoder on vLLM's pooling runner, MMDiT + VAE on
diffusers), found through its entry point ``qwen-image`` in the group ``omni_core.plugins``."""
