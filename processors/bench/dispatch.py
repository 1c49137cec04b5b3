"""``streamon bench WHAT``: which benchmark runs for each name, with the CLI's options."""

from __future__ import annotations

import argparse
from typing import Any


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The results of the benchmark ``args.what`` (imported on demand: each pulls its own
    dependencies, Spark's among them)."""
    if args.what == "ingest":
        from processors.bench.ingest import run_ingest_bench

        return run_ingest_bench(records=args.records or 500_000)
    if args.what == "filters":
        from processors.bench.filters import run_filters_bench

        return run_filters_bench(tuples=args.tuples, kafka=not args.no_kafka)
    if args.what == "mjoin":
        from processors.bench.mjoin import run_mjoin_bench

        return run_mjoin_bench(kafka=not args.no_kafka)
    if args.what == "caching":
        from processors.bench.caching import run_caching_bench
        from processors.bench.caching_data import TABLE2

        points = args.points.split(",") if getattr(args, "points", None) else list(TABLE2)
        join_cost = getattr(args, "join_cost", "scan")
        return run_caching_bench(
            points,
            tuples=args.records,
            budget_bytes=int(getattr(args, "budget_kb", 1024.0) * 1024),
            join_cost=join_cost,
        )
    if args.what == "spark":
        from processors.bench.spark import run_spark_bench

        return run_spark_bench(records=args.records or 1_000_000)
    if args.what == "arbiter":
        from processors.bench.arbiter import run_arbiter_bench

        return run_arbiter_bench(records=args.records or 500_000, kafka=not args.no_kafka)
    if args.what == "latency":
        from processors.bench.latency import run_latency_bench

        return run_latency_bench(
            backlog=args.records or 200_000,
            seconds=getattr(args, "seconds", 10.0),
            only=getattr(args, "only", None),
            rate=getattr(args, "rate", None),
            spread=getattr(args, "spread", False),
            realtime=getattr(args, "realtime", False),
            capacity_measure=getattr(args, "capacity", "burst"),
        )
    if args.what == "peers":
        from processors.bench.peers import run_peers_bench

        return run_peers_bench(
            records=args.records or 2_000_000,
            join_records=args.join_records,
            netmon_packets=args.netmon_packets,
            e2e_records=args.records or 2_000_000,
            faust_records=args.faust_records,
            only=args.workloads,
        )
    if args.what == "codec":
        from processors.bench.codec import measure_codec

        return measure_codec()
    from processors.bench.envelope_codecs import measure_envelope_codecs

    return {"envelope_codecs": measure_envelope_codecs()}
