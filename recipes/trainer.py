"""verl's sync V1 trainer plus what our methods need (`trainer.v1.trainer_mode=recipes_sync`).

1. Grader metrics. verl passes our grader's per-sample results (`acc`, `status`, `format_score`,
   ...) to validation metrics only. Every training step here also logs:
     grader/acc            mean 0/1 correctness of the step's responses
     grader/format_score   mean format score (prompt-augmentation templates; 0 without one)
     grader/status/<s>     fraction of responses with status s (ok, no_answer, timeout, error,
                           bad_ground_truth)
2. Per-template metrics (prompt augmentation), for each template used in the step:
     template/<name>/samples          number of responses shown that template
     template/<name>/acc              their mean accuracy
     template/<name>/format_score     their mean format score (how well the format is followed)
     template/<name>/response_length  their mean response length in tokens
3. The dataloader pass of every fetched row (`recipes_epoch`), which the prompt-augmentation
   agent loop needs to draw templates as a pure function of (seed, epoch, row, rollout). The
   number of fetches so far is saved with each checkpoint (`recipes_state.json`), so a resumed
   run knows the epoch even when DAPO's refills fetched a varying number of batches per step.
4. The rollout dump (`trainer.rollout_data_dir`) also records, per sample, its TransferQueue key,
   dataset row, epoch, session, advantage, template, TA-GRPO variant and grader result.
5. TA-GRPO (recipes/ta_grpo.py): the paper's diagnostic metrics `ta_grpo/*` every step, and for
   `groups: per_variant` (TA-GRPO*) each response's uid becomes (question, variant) before the
   advantage, so each variant's G responses are normalized on their own.
6. ProRL (recipes/prorl.py): the actor workers are `ProRLWorker`s; after each step (and at the
   start of the step after a validation that fired a trigger) the reset controller may reset the
   reference and the optimizer; its state and the reference snapshot go with each checkpoint.
Padding samples (verl duplicates samples to fill data-parallel ranks) are left out of 1, 2 and 4.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter, defaultdict

import numpy as np
import ray
import transfer_queue as tq
from omegaconf import open_dict
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from recipes import prorl, ta_grpo
from recipes.agent_loop import EPOCH_KEY
from rewards.grader import STATUSES

STATE_FILE = "recipes_state.json"


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


def template_metrics(templates: list[str | None], infos: list[dict], lengths: list[int]) -> dict[str, float]:
    """Per-template step metrics (module doc, 2.); responses without a template are skipped."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(templates):
        if name:
            groups[name].append(i)
    out: dict[str, float] = {}
    for name, idx in sorted(groups.items()):
        graded = [infos[i] for i in idx if "acc" in infos[i]]
        out[f"template/{name}/samples"] = float(len(idx))
        if graded:
            out[f"template/{name}/acc"] = float(np.mean([g["acc"] for g in graded]))
            out[f"template/{name}/format_score"] = float(
                np.mean([g.get("format_score", 0.0) for g in graded])
            )
        out[f"template/{name}/response_length"] = float(np.mean([lengths[i] for i in idx]))
    return out


def _unwrap(value):
    return getattr(value, "data", value)


