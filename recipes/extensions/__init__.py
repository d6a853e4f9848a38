"""What verl loads and calls: the `verl.plugins` entry point (`plugins.py`), the trainer
`recipes_sync` (`trainer.py`), the agent loop `recipes_prompt_variants` (`agent_loop.py`), the
reward manager `math_pool` (`reward_manager.py`) and the on-policy loss (`on_policy.py`). They loop
over the registered methods (recipes/methods/) and name none."""
