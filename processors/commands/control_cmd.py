"""``streamon control``: change a running query on all its workers, through the control topic.

``control policy QUERY POLICY``: the scheduling policy (docs: README, "Operator scheduling");
``control shed QUERY --keep STREAM=SHARE ...`` or ``--lift``: the drop boxes (docs/shedding.md).
"""

from __future__ import annotations

import argparse
import json

from processors.core.scheduling.config import POLICY_NAMES
from processors.runtime.config import load_settings, resolve_bootstrap


def add_control_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    control = sub.add_parser(
        "control", help="change a running query on all its workers: scheduling policy, shedding"
    )
    what = control.add_subparsers(dest="what", required=True)
    policy = what.add_parser("policy", help="the scheduling policy")
    policy.add_argument("query", help="query file, module:attr or built-in")
    policy.add_argument(
        "policy",
        choices=[*POLICY_NAMES, "query"],
        help="'query': back to the query file's schedule() (a policy set here outlives restarts)",
    )
    policy.add_argument("--latency-ms", type=float, default=None, help="chain-flush threshold")
    policy.add_argument("--gamma", type=float, default=None, help="mixed: slope threshold")
    policy.add_argument("--quantum-ms", type=float, default=None, help="length of a turn")
    policy.add_argument("--catalog", default=None, help="a .cql file of CREATE STREAMs")
    policy.set_defaults(func=run_policy)
    shed = what.add_parser(
        "shed", help="the drop boxes: the share of each input stream kept (docs/shedding.md)"
    )
    shed.add_argument("query", help="query file, module:attr or built-in")
    shed.add_argument(
        "--keep", action="append", default=[], metavar="STREAM=SHARE",
        help="keep this share (0 to 1) of the stream's records; repeat per stream",
    )  # fmt: skip
    shed.add_argument("--lift", action="store_true", help="keep every record again")
    shed.add_argument("--reason", default="set by hand", help="said in the logs and status")
    shed.add_argument("--catalog", default=None, help="a .cql file of CREATE STREAMs")
    shed.set_defaults(func=run_shed)


def run_policy(args: argparse.Namespace) -> int:
    """Publish a POLICY record: every worker of the query switches scheduling policy."""
    from processors.commands.queries import load_plan
    from processors.runtime.control import publish_policy

    query = load_plan(args.query, args.catalog, require_into=False).name
    settings = {
        key: value
        for key, value in (
            ("latency_ms", args.latency_ms),
            ("gamma", args.gamma),
            ("quantum_ms", args.quantum_ms),
        )
        if value is not None
    }
    config = publish_policy(
        resolve_bootstrap(load_settings()), query, args.policy, settings, issuer="streamon-cli"
    )
    if config is None:
        print(f"query {query}: back to the query file's scheduling (published)")
    else:
        shown = json.dumps(settings)
        print(f"query {query}: scheduling policy {config.policy} published ({shown})")
    return 0


def shares(pairs: list[str], streams: list[str]) -> dict[str, float]:
    """``["a=0.5", ...]`` as {stream: share}; ValueError naming the pair at fault."""
    keep: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in streams:
            raise ValueError(f"--keep {pair!r}: expected STREAM=SHARE with STREAM one of "
                             f"{', '.join(streams)}")  # fmt: skip
        try:
            keep[name] = float(value)
        except ValueError:
            raise ValueError(f"--keep {pair!r}: {value!r} is not a number") from None
        if not 0.0 <= keep[name] <= 1.0:
            raise ValueError(f"--keep {pair!r}: a share is between 0 and 1")
    return keep


def run_shed(args: argparse.Namespace) -> int:
    """Publish a SHED record: every worker of the query sets its drop boxes."""
    from processors.commands.queries import load_plan
    from processors.runtime.control import publish_shed

    plan = load_plan(args.query, args.catalog, require_into=False)
    if args.lift == bool(args.keep):
        raise ValueError("control shed: give --keep STREAM=SHARE (one or more) or --lift")
    keep = {} if args.lift else shares(args.keep, [s.name for s in plan.streams])
    publish_shed(resolve_bootstrap(load_settings()), plan.name, keep, args.reason,
                 issuer="streamon-cli")  # fmt: skip
    said = "lifted" if not keep else ", ".join(f"{s} keeps {v:g}" for s, v in keep.items())
    print(f"query {plan.name}: drop boxes {said} (published)")
    return 0
