"""Quix Streams on the embedded broker: the bench's 8 filters from the input topic to the
result topic. A StreamingDataFrame decodes each record (fastavro), counts it, filters it, stamps
it with the processing time (Quix would otherwise keep the input's timestamp, and the bench
measures between the first and the last result's timestamps) and forwards the original bytes.
Stops once every input record was seen and the producer is flushed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from avro_reading import reader
from peer_common import emit, make_filter, now, quix_application


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    from quixstreams.models.serializers import BytesDeserializer, BytesSerializer

    decode, passes = reader(spec["schema"]), make_filter(spec["filters"])
    app = quix_application(spec)
    source = app.topic(spec["topic"], value_deserializer=BytesDeserializer())
    sink = app.topic(spec["out"], value_serializer=BytesSerializer())
    seen = {"n": 0, "t_first": 0.0}
    total = spec["records"]

    def count(raw: bytes) -> None:
        if not seen["n"]:
            seen["t_first"] = now()
        seen["n"] += 1
        if seen["n"] >= total:
            app.stop()

    sdf = app.dataframe(source)
    sdf = sdf.update(count)
    sdf = sdf.filter(lambda raw: passes(decode(raw)))
    sdf = sdf.set_timestamp(lambda value, key, ts, headers: int(time.time() * 1000))
    sdf.to_topic(sink)
    ready = now()
    app.run()
    emit({"records": total, "seen": seen["n"], "t_ready": ready, "t0": seen["t_first"],
          "t1": now()})  # fmt: skip


if __name__ == "__main__":
    main()
