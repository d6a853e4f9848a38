"""verl's sync V1 trainer plus what our methods need (`trainer.v1.trainer_mode=recipes_sync`).

1. Grader metrics. verl passes our grader's per-sample results (`acc`, `status`, `format_score`,
   ...) to validation metrics only. Every training step here also logs:
     grader/acc            mean 0/1 correctness of the step's responses
     grader/format_score   mean format score of the responses' templates (0 without one)
     grader/status/<s>     fraction of responses with status s (rewards.grade.STATUSES: ok,
                           no_answer, box_too_long, timeout, error, bad_ground_truth, too_deep)
2. Each active method's `TrainerHooks` (recipes/methods/base.py, recipes/methods/registry.py): before and
   after each step, after validations, before the advantage, the advantage groups, in
   checkpoints and in the rollout dump. This file knows no method by name.
3. The dataloader pass of every fetched row (`recipes_epoch`), which the agent loop needs to
   make each rollout's prompt a pure function of (seed, epoch, row, rollout). The number of
   fetches so far is saved with each checkpoint (`recipes_state.json`), so a resumed run knows
   the epoch even when dynamic sampling's refills fetched a varying number of batches per step.
4. The rollout dump (`trainer.rollout_data_dir`) also records, per sample, its TransferQueue key,
   dataset row, epoch, session, advantage, grader result and the columns the methods add.
5. One sample order whatever the order the rollouts finished in: each fetched row's uid is
   `<fetch>-<position>` (verl draws random ones), and every step's batch is sorted by TransferQueue
   key (`<uid>_<session>_<output>`) before verl balances it over the workers. Mini-batches and
   gradient sums then see the samples in the same order in every launch (recipes/platforms/determinism.py).
6. On-policy updates skip verl's old-log-prob forward (recipes/extensions/on_policy.py): the loss takes the
   update's own log-probs as the old ones; entropy and the rollout-vs-actor metrics come from the
   update's forward under verl's names.
7. Finished rollouts are looked for every `recipes.rollout_poll_s` seconds (verl's replay buffer:
   every 2 s, so each generation and validation phase ended on a 2 s tick).
Padding samples (verl duplicates samples to fill data-parallel ranks) are left out of 1, 2 and 4.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import torch
import transfer_queue as tq
from omegaconf import open_dict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from recipes.checkpoints import Retention, step_folder
from recipes.extensions import on_policy
from recipes.files import atomic_write_text
from recipes.methods import registry
from recipes.methods.base import EPOCH_KEY, Samples
from rewards.grade import STATUSES

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


def key_order(key: str) -> tuple[str, int, int]:
    """Sort key of a TransferQueue sample key `<uid>_<session>_<output>`: by uid, then session and
    output as numbers (session 10 after session 9)."""
    uid, session, output = key.rsplit("_", 2)
    return uid, int(session), int(output)


def _unwrap(value):
    return getattr(value, "data", value)


@register_trainer("recipes_sync")
class RecipesTrainerSync(PPOTrainerSync):
    _fetches = 0  # dataloader batches fetched so far in this run, restored on resume

    def __init__(self, config):
        # verl picks its sync replay buffer, fetch size and checkpoint contents by comparing the
        # mode's NAME with "sync"; under "recipes_sync" it would treat this trainer as async.
        self.on_policy = on_policy.active(config)
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
            if self.on_policy:  # actor/entropy from the update's forward (6)
                config.actor_rollout_ref.actor.calculate_entropy = True
        self.hooks = registry.trainer_hooks(config)  # read by _init_resource_pool_mgr
        keep = config.recipes.get("checkpoints", {}).get("keep_full")
        self.retention = None if keep is None else Retention(config.trainer.default_local_dir, keep)
        super().__init__(config)

    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        buffer.poll_interval = float(self.config.recipes.rollout_poll_s)  # (7)
        return buffer

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for hook in self.hooks:
            hook.setup_workers(self)

    def on_train_begin(self):
        super().on_train_begin()
        for hook in self.hooks:
            hook.on_train_begin(self)

    def step(self, metrics: dict, timing_raw: dict):
        for hook in self.hooks:
            hook.before_step(self, timing_raw)
        batch = super().step(metrics, timing_raw)
        for hook in self.hooks:
            hook.after_step(self, metrics, timing_raw)
        return batch

    def _validate(self, *args, **kwargs):
        val_metrics = super()._validate(*args, **kwargs)
        for hook in self.hooks:
            hook.after_validation(self, val_metrics)
        return val_metrics

    # ----------------------------------------------------------------- epochs of fetched rows
    def _fetch_one_gen_batch(self):
        epoch = self._fetches // len(self.train_dataloader)
        batch = super()._fetch_one_gen_batch()
        uids = [f"{self._fetches:07d}-{i:05d}" for i in range(len(batch))]  # no "_": verl splits keys on it
        self._fetches += 1
        tu.assign_non_tensor_stack(batch, EPOCH_KEY, [epoch] * len(batch))
        tu.assign_non_tensor_stack(batch, "uid", uids)
        return batch

    def _balance_batch(self, batch, metrics, **kwargs):
        batch.reorder(sorted(range(len(batch.keys)), key=lambda i: key_order(batch.keys[i])))
        return super()._balance_batch(batch, metrics, **kwargs)

    def _step_folder(self) -> str:
        if self.config.trainer.resume_mode == "resume_path" and self.config.trainer.resume_from_path:
            return os.path.abspath(self.config.trainer.resume_from_path)
        return step_folder(os.path.abspath(self.config.trainer.default_local_dir), self.global_steps)

    def _save_checkpoint(self):
        # ours first: verl writes latest_checkpointed_iteration.txt last, so a save interrupted
        # anywhere leaves the tracker on the previous, complete checkpoint
        folder = step_folder(self.config.trainer.default_local_dir, self.global_steps)
        state = {"global_steps": self.global_steps, "dataloader_fetches": self._fetches}
        atomic_write_text(os.path.join(folder, STATE_FILE), json.dumps(state))
        for hook in self.hooks:
            hook.save(self, folder)
        super()._save_checkpoint()
        if self.retention is not None:
            self.retention.after_save()

    def fit(self, *args, **kwargs):
        try:
            return super().fit(*args, **kwargs)
        finally:
            if self.retention is not None:
                self.retention.finish()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps <= 0:
            return
        path = os.path.join(self._step_folder(), STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self._fetches = int(json.load(f)["dataloader_fetches"])
        else:  # a checkpoint written by plain verl: exact unless dynamic sampling refilled
            gen = self.config.data.get("gen_batch_size") or self.config.data.train_batch_size
            self._fetches = self.global_steps * (self.config.data.train_batch_size // gen)
            print(
                f"[recipes] {path} missing: assuming {self._fetches} dataloader fetches before step "
                f"{self.global_steps + 1}"
            )
        for hook in self.hooks:
            hook.load(self, self._step_folder())

    # ------------------------------------------------------------------ on-policy updates (6)
    def _compute_old_log_prob(self, batch, metrics: dict):
        if not self.on_policy:
            return super()._compute_old_log_prob(batch, metrics)
        # the field must exist for verl's advantage step; the loss replaces it (recipes/extensions/on_policy.py)
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["response_mask"]
        )
        data["old_log_probs"] = torch.zeros_like(data["response_mask"], dtype=torch.float32)
        return tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=data.select("old_log_probs")
        )

    def _update_actor(self, batch, metrics: dict):
        if not self.on_policy:
            return super()._update_actor(batch, metrics)
        batch.extra_info[on_policy.FLAG] = True
        update: dict = {}
        batch = super()._update_actor(batch, update)
        for key, value in update.items():  # verl's names, as the skipped pass would have logged them
            metrics[key.removeprefix("actor/") if key.startswith("actor/training/") else key] = value
        if "actor/entropy_loss" in update:
            metrics["actor/entropy"] = update["actor/entropy_loss"]
        return batch

    # ---------------------------------------------------------------------------- metrics
    def _sample_fields(self, batch, fields: list[str]):
        """TransferQueue fields of the batch's non-padding samples (keys in batch order)."""
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        return keep, data

    def put_fields(self, batch, rows: list[dict]) -> None:
        """Overwrite TransferQueue fields of every sample of `batch` (one dict per sample)."""
        tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(rows)
        )

    def _compute_advantage(self, batch, metrics: dict):
        wanted = sorted({"uid", *(f for hook in self.hooks for f in hook.advantage_fields)})
        keep, data = self._sample_fields(batch, ["extra_fields", "responses", *wanted])
        extra = [_unwrap(v) for v in data["extra_fields"]]
        extra = [e if isinstance(e, dict) else {} for e in extra]
        lengths = data["responses"].offsets().diff().tolist()
        infos = [extra[i].get("reward_extra_info", {}) for i in keep]
        metrics.update(grader_metrics(infos))
        samples = Samples(keep, extra, infos, [lengths[i] for i in keep], {f: data[f] for f in wanted})
        for hook in self.hooks:
            hook.before_advantage(self, batch, samples, metrics)
        uids = [str(_unwrap(u)) for u in data["uid"]]
        groups = uids
        for hook in self.hooks:
            groups = hook.advantage_groups(self, groups, samples)
        if groups != uids:
            self.put_fields(batch, [{"uid": g} for g in groups])
        if not self.on_policy:
            return super()._compute_advantage(batch, metrics)
        verl: dict = {}  # rollout_corr/* would compare the rollout with the placeholder (6)
        batch = super()._compute_advantage(batch, verl)
        metrics.update({k: v for k, v in verl.items() if not k.startswith("rollout_corr/")})
        return batch

    # ------------------------------------------------------------------------ rollout dump
    def _log_rollout_data(self, batch, timing_raw: dict, rollout_data_dir: str):
        """verl's dump (input, output, gts, score, step) plus, per sample: key, row, epoch,
        session, advantage, the grader's acc / format_score / status / pred, and the columns of
        the methods' dump_columns."""
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

            order = sorted(keep, key=lambda i: key_order(batch.keys[i]))
            infos = [(extra[i] or {}).get("reward_extra_info", {}) for i in order]
            columns = {
                "key": [batch.keys[i] for i in order],
                "row": [int(column["index"][i]) for i in order],
                "session": [int(column["session_id"][i]) for i in order],
                "epoch": [int(column[EPOCH_KEY][i]) for i in order],
                "advantage": [advantages[i] for i in order],
            }
            for hook in self.hooks:
                columns.update(hook.dump_columns(self, [extra[i] or {} for i in order]))
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
