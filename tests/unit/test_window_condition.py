"""The eager join's window condition kernel against its rule written out per combination."""

from __future__ import annotations

import numpy as np
import pytest

from processors.kernels.window_condition import newest_in_window


def _rule(ts: np.ndarray, inputs: list[int], ranges: list[int], complete: bool):  # type: ignore[no-untyped-def]
    newest, keep = [], []
    for j in range(ts.shape[1]):
        best_ts, best_in = max((int(ts[r, j]), inputs[r]) for r in range(len(inputs)))
        newest.append(best_ts)
        ok = True
        for r, inp in enumerate(inputs):
            age = best_ts - int(ts[r, j])
            ok = ok and (
                (age < ranges[r] or (age == ranges[r] and inp > best_in))
                if complete
                else age <= ranges[r]
            )
        keep.append(ok)
    return newest, keep


@pytest.mark.parametrize("complete", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_the_kernel_follows_the_rule_ties_included(complete: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    inputs = [int(x) for x in rng.permutation(4)[: rng.integers(2, 5)]]
    ranges = [int(x) for x in rng.choice([10, 20, 30], len(inputs))]
    ts = rng.integers(0, 5, (len(inputs), 500)) * 10  # ages of exactly a range are common
    newest, keep = newest_in_window(ts, np.array(inputs), np.array(ranges), complete)
    want_newest, want_keep = _rule(ts, inputs, ranges, complete)
    assert newest.tolist() == want_newest and keep.tolist() == want_keep
    assert 0 < sum(want_keep) < len(want_keep)  # both outcomes exercised
