"""Reference Faust apps for ``streamon bench ingest``, each run in its own process.

- ``plain``: a stock Faust agent, ``async for value in stream`` per record, each value sent on
  (the per-event baseline streamon's bulk path is compared with);
- ``envelope``: streamon's internal envelope hop: a stock Faust agent with the worker's settings
  on batch envelopes: decode, pass-through stage, encode, send (through librdkafka, as workers do).

Each prints ``RESULT {json}`` with its rate, measured inside the agent from the first event to
the last, so start-up and group joins are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import faust
import mode.loop

from processors.runtime.producer import RecordProducer
from processors.runtime.worker import faust_settings
from processors.stages.base import PassThroughStage
from topics.envelope import decode_batch, encode_batch


def _plain_app(name: str, bootstrap: str) -> faust.App:
    """Faust with its documented knobs (raw serializer, linger), otherwise stock."""
    return faust.App(
        name,
        broker=f"kafka://{bootstrap}",
        value_serializer="raw",
        key_serializer="raw",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.5,
        consumer_auto_offset_reset="earliest",
        producer_linger=0.005,
        producer_max_batch_size=524_288,
        topic_disable_leader=True,
        web_enabled=False,
        datadir=f"/tmp/streamon-bench-{name}",
    )


def _finish(result: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)


def plain(args: argparse.Namespace) -> faust.App:
    app = _plain_app(f"bench-plain-{args.out}", args.bootstrap)
    source, sink = app.topic(args.topic), app.topic(args.out)
    state = {"n": 0, "t0": 0.0}

    @app.agent(source)
    async def forward(stream: Any) -> None:
        async for value in stream:
            if not state["n"]:
                state["t0"] = time.perf_counter()
            await sink.send(value=value)
            state["n"] += 1
            if state["n"] >= args.count:
                await app.producer.flush()
                _finish(
                    {
                        "records": state["n"],
                        "rate": state["n"] / (time.perf_counter() - state["t0"]),
                    }
                )

    return app


def envelope(args: argparse.Namespace) -> faust.App:
    """streamon's own stage hop: the worker's Faust settings, a stock agent, envelopes."""
    name = f"bench-envelope-{args.out}"
    app = faust.App(
        name,
        web_enabled=False,
        **faust_settings(args.bootstrap, Path(f"/tmp/streamon-bench-{name}"), 6.0),
    )
    source = app.topic(args.topic)
    producer = RecordProducer(args.bootstrap)  # as in the worker: envelopes go out via librdkafka
    stage = PassThroughStage()
    state = {"n": 0, "tuples": 0, "t0": 0.0}

    @app.agent(source)
    async def hop(stream: Any) -> None:
        async for event in stream.events():
            if not state["n"]:
                state["t0"] = time.perf_counter()
            batch = decode_batch(event.value)
            for out in stage.process(batch):
                producer.produce(args.out, encode_batch(out), partition=event.message.partition)
            state["n"] += 1
            state["tuples"] += len(batch)
            if state["n"] >= args.count:
                producer.flush_blocking()
                elapsed = time.perf_counter() - state["t0"]
                _finish(
                    {
                        "envelopes": state["n"],
                        "tuples": state["tuples"],
                        "tuples_per_s": state["tuples"] / elapsed,
                    }
                )

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["plain", "envelope"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    mode.loop.use("uvloop")
    app = plain(args) if args.kind == "plain" else envelope(args)
    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
