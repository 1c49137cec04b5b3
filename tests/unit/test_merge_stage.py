"""The event-time merge, the routing hash and ingest's progress bookkeeping, in process.

The merge's output must be exactly the stable merge of its sources by ``(ts, source)`` for
any interleaving and chunking of in-order sources: nothing lost, nothing duplicated, never
released before every active source has moved past it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.batch import Batch, VarColumn
from processors.kernels.routing import route, split_by_partition
from processors.runtime.event_progress import EventProgress
from processors.stages.merge_stage import IDLE, SOURCE, WATERMARK, MergeStage, marker, tag


def source_batch(ts: list[int], ids: list[int]) -> Batch:
    return Batch.inserts({"id": np.array(ids, np.int64)}, np.array(ts, np.int64))


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    k=st.integers(1, 4),
)
def test_the_merge_is_the_stable_time_order_of_its_sources(data: st.DataObject, k: int) -> None:
    sources = [sorted(data.draw(st.lists(st.integers(0, 30), max_size=25))) for _ in range(k)]
    stage = MergeStage(k) if k > 1 else MergeStage(2)  # one source of two: the other idles
    if k == 1:
        stage.process(marker(1, 0, idle=True))
    ids = {}
    at = [0] * k
    out: list[Batch] = []
    n_id = 0
    while any(at[s] < len(sources[s]) for s in range(k)):
        s = data.draw(st.sampled_from([s for s in range(k) if at[s] < len(sources[s])]))
        take = data.draw(st.integers(1, 5))
        ts = sources[s][at[s] : at[s] + take]
        batch_ids = list(range(n_id, n_id + len(ts)))
        for i, t in zip(batch_ids, ts, strict=True):
            ids[i] = (t, s, i)
        n_id += len(ts)
        at[s] += len(ts)
        out += stage.process(tag(source_batch(ts, batch_ids), s, max(ts)))
        released = [int(i) for b in out for i in b.columns["id"]]
        # nothing comes out before every source has shown a later time
        low = min(sources[r][at[r] - 1] if at[r] else -1 for r in range(k))
        assert all(ids[i][0] < low for i in released)
    out += stage.flush()
    got = [int(i) for b in out for i in b.columns["id"]]
    assert got == [i for _, _, i in sorted(ids.values())]  # stable: (ts, source, arrival)
    assert all(SOURCE not in b.meta and WATERMARK not in b.meta for b in out)


def test_a_watermark_alone_releases_what_it_no_longer_holds_back() -> None:
    stage = MergeStage(2)
    assert stage.process(tag(source_batch([1, 5, 9], [0, 1, 2]), 0, 9)) == []
    (out,) = stage.process(marker(1, 6))
    assert out.columns["id"].tolist() == [0, 1]
    assert stage.progress() == 6
    assert stage.stats()["held"] == 1


def test_an_idle_source_stops_holding_back_and_counts_again_when_it_sends() -> None:
    stage = MergeStage(2)
    assert stage.process(tag(source_batch([1, 2], [0, 1]), 0, 2)) == []
    (out,) = stage.process(marker(1, -(2**63), idle=True))
    # only source 0 counts now: what is below its watermark goes (ts 2 may have company)
    assert out.columns["id"].tolist() == [0]
    assert stage.process(tag(source_batch([7], [2]), 1, 7)) == []  # source 1 counts again
    assert stage.stats()["idle_sources"] == 0
    (out,) = stage.process(tag(source_batch([8], [3]), 0, 8))
    assert out.columns["id"].tolist() == [1]  # below min(8, 7)
    assert stage.process(marker(0, 9, idle=True)) == []  # source 1 alone: nothing below 7
    (out,) = stage.process(marker(1, 7, idle=True))  # all idle: everything held goes
    assert out.columns["id"].tolist() == [2, 3]


def test_all_sources_idle_and_nothing_held_is_news_for_downstream() -> None:
    stage = MergeStage(2)
    stage.process(marker(0, 3, idle=True))
    assert not stage.all_idle()
    stage.process(marker(1, 4, idle=True))
    assert stage.all_idle()


def test_the_merge_continues_exactly_from_its_snapshot() -> None:
    batches = [
        tag(source_batch([1, 4], [0, 1]), 0, 4),
        tag(source_batch([2], [2]), 1, 2),
        marker(1, 5),
        tag(source_batch([6, 7], [3, 4]), 0, 7),
        marker(1, 9, idle=True),
    ]
    whole = MergeStage(2)
    expected = [int(i) for b in batches for o in whole.process(b) for i in o.columns["id"]]
    first = MergeStage(2)
    got = [int(i) for b in batches[:2] for o in first.process(b) for i in o.columns["id"]]
    second = MergeStage(2)
    second.load_snapshot(first.snapshot())
    got += [int(i) for b in batches[2:] for o in second.process(b) for i in o.columns["id"]]
    assert got == expected == [0, 2, 1, 3]  # ts 7 waits: source 0 may send more of it


def test_an_envelope_from_an_unknown_source_is_a_dead_letter() -> None:
    stage = MergeStage(2)
    bad = source_batch([1], [0])
    bad.meta[SOURCE] = "7"
    assert stage.process(bad) == []
    ((dead, reason),) = stage.take_dead_letters()
    assert len(dead) == 1 and "source '7'" in reason and "0..1" in reason


def test_a_snapshot_of_another_source_count_is_refused() -> None:
    from processors.core.state_codec import SnapshotError

    with pytest.raises(SnapshotError, match="sources"):
        MergeStage(3).load_snapshot(MergeStage(2).snapshot())


# --- the routing hash --------------------------------------------------------------------


def test_equal_keys_route_equally_whatever_their_integer_width() -> None:
    values = np.arange(-50, 50)
    by = [route([values.astype(t)], len(values), 7) for t in (np.int8, np.int32, np.int64)]
    assert (by[0] == by[1]).all() and (by[1] == by[2]).all()
    assert set(by[0].tolist()) == set(range(7))


def test_strings_route_by_their_bytes_and_multi_column_keys_combine() -> None:
    words = [f"sensor-{i}".encode() for i in range(200)]
    text = VarColumn.from_values(words, utf8=True)
    raw = VarColumn.from_values(words, utf8=False)
    assert (route([text], 200, 5) == route([raw], 200, 5)).all()
    ints = np.arange(200) % 3
    both = route([text, ints], 200, 5)
    assert (both == route([text, ints], 200, 5)).all() and not (both == route([text], 200, 5)).all()
    counts = np.bincount(route([text], 200, 5), minlength=5)
    assert counts.min() > 20  # spread over every partition


def test_split_by_partition_keeps_each_partition_in_row_order() -> None:
    parts = np.array([2, 0, 2, 1, 0, 2], np.int32)
    split = split_by_partition(parts, 4)
    assert [s.tolist() for s in split] == [[1, 4], [3], [0, 2, 5], []]


# --- ingest's watermarks and idle marks ----------------------------------------------------


def test_watermarks_go_to_the_partitions_without_data_at_most_every_gap() -> None:
    progress = EventProgress(partitions=3, idle_timeout_ms=1_000, min_gap_s=0.1)
    progress.saw(0, 50, now_s=10.0)
    progress.wrote(0, [1], now_s=10.0)
    sent = progress.owed(0, now_s=10.0)
    assert sorted(q for q, _ in sent) == [0, 2]
    assert all(m.meta[WATERMARK] == "50" and m.meta[SOURCE] == "0" for _, m in sent)
    progress.saw(0, 60, now_s=10.05)
    assert progress.owed(0, now_s=10.05) == []  # within the gap: owed, not lost
    sent = progress.tick([0], lambda p: False, now_s=10.06)  # the timer sends what is owed
    assert sorted(q for q, _ in sent) == [0, 1, 2]


@pytest.mark.parametrize("two_batches", [False, True])
def test_a_unit_cut_into_several_envelopes_is_never_late_at_the_merge(two_batches: bool) -> None:
    """The windowed GROUP BY kill test's failure: ingest's backlog of input partition 1 was one
    unit, cut into two envelopes for size, both labelled with the unit's watermark. The merge
    took it from the first and released partition 0's tuples past the second's, which then
    came below the released watermark (late, to the dead letters). Each envelope but the
    last to a target now carries its own largest time."""
    progress = EventProgress(partitions=1, idle_timeout_ms=1_000)
    stage = MergeStage(2)
    out = stage.process(tag(source_batch(list(range(0, 400, 2)), list(range(200))), 0, 398))
    ts = list(range(1, 400, 2))
    progress.saw(1, max(ts), now_s=1.0)
    unit = source_batch(ts, list(range(200, 400)))
    parts = [(0, unit.slice(0, 150)), (0, unit.slice(150, 200))] if two_batches else [(0, unit)]
    pieces = progress.label(parts, 1, max_bytes=1_000)
    assert len(pieces) > 2 and sum(len(p) for _, p in pieces) == 200
    watermarks = [int(p.meta[WATERMARK]) for _, p in pieces]
    later_min = [
        int(min(int(q.ts.min()) for _, q in pieces[i + 1 :])) for i in range(len(pieces) - 1)
    ]
    assert (
        all(w <= m for w, m in zip(watermarks, later_min, strict=False)) and watermarks[-1] == 399
    )
    for _, piece in pieces:
        out += stage.process(piece)
    out += stage.flush()
    merged = np.concatenate([b.ts for b in out])
    assert merged.tolist() == list(range(400)) and stage.stats().get("late", 0) == 0


def test_an_input_partition_is_idle_only_when_read_to_its_end_and_quiet() -> None:
    progress = EventProgress(partitions=2, idle_timeout_ms=1_000)
    progress.saw(3, 70, now_s=0.0)
    progress.wrote(3, [0, 1], now_s=0.0)
    assert progress.tick([3], lambda p: True, now_s=0.5) == []  # not quiet long enough
    assert progress.tick([3], lambda p: False, now_s=2.0) == []  # records still unread
    marks = progress.tick([3], lambda p: True, now_s=2.0)
    assert sorted(q for q, _ in marks) == [0, 1] and all(IDLE in m.meta for _, m in marks)
    assert progress.tick([3], lambda p: True, now_s=2.25) == []  # repeated every half second
    assert len(progress.tick([3], lambda p: True, now_s=2.5)) == 2
    progress.saw(3, 80, now_s=4.0)  # active again
    progress.wrote(3, [0, 1], now_s=4.0)
    assert len(progress.tick([3], lambda p: True, now_s=5.5)) == 2


def test_a_partition_never_read_goes_idle_and_revoked_ones_are_forgotten() -> None:
    progress = EventProgress(partitions=1, idle_timeout_ms=1_000)
    assert progress.tick([0, 1], lambda p: True, now_s=0.0) == []
    assert len(progress.tick([0, 1], lambda p: True, now_s=1.5)) == 2
    progress.tick([1], lambda p: True, now_s=2.0)
    assert set(progress.sources) == {1}


def test_a_burst_on_every_source_after_a_pause_is_merged_in_order() -> None:
    stage = MergeStage(2)
    stage.process(marker(0, 10, idle=True))
    stage.process(marker(1, 10, idle=True))
    # source 1 is back: source 0 may be coming back too, so it is waited for again
    assert stage.process(tag(source_batch([20, 40], [0, 1]), 1, 40)) == []
    (out,) = stage.process(tag(source_batch([25, 30], [2, 3]), 0, 30))
    assert out.columns["id"].tolist() == [0, 2]
    # source 0 is done after all: its next idle mark lets source 1 run ahead
    (out,) = stage.process(marker(0, 30, idle=True))
    assert out.columns["id"].tolist() == [3]


def test_an_idle_mark_judged_soon_after_a_comeback_is_stale() -> None:
    stage = MergeStage(2, idle_timeout_ms=1_000)
    stage.process(marker(0, 10, idle=True, at=0))
    stage.process(marker(1, 10, idle=True, at=0))
    assert stage.process(tag(source_batch([20, 40], [0, 1]), 1, 40, at=5_000)) == []  # back
    # source 0 was looked at 200 ms after the comeback: its records may be a moment behind
    assert stage.process(marker(0, 10, idle=True, at=5_200)) == []
    assert stage.stats()["stale_idle_marks"] == 1
    (out,) = stage.process(marker(0, 10, idle=True, at=6_000))  # an idle timeout later: idle
    assert out.columns["id"].tolist() == [0]


def test_an_idle_partition_with_records_again_is_revived_before_other_data_goes_out() -> None:
    """The memory test's failure: both partitions of a stream were idle before its records
    were published; ingest then ran partition 0's waiting blocks first, the merge (partition 1
    still idle) released them far ahead, and partition 1's records came late. Ingest now
    revives an idle partition that has records waiting before it sends anything else."""
    progress = EventProgress(partitions=2, idle_timeout_ms=1_000)
    stage = MergeStage(2)
    for source in (0, 1):  # both read to their (empty) end and quiet: idle
        progress.saw(source, 0, now_s=0.0)
    for _, mark in progress.tick([0, 1], lambda p: True, now_s=2.0):
        stage.process(mark)
    revived = progress.revive(lambda p: p == 1, now_s=3.0)  # partition 1 has records again
    assert sorted(q for q, _ in revived) == [0, 1]
    assert all(IDLE not in m.meta and m.meta[SOURCE] == "1" for _, m in revived)
    assert progress.revive(lambda p: p == 1, now_s=3.1) == []  # revived once, not idle now
    for q, mark in revived:
        if q == 0:
            stage.process(mark)
    progress.saw(0, 500, now_s=3.0)
    out = stage.process(tag(source_batch([100, 500], [0, 1]), 0, 500))
    assert out == []  # partition 1 is waited for again
    (released,) = stage.process(tag(source_batch([50, 600], [2, 3]), 1, 600))
    assert released.ts.tolist() == [50, 100] and stage.stats().get("late", 0) == 0
    later = progress.tick([0, 1], lambda p: True, now_s=3.5)
    assert not any(IDLE in m.meta for _, m in later)  # not idle again at once
