"""Strategy options that other options leave unused are refused (strategies/base.py ONLY_WITH)."""

from __future__ import annotations

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
