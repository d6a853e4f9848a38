"""A decoder's shape, for recipes.plan: from its config.json (a local folder, or the Hugging Face
cache), else from `KNOWN`, each preset model's figures copied from its config.json on the Hub."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from omegaconf import DictConfig

from recipes.settings import ConfigError, select


@dataclasses.dataclass(frozen=True)
class Arch:
    """A decoder's shape, as its config.json gives it."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    head_dim: int | None = None
    qkv_bias: bool = False  # Qwen2 has biases on q, k, v
    qk_norm: bool = False  # Qwen3 normalizes q and k per head

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def params(self) -> int:
        h, hd = self.hidden, self.hd
        attn = h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h
        if self.qkv_bias:
            attn += self.heads * hd + 2 * self.kv_heads * hd
        if self.qk_norm:
            attn += 2 * hd
        layer = attn + 3 * h * self.intermediate + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h

    @classmethod
    def from_config(cls, c: dict) -> Arch:
        return cls(
            hidden=c["hidden_size"],
            layers=c["num_hidden_layers"],
            heads=c["num_attention_heads"],
            kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
            intermediate=c["intermediate_size"],
            vocab=c["vocab_size"],
            tied=bool(c.get("tie_word_embeddings", False)),
            head_dim=c.get("head_dim"),
            qkv_bias=c.get("model_type") == "qwen2" or bool(c.get("attention_bias", False)),
            qk_norm=c.get("model_type") == "qwen3",
        )


# From each model's config.json on the Hugging Face Hub (used when no local copy is at hand).
KNOWN = {
    "Qwen/Qwen2.5-Math-1.5B": Arch(1536, 28, 12, 2, 8960, 151936, True, qkv_bias=True),
    "Qwen/Qwen2.5-Math-7B-Instruct": Arch(3584, 28, 28, 4, 18944, 152064, False, qkv_bias=True),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": Arch(1536, 28, 12, 2, 8960, 151936, False, qkv_bias=True),
    "Qwen/Qwen3-1.7B": Arch(2048, 28, 16, 8, 6144, 151936, True, head_dim=128, qk_norm=True),
    "Qwen/Qwen3-4B": Arch(2560, 36, 32, 8, 9728, 151936, True, head_dim=128, qk_norm=True),
    "meta-llama/Llama-3.2-1B-Instruct": Arch(2048, 16, 32, 8, 8192, 128256, True, head_dim=64),
    "meta-llama/Llama-3.2-3B-Instruct": Arch(3072, 28, 24, 8, 8192, 128256, True, head_dim=128),
    "smollm2_135m": Arch(576, 30, 9, 3, 1536, 49152, True),
    "tiny": Arch(64, 2, 2, 1, 128, 768, True, qkv_bias=True),  # recipes/tools/models.py build_tiny
}


def arch_of(cfg: DictConfig) -> Arch:
    """The model's shape: its config.json when the model is on this machine, else KNOWN."""
    path = str(select(cfg, "actor_rollout_ref.model.path"))
    local = Path(path).expanduser() / "config.json"
    if local.is_file():
        return Arch.from_config(json.loads(local.read_text()))
    if path.count("/") == 1:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
            if isinstance(cached, str):
                return Arch.from_config(json.loads(Path(cached).read_text()))
        except ImportError:
            pass
    for key in (path, select(cfg, "recipes.model")):
        if key in KNOWN:
            return KNOWN[key]
    raise ConfigError(
        f"actor_rollout_ref.model.path={path}: no config.json here and not a known model ({', '.join(KNOWN)})."
    )
