"""The ``streamon`` command line: parsing, dispatch to processors.commands, error exits."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from processors.commands.control_cmd import add_control_parser
from processors.commands.experiment_cmd import ExperimentHelp, run_experiment_command
from processors.runtime.broker import BrokerError, broker_status, start_broker, stop_broker
from processors.runtime.config import ConfigError, load_settings, resolve_bootstrap
from topics.admin import TopicError

DESCRIPTION = """\
streamon: a Kafka-native adaptive stream processor. Declare a continuous query in Python
(filters, windowed joins and aggregates over Avro topics); workers run it on Kafka and adapt
filter orders, join orders and scheduling to the data as it changes.

main commands:
  broker start|status|stop    the embedded development broker (no Kafka install needed)
  plan QUERY                  validate a query and print its logical plan
  worker QUERY                run a worker; several workers share a query's partitions
  demo                        the network-monitoring demo, end to end on the embedded broker
  analyze QUERY               Spark analytics of a query's result topic and of its stats
  schema check|fingerprint|register FILE
                              an Avro schema file against the schema path and the registry
  control policy QUERY NAME   change a running query's scheduling policy
  bench, experiment           benchmarks and the papers' experiments

QUERY is a .py file defining `query`, a module:attr, or a built-in name (readings).
Kafka: STREAMON_BOOTSTRAP or `bootstrap` in streamon.toml; without them the embedded broker
is used. `streamon COMMAND --help` shows a command's options.
"""

#: exit status when stdout is closed early (`streamon plan q.py | head`): 128 + SIGPIPE, what
#: the shell reports for cat, seq and other tools killed by SIGPIPE in the same place
EXIT_BROKEN_PIPE = 141


def _broker(args: argparse.Namespace) -> int:
    settings = load_settings()
    if args.action == "start":
        info = start_broker(settings.state_dir, port=args.port)
        print(info.bootstrap)
        return 0
    if args.action == "stop":
        stopped = stop_broker(settings.state_dir)
        print("stopped" if stopped else "no broker was running")
        return 0
    info = broker_status(settings.state_dir)
    if info is None:
        print("not running")
        print(
            f"(no broker recorded in {settings.state_dir}: the state directory of this folder "
            "and its parents; STREAMON_STATE_DIR names another)",
            file=sys.stderr,
        )
        return 1
    print(f"running: {info.bootstrap} (pid {info.pid}, log {info.log_path})")
    return 0


def _stop_before_start(signum: int, frame: object) -> None:
    """SIGTERM before the worker's own handlers are in place: nothing has been read yet, so
    stopping at once loses nothing (status 0, as a graceful stop)."""
    raise SystemExit(0)


def _worker(args: argparse.Namespace) -> int:
    # the imports and set-up below take seconds; Faust's worker installs its graceful-stop
    # handler when it starts, replacing this one
    signal.signal(signal.SIGTERM, _stop_before_start)
    faulthandler.enable()  # a crash in native code leaves the Python stacks in the worker's log
    from processors.commands.queries import load_plan
    from processors.runtime.web_auth import ENV_WEB_TOKEN
    from processors.runtime.worker import WorkerOptions, run_worker

    settings = load_settings()
    plan = load_plan(args.query, args.catalog)
    options = WorkerOptions(
        bootstrap=resolve_bootstrap(settings),
        state_dir=settings.state_dir,
        web_port=args.web_port,
        web_host=args.web_host,
        web_token=os.environ.get(ENV_WEB_TOKEN) or None,
        session_timeout_s=settings.session_timeout_s,
        registry_url=settings.schema_registry_url,
    )
    if args.id:
        options.worker_id = args.id
    options.reset_state = args.reset_state
    options.realtime = args.realtime
    run_worker(plan, options, loglevel=args.loglevel)
    return 0


def _plan(args: argparse.Namespace) -> int:
    from processors.commands.queries import load_plan

    plan = load_plan(args.query, args.catalog, require_into=False)
    print(json.dumps(plan.to_json(), indent=2))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from processors.commands.explain import run_explain, stats_records

    records = None
    if args.measured:
        records = stats_records(resolve_bootstrap(load_settings()))
    print(run_explain(args.query, args.stats, args.json, args.catalog, records))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from processors.commands.demo import run_demo

    return run_demo(records=args.records)


def _bench(args: argparse.Namespace) -> int:
    from processors.bench.dispatch import run_bench

    results = run_bench(args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    return 0


def _analyze(args: argparse.Namespace) -> int:
    from processors.commands.analyze import AnalyzeSpec, run_analyze

    spec = AnalyzeSpec(
        query=args.query, topic=args.topic, schema=args.schema, query_name=args.query_name,
        keys=args.key, values=args.value, since=args.since, until=args.until,
        time_field=args.time_field, bucket=args.bucket, stats_topic=args.stats_topic,
        on_bad_record=args.on_bad_record, limit=args.limit,
        out=Path(args.out) if args.out else None,
    )  # fmt: skip
    return run_analyze(spec, master=args.master)


def _schema(args: argparse.Namespace) -> int:
    from processors.commands import schema_cmd

    if args.action == "fingerprint":
        return schema_cmd.run_fingerprint(args.file)
    if args.action == "register":
        return schema_cmd.run_register(args.file, load_settings(), args.subject)
    return schema_cmd.run_check(args.file, load_settings())


class _IntermixedParser(argparse.ArgumentParser):
    """Takes positionals after options too: argparse would not fill an optional positional
    (``[FILE]``) that follows options."""

    _intermixed = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        if self._intermixed:  # called back by parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._intermixed = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixed = False


def _publish(args: argparse.Namespace) -> int:
    from processors.commands.publish_cmd import PublishOptions, run_publish
    from topics.avro import load_schema

    settings = load_settings()
    opts = PublishOptions(
        topic=args.topic, schema=load_schema(args.schema), source=args.file, fmt=args.format,
        key=args.key, stop_on_error=args.stop_on_error, progress=args.progress or None,
        partitions=args.partitions, registry_url=settings.schema_registry_url,
    )  # fmt: skip
    return run_publish(resolve_bootstrap(settings), opts).exit_code


def _tail(args: argparse.Namespace) -> int:
    from processors.commands.tail import TailOptions, run_tail
    from topics.avro import load_schema

    settings = load_settings()
    opts = TailOptions(
        topic=args.topic, schema=load_schema(args.schema) if args.schema else None,
        from_beginning=args.from_beginning, follow=args.follow, limit=args.limit,
        registry_url=settings.schema_registry_url,
    )  # fmt: skip
    return run_tail(resolve_bootstrap(settings), opts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamon",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    broker = sub.add_parser("broker", help="the embedded development broker (tansu)")
    broker.add_argument("action", choices=["start", "stop", "status"])
    broker.add_argument("--port", type=int, default=None, help="port to listen on (default: free)")
    broker.set_defaults(func=_broker)

    worker = sub.add_parser("worker", help="run a worker for a query")
    worker.add_argument(
        "query", help="query file (.cql, or .py defining `query`), module:attr, or a built-in"
    )
    worker.add_argument("--catalog", default=None, help="a .cql file of CREATE STREAMs")
    worker.add_argument("--id", default=None, help="worker id (default: host-pid)")
    worker.add_argument("--web-port", type=int, default=0, help="status endpoint port (0: free)")
    worker.add_argument("--web-host", default="127.0.0.1", help="address the status and metrics "
                        "endpoints listen on (default loopback; with STREAMON_WEB_TOKEN set, "
                        "requests need it as a bearer token)")  # fmt: skip
    worker.add_argument(
        "--reset-state",
        action="store_true",
        help="start partitions whose stored state cannot be restored empty (it is logged) "
        "instead of stopping",
    )
    worker.add_argument(
        "--realtime",
        action="store_true",
        help="run the worker's threads under real-time scheduling (SCHED_RR) when the system "
        "permits (root or CAP_SYS_NICE): on cores shared with the broker or producers, its "
        "latency no longer waits for the scheduler; not for a worker that runs saturated "
        "beside its broker, whose cores it would take",
    )
    worker.add_argument(
        "--loglevel", default="info", choices=["crit", "error", "warn", "info", "debug"]
    )
    worker.set_defaults(func=_worker)

    plan = sub.add_parser("plan", help="validate a query and print its logical plan")
    plan.add_argument("query", help="a .cql file, a .py file defining `query`, or module:attr")
    plan.add_argument("--catalog", default=None, help="a .cql file of CREATE STREAMs")
    plan.set_defaults(func=_plan)

    explain = sub.add_parser(
        "explain", help="cost every plan of a query and show the one chosen (Ayad-Naughton)"
    )
    explain.add_argument("query", help="a .cql file, a .py file defining `query`, or module:attr")
    figures = explain.add_mutually_exclusive_group(required=True)
    figures.add_argument(
        "--stats", default=None, help="statistics file (TOML: rates, selectivities, costs)"
    )
    figures.add_argument(
        "--measured",
        action="store_true",
        help="statistics the workers that ran the query measured (the stats topic)",
    )
    explain.add_argument("--json", default=None, help="also write the plans to this JSON file")
    explain.add_argument("--catalog", default=None, help="a .cql file of CREATE STREAMs")
    explain.set_defaults(func=_explain)

    demo = sub.add_parser("demo", help="run the demo pipeline on the embedded broker")
    demo.add_argument("--records", type=int, default=20_000)
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="benchmarks")
    bench.add_argument(
        "what",
        choices=[
            "ingest",
            "codec",
            "envelope",
            "filters",
            "mjoin",
            "caching",
            "spark",
            "arbiter",
            "latency",
            "peers",
        ],
    )
    bench.add_argument(
        "--records",
        type=int,
        default=None,
        help="ingest: 500,000 (default); spark: 1,000,000; latency: the backlog, 200,000; "
        "caching: input tuples per point, 400,000",
    )
    bench.add_argument("--tuples", type=int, default=4_000_000, help="filters: stage tuples")
    bench.add_argument(
        "--no-kafka", action="store_true", help="filters: skip the end-to-end Kafka part"
    )
    bench.add_argument(
        "--only", default=None, help="latency: one query (filter, join, groupby, join_ordered)"
    )
    bench.add_argument("--seconds", type=float, default=10.0, help="latency: paced seconds")
    bench.add_argument(
        "--rate",
        type=float,
        default=None,
        help="latency: offered records/s (default: half the measured capacity)",
    )
    bench.add_argument("--capacity", choices=("burst", "sustained"), default="burst",
                       help="latency: the capacity the rate is half of: the median of three "
                       "bursts (default) or the highest paced rate kept up with")  # fmt: skip
    bench.add_argument(
        "--realtime",
        action="store_true",
        help="latency: run the worker with --realtime (real-time scheduling where permitted), "
        "so that the publisher and the broker on the same cores do not delay its threads",
    )
    bench.add_argument(
        "--spread",
        action="store_true",
        help="latency: every tick on every input partition, as keyed producers write "
        "(default: unkeyed, one partition a tick)",
    )
    bench.add_argument(
        "--points", default=None, help="caching: Table 2 points, e.g. d1,d4 (default: all)"
    )
    bench.add_argument(
        "--budget-kb", type=float, default=1024.0, help="caching: subresult memory budget"
    )
    bench.add_argument(
        "--join-cost",
        choices=("scan", "hash"),
        default="scan",
        help="caching: how a join probes a window: a scan of the window (a nested-loop join, "
        "Fig. 10's cost at Table 2's points: the default, 30,000 arrivals a point, ~20 min) "
        "or its hash index (the paper-exact setting, 400,000 arrivals, ~3 min)",
    )
    bench.add_argument(
        "--workloads",
        default=None,
        help="peers: comma-separated subset of filters,join3,netmon,e2e_filters (default: all)",
    )
    bench.add_argument(
        "--join-records", type=int, default=1_000_000, help="peers: join3 tuples per input"
    )
    bench.add_argument("--netmon-packets", type=int, default=500_000, help="peers: netmon packets")
    bench.add_argument(
        "--faust-records", type=int, default=50_000, help="peers: plain Faust's prefix"
    )
    bench.add_argument("--json", default=None, help="write the results to this JSON file")
    bench.set_defaults(func=_bench)

    analyze = sub.add_parser(
        "analyze", help="Spark analytics of a query's result topic and of the stats topic"
    )
    analyze.add_argument("query", nargs="?", help="query file, module:attr or built-in")
    analyze.add_argument("--topic", help="result topic (default: the query's)")
    analyze.add_argument("--schema", help="reader schema: name, .avsc or JSON (default: query's)")
    analyze.add_argument("--query-name", help="whose Stats records (default: the query's)")
    analyze.add_argument("--key", action="append", help="group by this field (repeatable)")
    analyze.add_argument("--value", action="append", help="aggregate this field (repeatable)")
    analyze.add_argument("--since", help="from this time (ms since the epoch or ISO 8601)")
    analyze.add_argument("--until", help="before this time")
    analyze.add_argument("--time-field", default="_timestamp", help="record field in ms, or "
                         "_timestamp (the Kafka timestamp, default)")  # fmt: skip
    analyze.add_argument("--bucket", help="aggregate per time bucket, e.g. '1 minute'")
    analyze.add_argument("--stats-topic", default="streamon.stats")
    analyze.add_argument("--on-bad-record", choices=["fail", "skip"], default="fail")
    analyze.add_argument("--limit", type=int, default=20, help="rows shown per table")
    analyze.add_argument("--out", help="write Parquet, CSV and PNG plots to this directory")
    analyze.add_argument("--master", default="local[2]", help="Spark master")
    analyze.set_defaults(func=_analyze)

    experiment = sub.add_parser(
        "experiment", help="reproduce a paper experiment (CSV and PNG); NAME or 'all'",
        add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    experiment.add_argument("-h", "--help", action=ExperimentHelp, help="list the experiments")
    experiment.add_argument("name", help="an experiment's name (listed below) or 'all'")
    experiment.add_argument("--out", default="docs/experiments", help="output directory")
    experiment.add_argument("--scale", type=float, default=1.0, help="1.0: full size")
    experiment.add_argument("--seed", type=int, default=0)
    experiment.add_argument(
        "--json",
        default=None,
        help="live experiments (chain-live, shedding): write the summary figures to this JSON file",
    )
    experiment.set_defaults(func=run_experiment_command)

    add_control_parser(sub)

    schema = sub.add_parser(
        "schema", help="an Avro schema file: its fingerprint, registration, the schema path",
        description="The schema path, searched in this order for NAME.avsc and for the writer "
        "schema of a single-object message's fingerprint: the folders in STREAMON_SCHEMAS "
        "(separated by ':'), the project's schemas/, then the schema registry when one is "
        "configured (STREAMON_SCHEMA_REGISTRY_URL). Fingerprints print as the 8 bytes after C3 "
        "01 in a message, in wire order.",
    )  # fmt: skip
    schema.add_argument(
        "action", choices=["fingerprint", "register", "check"],
        help="fingerprint: CRC-64-AVRO as header bytes and integer; register: with the "
        "configured registry, prints the id; check: valid Avro, and found on the schema path",
    )  # fmt: skip
    schema.add_argument("file", help="an .avsc file")
    schema.add_argument(
        "--subject", default=None, help="register: subject (default: the schema's full name)"
    )
    schema.set_defaults(func=_schema)

    publish = sub.add_parser(
        "publish", help="JSON Lines or CSV records onto a topic, as Avro",
        description="Reads JSON Lines (or CSV with a header row) and writes one Avro record per "
        "line: single-object encoding, or the Confluent wire format (subject TOPIC-value) when "
        "a schema registry is configured. A bad line is reported on stderr with its number, "
        "field and reason, and skipped. Exit status: 0 when every line was published, 1 when "
        "some were skipped (or --stop-on-error stopped at one), 2 on a usage, schema or broker "
        "error.",
    )  # fmt: skip
    publish.__class__ = _IntermixedParser  # `publish TOPIC --schema S FILE`
    publish.add_argument("topic")
    publish.add_argument("file", nargs="?", default="-", help="input file (none or '-': stdin)")
    publish.add_argument("--schema", required=True, help="writer schema: name on the schema "
                         "path, or an .avsc file")  # fmt: skip
    publish.add_argument("--format", choices=["json", "csv"], default="json",
                         help="json: JSON Lines (default); csv: a header row naming fields, "
                         "values converted by the field's Avro type")  # fmt: skip
    publish.add_argument("--key", default=None, help="Kafka key from this field: integers as 8 "
                         "bytes big-endian, strings UTF-8, bytes as they are")  # fmt: skip
    publish.add_argument(
        "--stop-on-error",
        action="store_true",
        help="stop at the first bad line (lines before it are published)",
    )
    publish.add_argument(
        "--progress", action="store_true", help="records/s on stderr even if not a terminal"
    )
    publish.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partitions of the topic if it has to be created (default 1)",
    )
    publish.set_defaults(func=_publish)

    tail = sub.add_parser(
        "tail", help="print a topic's records as JSON Lines, with the sign of each change",
        description="Prints one JSON object per record: its fields, then _sign (-1 for a "
        "delete, from the streamon.sign header, else 1), _partition and _offset. Partitions are "
        "assigned directly (no consumer group), so the first record shows at once. Without "
        "--from-beginning: the last N records (--limit, default 10; 0 with --follow), oldest "
        "first by timestamp, then with --follow every new one until Ctrl-C. With "
        "--from-beginning: every record from the start (the first N with --limit), in order "
        "within each partition; without --follow it stops at the end.",
    )  # fmt: skip
    tail.add_argument("topic")
    tail.add_argument("--schema", default=None, help="reader schema: name or .avsc (default: "
                      "the writer schema the first record's fingerprint names)")  # fmt: skip
    tail.add_argument("--from-beginning", action="store_true", help="start at the first record")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--limit", "-n", type=int, default=None, help="the first N "
                      "(--from-beginning) or last N records")  # fmt: skip
    tail.set_defaults(func=_tail)
    return parser


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as cat or seq would."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _run(argv)
        sys.stdout.flush()  # output still buffered meets the closed pipe here, not at exit
    except BrokenPipeError:
        return _stdout_closed()
    return status


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args))
    except (BrokerError, ConfigError, TopicError) as exc:
        print(f"streamon: {exc}", file=sys.stderr)
        return 2
    except (ValueError, NotImplementedError) as exc:  # QueryError, SchemaError, ...: named
        print(f"streamon: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
