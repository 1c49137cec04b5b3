"""Plain Faust (faust-streaming) on the embedded broker: the bench's 8 filters, one record at a
time (``async for value in stream``), decoded with fastavro, passing records sent on as their
original bytes; the documented knobs (raw serializers, uvloop, 5 ms linger). Exits once every
input record was seen and the producer is flushed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from avro_reading import reader
from peer_common import emit, make_filter, now

LAUNCHED = now()


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    import faust
    import mode.loop

    mode.loop.use("uvloop")
    decode, passes = reader(spec["schema"]), make_filter(spec["filters"])
    app = faust.App(
        spec["group"],
        broker=f"kafka://{spec['bootstrap']}",
        value_serializer="raw",
        key_serializer="raw",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.5,
        consumer_auto_offset_reset="earliest",
        producer_linger=0.005,
        topic_disable_leader=True,
        web_enabled=False,
        datadir=f"/tmp/streamon-bench-{spec['group']}",
    )
    source, sink = app.topic(spec["topic"]), app.topic(spec["out"])
    total = spec["records"]
    state: dict[str, Any] = {"n": 0, "t0": 0.0}

    @app.agent(source)
    async def run(stream: Any) -> None:
        async for value in stream:
            if not state["n"]:
                state["t0"] = now()
            state["n"] += 1
            if passes(decode(value)):
                await sink.send(value=value)
            if state["n"] >= total:
                await app.producer.flush()
                emit({"records": total, "t_ready": state["t0"], "t0": state["t0"], "t1": now()})
                os._exit(0)

    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
