"""The MJoin step with its streams' stages in front (processors.physical.joined): feeding a
turn's batches and draining once gives exactly the results of pushing them one at a time (which
test_query_runner checks against the naive oracle), whatever the turns, and across a snapshot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from helpers import reading_batch

from processors.core.batch import Batch, VarColumn
from processors.core.partitioning import single_partition
from processors.core.plan_columns import read_fields
from processors.core.query import Query, col
from processors.physical.build import chain_factory
from processors.physical.chain import StageChain
from processors.physical.compiler import compile_plan
from processors.physical.joined import JoinedChain
from processors.physical.runner import QueryRunner
from topics.avro import load_schema


def three_way() -> Query:
    q = Query("joined")
    for s in ("a", "b", "c"):
        q.stream(s, topic=f"{s}-in", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=1)  # fmt: skip
        q.window(s, range_ms=200)
    q.join("a.sensor_id", "b.sensor_id").join("b.sensor_id", "c.sensor_id")
    q.where(col("a.ok") == True, col("c.temperature") > 17.0)  # noqa: E712
    return q.into("joined-out")


def net(batches: list[Batch]) -> Counter:
    """Result rows with their net multiplicity (inserts minus deletes), zeros dropped."""
    out: Counter = Counter()
    for batch in batches:
        cols = {k: (v.to_list() if isinstance(v, VarColumn) else v.tolist())
                for k, v in batch.columns.items()}  # fmt: skip
        for r, sign in enumerate(batch.sign.tolist()):
            out[tuple(cols[k][r] for k in sorted(cols))] += sign
    return Counter({k: v for k, v in out.items() if v})


def inputs(seed: int) -> list[tuple[str, Batch]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(30):
        stream = "abc"[int(rng.integers(0, 3))]
        out.append(
            (
                stream,
                reading_batch(
                    int(rng.integers(0, 25)), seed * 1000 + i, i * 60, sensors=10, step=6
                ),
            )
        )
    return out


def joined_chain(plan) -> JoinedChain:  # noqa: ANN001 (a LogicalPlan)
    single = single_partition(plan)
    chain = chain_factory(single, compile_plan(single).step("mjoin"))(0)
    assert isinstance(chain, JoinedChain)
    return chain


def fed_in_turns(chain: JoinedChain, batches: list[tuple[str, Batch]], seed: int) -> list[Batch]:
    """Feed the batches, draining after random ones: an agent's turn takes every block
    waiting, so a turn may hold several blocks of several streams, a stream's twice over."""
    rng = np.random.default_rng(seed)
    out: list[Batch] = []
    for i, (stream, batch) in enumerate(batches):
        chain.feed(stream, batch)
        if i + 1 == len(batches) or rng.random() < 0.25:
            out += chain.drain()
    return out


@pytest.mark.parametrize("seed", range(12))
def test_feeding_turns_then_draining_equals_pushing_one_batch_at_a_time(seed: int) -> None:
    plan = three_way().build()
    batches = inputs(seed)
    runner = QueryRunner(plan)
    want = [o for s, b in batches for o in runner.push(s, b)] + runner.flush()
    chain = joined_chain(plan)
    got = fed_in_turns(chain, batches, seed) + chain.flush()
    assert net(want)  # the inputs do join
    assert net(got) == net(want)


def eager_three_way() -> Query:
    """The same join writing its inserts as their last tuple arrives (the eager MJoin)."""
    return three_way().emit("istream")


@pytest.mark.parametrize("seed", range(6))
def test_the_eager_join_fed_in_turns_equals_pushing_one_batch_at_a_time(seed: int) -> None:
    plan = eager_three_way().build()
    assert plan.eager_join
    batches = inputs(seed)
    runner = QueryRunner(plan)
    want = [o for s, b in batches for o in runner.push(s, b)] + runner.flush()
    chain = joined_chain(plan)
    got = fed_in_turns(chain, batches, seed) + chain.flush()
    assert net(want)
    assert net(got) == net(want)


