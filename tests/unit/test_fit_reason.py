"""A result that does not fit says by how much, with enough digits to tell need and limit apart."""

from __future__ import annotations

from ltsim.sim.metrics import _apart

GiB = 2**30


def test_a_need_just_over_its_limit_reads_over_it():
    # ltsim maxlen's first failing length read "needs 21.9 GiB, the limit is 21.9 GiB" (a review)
    assert _apart(37.54 * GiB, 37.14 * GiB) == ("37.5", "37.1")  # one decimal when it tells
    assert _apart(21.94 * GiB, 21.90 * GiB) == ("21.94", "21.90")
    assert _apart(21.9004 * GiB, 21.9 * GiB) == ("21.9004", "21.9000")