@register_trainer("recipes_sync")
class RecipesTrainerSync(PPOTrainerSync):
    _fetches = 0  # dataloader batches fetched so far in this run, restored on resume

    def __init__(self, config):
        # verl picks its sync replay buffer, fetch size and checkpoint contents by comparing the
        # mode's NAME with "sync"; under "recipes_sync" it would treat this trainer as async.
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        self.prorl = prorl.settings_from_config(config)  # read by _init_resource_pool_mgr
        self.prorl_ctl = prorl.ResetController(self.prorl) if self.prorl else None
        self._training = False  # validations before training do not feed the ProRL triggers
        super().__init__(config)
        self.ta = ta_grpo.settings_from_config(config)

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if self.prorl is None:
            return
        if Role.ActorRolloutRef not in self.role_worker_mapping:
            raise prorl.ProRLError(
                f"ProRL resets a reference held by the actor's workers; this run's roles are "
                f"{sorted(map(str, self.role_worker_mapping))} (KL loss off, LoRA, or a separate reference)"
            )
        self.role_worker_mapping[Role.ActorRolloutRef] = ray.remote(prorl.ProRLWorker)

    # ------------------------------------------------------------------------------ ProRL
    def on_train_begin(self):
        super().on_train_begin()
        self._training = True

    def step(self, metrics: dict, timing_raw: dict):
        if self.prorl_ctl is None:
            return super().step(metrics, timing_raw)
        # a validation trigger of the previous step: reset to that step's weights before rollout
        early = self.prorl_ctl.take_pending(self.global_steps)
        if early:
            self._prorl_reset(self.global_steps - 1, early, timing_raw)
        batch = super().step(metrics, timing_raw)
        trigger = self.prorl_ctl.after_step(self.global_steps, metrics)
        if trigger:
            self._prorl_reset(self.global_steps, trigger, timing_raw)
        metrics.update(self.prorl_ctl.metrics(self.global_steps, trigger or early))
        return batch

    def _prorl_reset(self, step: int, trigger: str, timing_raw: dict) -> None:
        with marked_timer("prorl_reset", timing_raw, color="purple"):
            self.actor_rollout_wg.prorl_reset_reference(reset_optimizer=self.prorl.reset_optimizer)
        kl = self.prorl_ctl.last_kl
        self.prorl_ctl.record_reset(step, trigger)
        print(
            f"[prorl] reset {self.prorl_ctl.state.resets} after step {step}: trigger {trigger}, KL {kl}, "
            f"optimizer {'re-initialized' if self.prorl.reset_optimizer else 'kept'}, "
            f"{timing_raw['prorl_reset']:.2f} s",
            flush=True,
        )

    def _validate(self, *args, **kwargs):
        val_metrics = super()._validate(*args, **kwargs)
        if self.prorl_ctl is not None and self._training and self.prorl.watches_validation:
            self.prorl_ctl.after_validation(self.global_steps, val_metrics)
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            if os.path.isdir(folder):  # this step's checkpoint: record the decision for a resume
                self.prorl_ctl.save(folder)
        return val_metrics

    def _save_prorl(self, folder: str) -> None:
        self.prorl_ctl.save(folder)
        if self.prorl_ctl.state.resets:
            with marked_timer("prorl_snapshot", self.timing_raw, color="purple"):
                self.actor_rollout_wg.prorl_save_reference(folder=os.path.join(folder, prorl.SNAPSHOT_DIR))
        # verl rotates only the actor/ folder of old checkpoints (max_actor_ckpt_to_keep)
        root, current = os.path.split(folder)
        for name in os.listdir(root):
            old = os.path.join(root, name, prorl.SNAPSHOT_DIR)
            rotated = not os.path.isdir(os.path.join(root, name, "actor"))
            if name.startswith("global_step_") and name != current and rotated and os.path.isdir(old):
                shutil.rmtree(old, ignore_errors=True)

    def _load_prorl(self, folder: str) -> None:
        if not self.prorl_ctl.load(folder):
            self.prorl_ctl.state.last_reset_step = self.global_steps
            print(
                f"[prorl] {folder} has no ProRL state: the reference is the initial model, the interval "
                f"counts from step {self.global_steps}"
            )
            return
        if self.prorl_ctl.state.resets:
            snapshot = os.path.join(folder, prorl.SNAPSHOT_DIR)
            if not os.path.isdir(snapshot):
                raise prorl.ProRLError(
                    f"{snapshot} is missing: this checkpoint was taken after {self.prorl_ctl.state.resets} "
                    "reference reset(s), and without the snapshot the reference cannot be restored"
                )
            self.actor_rollout_wg.prorl_load_reference(folder=snapshot)
            print(f"[prorl] reference restored from {snapshot} (reset {self.prorl_ctl.state.resets})")

    # ----------------------------------------------------------------- epochs of fetched rows
    def _fetch_one_gen_batch(self):
        epoch = self._fetches // len(self.train_dataloader)
        batch = super()._fetch_one_gen_batch()
        self._fetches += 1
        tu.assign_non_tensor_stack(batch, EPOCH_KEY, [epoch] * len(batch))
        return batch

    def _step_folder(self) -> str:
        if self.config.trainer.resume_mode == "resume_path" and self.config.trainer.resume_from_path:
            return os.path.abspath(self.config.trainer.resume_from_path)
        root = os.path.abspath(self.config.trainer.default_local_dir)
        return os.path.join(root, f"global_step_{self.global_steps}")

    def _save_checkpoint(self):
        # ours first: verl writes latest_checkpointed_iteration.txt last, so a save interrupted
        # anywhere leaves the tracker on the previous, complete checkpoint
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, STATE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump({"global_steps": self.global_steps, "dataloader_fetches": self._fetches}, f)
        os.replace(path + ".tmp", path)
        if self.prorl_ctl is not None:
            self._save_prorl(folder)
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps <= 0:
            return
        path = os.path.join(self._step_folder(), STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self._fetches = int(json.load(f)["dataloader_fetches"])
        else:  # a checkpoint written by plain verl: exact unless DAPO refilled
            gen = self.config.data.get("gen_batch_size") or self.config.data.train_batch_size
            self._fetches = self.global_steps * (self.config.data.train_batch_size // gen)
            print(
                f"[recipes] {path} missing: assuming {self._fetches} dataloader fetches before step "
                f"{self.global_steps + 1}"
            )
        if self.prorl_ctl is not None:
            self._load_prorl(self._step_folder())

    # ---------------------------------------------------------------------------- metrics
    def _sample_fields(self, batch, fields: list[str]):
        """TransferQueue fields of the batch's non-padding samples (keys in batch order)."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        return keep, data

    def _compute_advantage(self, batch, metrics: dict):
        fields = ["extra_fields", "responses"] + (["uid"] if self.ta is not None else [])
        keep, data = self._sample_fields(batch, fields)
        every = [_unwrap(v) for v in data["extra_fields"]]
        every = [e if isinstance(e, dict) else {} for e in every]
        extra = [every[i] for i in keep]
        lengths = data["responses"].offsets().diff().tolist()
        infos = [e.get("reward_extra_info", {}) for e in extra]
        metrics.update(grader_metrics(infos))
        metrics.update(
            template_metrics([e.get("template") for e in extra], infos, [lengths[i] for i in keep])
        )
        if self.ta is not None:
            uids = [str(_unwrap(u)) for u in data["uid"]]
            metrics.update(
                ta_grpo.diagnostics(
                    [uids[i] for i in keep],
                    [int(e.get("variant", 0)) for e in extra],
                    [float(i.get("score", 0.0)) for i in infos],
                    [float(i.get("acc", 0.0)) for i in infos],
                    self.ta.n_variants,
                )
            )
            if self.ta.groups == "per_variant":  # TA-GRPO*: one GRPO group per (question, variant)
                split = [{"uid": f"{u}:v{e.get('variant', 0)}"} for u, e in zip(uids, every, strict=True)]
                tq.kv_batch_put(
                    keys=batch.keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(split)
                )
        return super()._compute_advantage(batch, metrics)

    # ------------------------------------------------------------------------ rollout dump
    def _log_rollout_data(self, batch, timing_raw: dict, rollout_data_dir: str):
        """verl's dump (input, output, gts, score, step) plus, per sample: key, row, epoch,
        session, advantage, template, variant (and generation_input when anchored) and the
        grader's acc / format_score / status / pred."""
        with marked_timer("dump_rollout_generations", timing_raw, color="green"):
            # every training batch has EPOCH_KEY (_fetch_one_gen_batch)
            fields = (
                "prompts responses rm_scores advantages reward_model extra_fields index session_id".split()
            )
            keep, data = self._sample_fields(batch, [*fields, EPOCH_KEY])
            pad = self.tokenizer.pad_token_id
            prompts = data["prompts"].to_padded_tensor(padding=pad)
            responses = data["responses"].to_padded_tensor(padding=pad)
            scores = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=1).tolist()
            # outcome advantages are one value per response: its first token's
            advantages = data["advantages"].to_padded_tensor(padding=0.0)[:, 0].tolist()
            rm = [_unwrap(v) for v in data["reward_model"]]
            extra = [_unwrap(v) for v in data["extra_fields"]]
            column = {k: [_unwrap(v) for v in data[k]] for k in ("index", "session_id", EPOCH_KEY)}

            def sort_key(i: int):
                uid, session, idx = batch.keys[i].rsplit("_", 2)
                return uid, int(session), int(idx)

            order = sorted(keep, key=sort_key)
            infos = [(extra[i] or {}).get("reward_extra_info", {}) for i in order]
            columns = {
                "key": [batch.keys[i] for i in order],
                "row": [int(column["index"][i]) for i in order],
                "session": [int(column["session_id"][i]) for i in order],
                "epoch": [int(column[EPOCH_KEY][i]) for i in order],
                "advantage": [advantages[i] for i in order],
                "template": [(extra[i] or {}).get("template") for i in order],
                "variant": [(extra[i] or {}).get("variant") for i in order],
                # TA-GRPO anchored: the prompt the response was generated from (`input` is q0's)
                "generation_input": [
                    self.tokenizer.decode(extra[i]["generation_prompt_ids"], skip_special_tokens=True)
                    if "generation_prompt_ids" in (extra[i] or {})
                    else None
                    for i in order
                ],
            }
            for k in ("acc", "format_score", "status", "pred"):
                columns[k] = [info.get(k) for info in infos]
            self._dump_generations(
                inputs=[self.tokenizer.decode(prompts[i], skip_special_tokens=True) for i in order],
                outputs=[self.tokenizer.decode(responses[i], skip_special_tokens=True) for i in order],
                gts=[(rm[i] or {}).get("ground_truth") for i in order],
                scores=[scores[i] for i in order],
                reward_extra_infos_dict=columns,
                dump_path=rollout_data_dir,
            )
