"""Strategy options that other options leave unused are refused (strategies/base.py ONLY_WITH)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ltsim.errors import ConfigError


@pytest.mark.parametrize("name, raw, pattern", [
    ("seq1f1b", {"num_splits": 2}, r"'strategy.num_splits' must be given only with "
     r"strategy.variant = \"original\" \(unused otherwise\) \(got 2\)\. Fix: drop strategy.num_splits"),
    ("seq1f1b", {"split": "average"}, r"'strategy.split' must be given only with strategy.variant"),
    ("alst", {"offload_checkpoints": False, "offload_async": True},
     r"'strategy.offload_async' must be given only with strategy.offload_checkpoints = true"),
])
def test_an_option_its_other_options_leave_unused_is_refused(name, raw, pattern):
    # the helper's probe: seq1f1b:num_splits=2 and =16 gave identical rows under variant enhanced
    from ltsim.strategies import get_strategy

    with pytest.raises(ConfigError, match=pattern):
        get_strategy(name).parse(raw)
    get_strategy(name).parse({**raw, **({"variant": "original"} if name == "seq1f1b" else
                                        {"offload_checkpoints": True})})


@pytest.mark.parametrize("name, raw, warned", [
    ("seq1f1b", {"variant": "original", "chunk_size": 8192},
     'strategy.chunk_size = 8192 is not used: it is read only with strategy.variant = "enhanced"'),
    ("deepspeed-cp", {"micro_batch_size": 1, "bucket_size": 4096},
     "strategy.bucket_size = 4096 is not used: it is read only with strategy.micro_batch_size = 0"),
    ("deepspeed-ulysses", {"micro_batch_size": 2, "bucket_size": "auto"},
     'strategy.bucket_size = "auto" is not used: it is read only with '
     'strategy.micro_batch_size = 0'),
])
def test_an_option_kept_legal_but_unused_is_warned_about(name, raw, warned):
    from ltsim.strategies import get_strategy

    strategy = get_strategy(name)
    assert strategy.ignored(raw, strategy.parse(raw)) == [warned]
    used = {k: v for k, v in raw.items() if k in ("chunk_size", "bucket_size")}  # the default
    assert strategy.ignored(used, strategy.parse(used)) == []  # other option: it is read


def test_a_simulation_reports_an_unused_option_among_its_warnings(tmp_path):
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[hardware]\npreset = "unit"\nnum_nodes = 1\ngpus_per_node = 2\n'
                    '[model]\npreset = "qwen2.5-0.5b"\n'
                    '[parallel]\ncp = 2\n[workload]\nlengths = [512, 256]\n'
                    '[strategy]\nname = "deepspeed-cp"\nmicro_batch_size = 1\nbucket_size = 128\n')
    warnings = simulate(load_scenario(path)).warnings
    assert any("strategy.bucket_size = 128 is not used" in w for w in warnings)


@pytest.mark.parametrize("sets, said", [
    (["seed=3"], "seed = 3 is not used: workload.lengths is the batch"),
    (["parallel.cp=1", 'parallel.cp_kind="ulysses"'], 'parallel.cp_kind = "ulysses" is not used'),
    (["seed=3", 'workload.dataset="wikipedia"', "workload.global_batch_size=2"], None),
    (['parallel.cp_kind="ring"'], None)])
def test_a_scenario_key_nothing_reads_is_said(tmp_path, sets, said):
    """Keys given where nothing reads them ran without a word (a sweep over them ran alike)."""
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[hardware]\npreset = "unit"\nnum_nodes = 1\ngpus_per_node = 2\n'
                    '[model]\npreset = "qwen2.5-0.5b"\n'
                    '[parallel]\ncp = 2\n[workload]\nlengths = [512, 256]\n'
                    '[strategy]\nname = "deepspeed-cp"\n')
    warnings = simulate(load_scenario(path, sets)).warnings
    notes = [w for w in warnings if "is not used" in w]
    assert notes == ([] if said is None else [next(w for w in notes if said in w)])


def test_a_command_imports_only_the_strategy_it_plans_with():
    # the registry imports a strategy's module when first asked (about 20 ms of start-up for all
    # twelve); a grid key of the scenario's own strategy is checked without importing the others
    code = ("import sys\n"
            "from ltsim.scenario import check_override_key, load_scenario\n"
            "from ltsim.strategies import MODULES\n"
            "load_scenario('scenarios/quickstart.toml')\n"
            "check_override_key('strategy.chunk_size', '--grid')\n"
            "print(*sorted(m for m in MODULES.values() if 'ltsim.strategies.' + m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["chunkflow"]


def test_every_strategy_module_is_named_as_its_registry_entry_and_keys_check_against_all():
    from ltsim.scenario import check_override_key
    from ltsim.strategies import MODULES, REGISTRY

    assert [REGISTRY[name].name for name in MODULES] == list(MODULES)
    check_override_key("strategy.bucket_size", "--grid")  # skrull's and deepspeed-cp's
    with pytest.raises(ConfigError, match=r"'--grid' must be a known key \(.*chunk_size.*\(got "
                                          r"'strategy\.chunk_sise'\)"):
        check_override_key("strategy.chunk_sise", "--grid")


def test_a_strategy_taken_out_of_the_registry_is_unknown(monkeypatch):
    from ltsim.strategies import REGISTRY, get_strategy

    REGISTRY["chunkflow"]  # loaded, then taken out: asked for again, it is not imported anew
    monkeypatch.delitem(REGISTRY, "chunkflow")
    assert "chunkflow" not in REGISTRY and REGISTRY.get("chunkflow") is None
    with pytest.raises(ConfigError, match=r"'strategy\.name' must be one of .*\(got 'chunkflow'\)"):
        get_strategy("chunkflow")
