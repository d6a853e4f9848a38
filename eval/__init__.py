"""Evaluation: checkpoints converted to HuggingFace and scored on the math benchmarks.

    python -m eval.run --model PATH [...]          one model, the paper's five benchmarks (eval/run.py)
    python -m eval.iterate CHECKPOINT_ROOT [...]   every checkpoint of a run: convert, evaluate, plot
    python -m eval.convert CHECKPOINT_ROOT [...]   conversion only (verl's model merger)

Modules: `metrics` (pass@k, averages), `benchmarks` (loaders), `grading` (math and letter grading),
`backends` (vLLM and transformers behind one interface), `results` (resumable sample store,
summary, table), `convert`, `weights` (a model folder's weights against its config), `plot`;
eval.run's stages: `request` (settings and their checks), `options` (the command-line options, shared
with eval.iterate), `prompts`, `plan` (what a results folder lacks), `generate`, `summary`;
eval.iterate's: `step_table` (the table and plot across steps), `training_run` (the run's config.yaml,
TensorBoard and wandb). Each paper's protocol (`--protocol`) is data in recipes/protocols.py. The
commands and the table they print: docs/eval.md.
"""
