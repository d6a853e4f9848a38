"""Our contract with verl and vLLM (recipes/verl_contract/, docs/verl_contract.md): the installed
versions still provide every symbol we override, patch, register with or call, as the table says;
the table lists every one our code reaches; the doc is the table. A changed verl is stood in for by
its own source files with one edit (the check reads sources, it does not import them)."""

from pathlib import Path

import recipes.verl_contract as contract
from recipes.verl_contract.source import Sources

REPO = Path(__file__).resolve().parent.parent


def test_the_installed_verl_and_vllm_keep_the_contract():
    assert contract.problems() == []


def test_every_verl_and_vllm_symbol_our_code_reaches_is_in_the_table():
    assert contract.unlisted() == []


def test_the_doc_is_the_table():
    """docs/verl_contract.md is `python -m recipes.verl_contract --markdown`: regenerate it after a change."""
    assert (REPO / "docs" / "verl_contract.md").read_text() == contract.markdown()


def edited(path_end: str, old: str, new: str) -> Sources:
    """The installed sources, with `old` replaced by `new` in the file whose path ends `path_end`:
    a stand-in for an upgraded verl or vLLM."""

    def read(path: Path) -> str:
        text = path.read_text()
        if path.as_posix().endswith(path_end):
            assert text.count(old) == 1, (path, old)
            return text.replace(old, new)
        return text

    return Sources(read=read)


TRAINER_BASE = "verl/trainer/ppo/v1/trainer_base.py"


def test_a_renamed_override_is_named(monkeypatch, capsys):
    renamed = edited(TRAINER_BASE, "    def _balance_batch(", "    def _balance_batch_by_seqlen(")
    line = (
        "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._balance_batch "
        "(recipes/extensions/trainer.py, override): not found"
    )
    assert contract.problems(renamed) == [line]
    monkeypatch.setattr(contract, "Sources", lambda: renamed)  # what `python -m recipes.verl_contract` reads
    assert contract.main([]) == 1
    assert capsys.readouterr().out.splitlines() == [
        line,
        "1 symbol(s) moved or unlisted (docs/verl_contract.md)",
    ]


def test_a_changed_signature_is_named():
    sources = edited(
        TRAINER_BASE,
        "def _update_actor(self, batch: KVBatchMeta, metrics: dict)",
        "def _update_actor(self, batch: KVBatchMeta, metrics: dict, *, step: int = 0)",
    )
    assert contract.problems(sources) == [
        "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor (recipes/extensions/trainer.py, override): "
        "parameters (self, batch, metrics, step), expected (self, batch, metrics)"
    ]


def test_an_override_verl_stops_calling_is_named():
    sources = edited(
        TRAINER_BASE,
        "batch = self._compute_advantage(batch, metrics=metrics)",
        "batch = self._compute_advantages(batch, metrics=metrics)",
    )
    assert contract.problems(sources) == [
        "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_advantage (recipes/extensions/trainer.py, "
        "override): no longer called by verl.trainer.ppo.v1.trainer_base:PPOTrainer._step_once"
    ]


def test_vllm_verls_socket_names_and_platform_interface_are_checked_too():
    gemm = edited(
        "vllm/model_executor/layers/utils.py", "def dispatch_cpu_unquantized_gemm(", "def dispatch_cpu_gemm("
    )
    assert contract.problems(gemm) == [
        "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm (recipes/platforms/cpu_vllm.py, call): "
        "not found"
    ]
    socket = edited("verl/workers/rollout/vllm_rollout/vllm_rollout.py", "rl-colocate-zmq-", "verl-ipc-")
    assert contract.problems(socket) == [
        "verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.__init__ (recipes/platforms/weight_sync.py, "
        "wrap): its source no longer contains 'rl-colocate-zmq-'"
    ]
    new_abstract = edited(
        "verl/plugin/platform/platform_base.py",
        "    @staticmethod\n    def check_smi_command(",
        "    @abc.abstractmethod\n    def memory_stats(self):\n        ...\n\n"
        "    @staticmethod\n    def check_smi_command(",
    )
    assert contract.problems(new_abstract) == [
        "verl.plugin.platform.platform_base:PlatformBase (recipes/platforms/cpu_device.py, subclass): "
        "abstract methods we do not implement: memory_stats"
    ]


def test_what_the_table_misses_is_named(tmp_path):
    """A module of ours that imports a verl name, overrides a verl method and hooks a verl module
    the table does not list."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "new.py").write_text(
        "from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync\n"
        "from verl.utils.fs import copy_to_local, local_mkdir_safe\n\n"
        "class T(PPOTrainerSync):\n"
        "    def _balance_batch(self, batch, metrics, **kw): ...\n"
        "    def _compute_values(self, batch, metrics): ...\n"
        "    def ours(self): ...\n\n"
        'PATCHES = {"verl.utils.fs": print, "verl.utils.seqlen_balancing": print}\n'
    )
    assert contract.unlisted(repo=tmp_path) == [
        "recipes/new.py: verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_values",
        "recipes/new.py: verl.utils.fs:local_mkdir_safe",
    ]  # copy_to_local, _balance_batch and both modules are listed
