"""verl's sync V1 trainer plus per-step grader metrics (`trainer.v1.trainer_mode=recipes_sync`).

verl passes our grader's per-sample results (`acc`, `status`, `format_score`, ...) to validation
metrics and rollout dumps only. This subclass adds them to every training step's metrics, so the
step table and metrics JSONL show accuracy separately from the shaped reward, and how many
samples the grader timed out on:

  grader/acc            mean 0/1 correctness of the step's responses
  grader/format_score   mean format score (prompt-augmentation templates; 0 without one)
  grader/status/<s>     fraction of responses with status s (ok, no_answer, timeout, error,
                        bad_ground_truth)
"""

from __future__ import annotations

from collections import Counter

import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from rewards.grader import STATUSES


def grader_metrics(infos: list[dict]) -> dict[str, float]:
    """Step metrics from the reward extra info of each response (missing keys are skipped)."""
    graded = [i for i in infos if "acc" in i]
    if not graded:
        return {}
    n = len(graded)
    out = {
        "grader/acc": sum(float(i["acc"]) for i in graded) / n,
        "grader/format_score": sum(float(i.get("format_score", 0.0)) for i in graded) / n,
    }
    counts = Counter(i.get("status") for i in graded)
    out.update({f"grader/status/{s}": counts.get(s, 0) / n for s in STATUSES})
    return out


@register_trainer("recipes_sync")
class RecipesTrainerSync(PPOTrainerSync):
    def _compute_advantage(self, batch, metrics: dict):
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        infos = []
        for value in data["extra_fields"]:
            fields = getattr(value, "data", value)
            infos.append(fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {})
        metrics.update(grader_metrics(infos))
        return super()._compute_advantage(batch, metrics)
