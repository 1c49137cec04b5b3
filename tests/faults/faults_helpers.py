"""What the fault tests share: query files, publishing, exact reading of results and dead
letters, and a worker that is killed at random moments."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import confluent_kafka

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.publish import publish_batch
from processors.core.batch import Batch
from processors.physical.compiler import compile_plan
from processors.runtime.producer import SIGN_HEADER
from processors.runtime.worker import topic_specs
from processors.workloads.examples import reading_columns
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema

FILTER_QUERY = """\
from processors.core.query import Query, col
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=2)
query.where(col("r.temperature") > 20.0, col("r.ok") == True)
query.select("r.ts", "r.sensor_id")
query.into({result!r}, partitions=2)
query.processing_guarantee({guarantee!r})
"""


def filter_oracle(batches) -> Counter:
    rows: Counter = Counter()
    for batch in batches:
        c = batch.columns
        keep = (c["temperature"] > 20.0) & c["ok"]
        for ts, sensor in zip(c["ts"][keep].tolist(), c["sensor_id"][keep].tolist(), strict=True):
            rows[(ts, sensor)] += 1
    return rows


AGGREGATE_QUERY = """\
from processors.core.query import Query, col
from topics.avro import load_schema
query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=2)
{window}
query.where(col("r.ok") == True)
query.group_by("r.site").aggregate(n="count", total=("sum", "r.sensor_id"))
query.into({result!r}, partitions=1)
query.processing_guarantee("exactly_once")
"""


def aggregate_oracle(batches) -> Counter:
    n: Counter = Counter()
    total: Counter = Counter()
    for batch in batches:
        c = batch.columns
        for site, ok, sensor in zip(
            c["site"].to_list(), c["ok"].tolist(), c["sensor_id"].tolist(), strict=True
        ):
            if ok:
                n[site] += 1
                total[site] += sensor
    return Counter({(site, n[site], total[site]): 1 for site in n})


def plan_of(path: Path):  # the test's own query text, built here
    scope: dict = {}
    exec(path.read_text(), scope)  # noqa: S102
    return scope["query"].build()


def write_query(tmp_path: Path, text: str):
    """The query file and its plan, with its topics made."""
    path = tmp_path / "query.py"
    path.write_text(text)
    return path, plan_of(path)


def make_topics(bootstrap: str, plan) -> None:
    ensure_topics(bootstrap, topic_specs(compile_plan(plan)))


def publish(bootstrap: str, topic: str, batch: Batch) -> None:
    publish_batch(bootstrap, topic, batch, load_schema("reading"))


def result_updates(
    bootstrap: str, topic: str, schema: dict, fields: tuple[str, ...]
) -> tuple[Counter, Counter]:
    """The result topic's records as rows of ``fields``: (inserted, deleted) counts."""
    store = SchemaStore(load=False)
    store.add(schema)
    inserted: Counter = Counter()
    deleted: Counter = Counter()
    for record in read_topic(bootstrap, topic):
        row = decode_single_object(record.value, schema, store)
        delete = dict(record.headers).get(SIGN_HEADER) == b"-1"
        (deleted if delete else inserted)[tuple(row[f] for f in fields)] += 1
    return inserted, deleted


def result_rows(bootstrap: str, topic: str, schema: dict, fields: tuple[str, ...]) -> Counter:
    """Every record of the result topic as a row of ``fields``, deletes counted negative."""
    inserted, deleted = result_updates(bootstrap, topic, schema, fields)
    rows = Counter(inserted)
    rows.subtract(deleted)
    return rows


def start(tmp_path: Path, bootstrap: str, path: Path, n: int, *flags: str) -> WorkerProcess:
    return WorkerProcess(
        path, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id=f"w-{n}",
        extra_args=list(flags),
    )  # fmt: skip


class Publisher:
    """Publishes batches of readings on a thread, one every ``every_s``, until stopped: the
    input keeps flowing while workers crash. ``batches``: what was published, for the oracle."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rows: int = 15_000,
        every_s: float = 0.5,
        malformed: float = 0.0,
    ) -> None:
        """``malformed``: after each batch, that share of its rows again as records that do
        not decode (random bytes), one of them near 1 MB; ``garbage`` counts them."""
        self.bootstrap, self.topic, self.rows, self.every_s = bootstrap, topic, rows, every_s
        self.malformed = malformed
        self.batches: list[Batch] = []
        self.garbage = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(7)
        raw = None
        if self.malformed:
            raw = confluent_kafka.Producer(
                {"bootstrap.servers": self.bootstrap, "message.max.bytes": 2_000_000}
            )
        while not self._stop.is_set():
            n = len(self.batches) + 1
            batch = reading_columns(self.rows, seed=n, start_ms=n * 10**9)
            publish(self.bootstrap, self.topic, batch)
            self.batches.append(batch)
            if raw is not None:
                count = int(self.rows * self.malformed)
                for i in range(count):
                    size = 900_000 if i == 0 else rng.randrange(1, 80)
                    raw.produce(self.topic, rng.randbytes(size), key=b"bad%d" % i)
                assert raw.flush(30) == 0
                self.garbage += count
            self._stop.wait(self.every_s)

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def kill_during(
    tmp_path: Path,
    bootstrap: str,
    path: Path,
    result: str,
    kills: int,
    seed: int,
    progress: int = 1_000,
) -> tuple[WorkerProcess, list[str]]:
    """Start a worker and SIGKILL it ``kills`` times while it works: each kill comes once the
    worker has written ``progress`` results (it is past start-up), plus a random 0-1.5 s, so
    that kills fall anywhere in a commit cycle (processing, snapshotting, sending, committing).
    Returns the worker left running and the logs of the killed ones."""
    rng = random.Random(seed)
    logs = []
    for n in range(kills):
        worker = start(tmp_path, bootstrap, path, n)
        before = wait_for_count(bootstrap, result, 0, 1)
        wait_for_count(bootstrap, result, before + progress, 120, [worker])
        time.sleep(rng.uniform(0.0, 1.5))
        worker.kill()
        logs.append(worker.log_tail(30))
    return start(tmp_path, bootstrap, path, kills), logs


def wait_until(check: Callable[[], bool], timeout: float, workers: list[WorkerProcess]) -> None:
    """Poll ``check`` every half second until true or ``timeout``; a worker that exits fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for worker in workers:
            if not worker.running:
                raise RuntimeError(f"worker exited with {worker.proc.returncode}:\n"
                                   f"{worker.log_tail()}")  # fmt: skip
        time.sleep(0.5)


def settle(bootstrap: str, topic: str, want: int, workers: list[WorkerProcess]) -> int:
    """Wait for ``want`` records on ``topic``, then for two quiet seconds (anything extra
    would show up by then); returns the final count."""
    wait_for_count(bootstrap, topic, want, 180, workers)
    time.sleep(2.0)
    return wait_for_count(bootstrap, topic, want, 1, workers)


def dead_letters(bootstrap: str, source_topic: str) -> list[dict]:
    """The dead letters of ``source_topic``'s records."""
    store, schema = SchemaStore(), load_schema("dead_letter")
    letters = [
        decode_single_object(r.value, schema, store)
        for r in read_topic(bootstrap, "streamon.deadletters")
    ]
    return [d for d in letters if d["source_topic"] == source_topic]