@pytest.mark.parametrize("make", [three_way, eager_three_way], ids=["ordered", "eager"])
def test_a_drain_joins_every_run_of_every_stream_in_one_epoch(make) -> None:  # noqa: ANN001
    """A turn's runs (a, b, c, a, ...) are buffered by the MJoin and joined by one release:
    its per-call cost once a turn (docs/benchmarks.md), not once per run."""
    chain = joined_chain(make().build())
    mjoin = chain.join.stages[0]
    released = []
    release = mjoin.release

    def counted(final: bool = False) -> list[Batch]:
        released.append(final)
        return release(final)

    mjoin.release = counted  # type: ignore[method-assign]
    batches = inputs(3)[:9]
    assert len({s for s, _ in batches}) == 3
    for stream, batch in batches:
        chain.feed(stream, batch)
    chain.drain()
    assert released == [False]
    assert not mjoin.deferring


def read_only(plan, stream: str, batch: Batch) -> Batch:  # noqa: ANN001 (a LogicalPlan)
    """``batch`` as ingest now writes it: the fields the query reads, with their companions."""
    keep = read_fields(plan, stream)
    cols = {k: v for k, v in batch.columns.items() if k.removesuffix("?") in keep}
    return Batch(cols, batch.sign, batch.ts, batch.key, dict(batch.meta))


@pytest.mark.parametrize("make", [three_way, eager_three_way], ids=["ordered", "eager"])
def test_state_that_holds_every_field_takes_batches_of_the_fields_read_exactly(make) -> None:  # noqa: ANN001
    """State saved by a worker that carried every field (before projection pushdown), restored
    where ingest sends only the fields read: the columns nothing reads are filled in, no batch
    is refused for its columns, and the results are those of carrying every field throughout."""
    plan = make().select(a_ts="a.ts", c_site="c.site").build()
    assert read_fields(plan, "a") == {"sensor_id", "ts", "ok"}
    want, got, second = across_a_snapshot(plan, inputs(11), lambda s, b: read_only(plan, s, b))
    refused = [reason for _, reason in second.take_dead_letters()]
    assert not [r for r in refused if "columns" in r], refused  # (late tuples are the inputs')
    assert net(want) and net(got) == net(want)


def across_a_snapshot(
    plan,
    batches: list[tuple[str, Batch]],
    later: Callable[[str, Batch], Batch] | None = None,  # noqa: ANN001
) -> tuple[list[Batch], list[Batch], JoinedChain]:
    """What one chain makes of ``batches`` in turns; what a chain makes of the first 15 and
    one restored from its snapshot of the rest (each as ``later`` makes it); the restored
    chain."""
    whole = joined_chain(plan)
    want = fed_in_turns(whole, batches, 1) + whole.flush()
    first = joined_chain(plan)
    got = fed_in_turns(first, batches[:15], 1)
    second = joined_chain(plan)
    second.load_snapshot(first.snapshot())
    rest = [(s, later(s, b) if later else b) for s, b in batches[15:]]
    got += fed_in_turns(second, rest, 2) + second.flush()
    return want, got, second


def test_a_snapshot_between_turns_continues_exactly() -> None:
    want, got, second = across_a_snapshot(three_way().build(), inputs(7))
    assert net(got) == net(want)
    assert {stage.name for stage in second.stages} >= {"merge.a[0]", "window.c[0]", "mjoin[0]"}


class Picky:
    """A join chain that refuses, as data, any batch holding event time 13."""

    stages: list = []
    stream = None

    def push(self, stream: str, batch: Batch) -> list[Batch]:
        if (batch.ts == 13).any():
            raise ValueError("time 13 refused")
        return [batch]

    def take_dead_letters(self) -> list:
        return []


def test_deltas_the_join_refuses_are_dead_letters_and_later_ones_go_on() -> None:
    chain = JoinedChain("j", {"a": StageChain("stream.a", [], "a")}, Picky())  # type: ignore[arg-type]
    good, bad, later = (reading_batch(3, seed, 0) for seed in (1, 2, 3))
    for batch, ts in ((good, 5), (bad, 13), (later, 20)):
        batch.ts = np.full(3, ts, np.int64)
    chain.feed("a", good)
    assert [len(b) for b in chain.drain()] == [3]
    chain.feed("a", bad)
    assert chain.drain() == []
    chain.feed("a", later)
    assert [len(b) for b in chain.drain()] == [3]
    ((refused, reason),) = chain.take_dead_letters()
    assert refused.equals(bad) and "time 13 refused" in reason and reason.startswith("j:")
    assert chain.take_dead_letters() == []
