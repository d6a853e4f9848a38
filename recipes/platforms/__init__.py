"""Where a run executes: the registry of platforms every consumer looks up (`registry.py`), verl's
trainer on a CPU (`cpu.py`, its verl platform `cpu_device.py`), vLLM's CPU build (`cpu_vllm.py`),
the GPU preflight (`gpu.py`), bit-for-bit runs (`determinism.py`) and verl's weight-sync sockets
(`weight_sync.py`). These import nothing of the training code above them (only recipes/settings.py
and recipes/files.py), so eval/ can use them."""
