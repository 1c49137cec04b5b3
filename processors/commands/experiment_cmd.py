"""``streamon experiment NAME``: run a paper reproduction (or all), and its help listing."""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def experiment_names_text() -> str:
    """The experiments by name, for ``experiment --help`` (imports them: about 1.5 s)."""
    from processors.experiments import LIVE_EXPERIMENTS, all_experiments

    def block(title: str, names: list[str]) -> str:
        body = textwrap.fill(", ".join(sorted(names, key=_natural)), 88, break_on_hyphens=False)
        return f"{title}\n{textwrap.indent(body, '  ')}"

    return "\n\n".join([
        block("experiments (in the simulator or in process; 'all' runs every one):",
              list(all_experiments())),
        block("live experiments (workers on the broker, minutes each; by name only):",
              list(LIVE_EXPERIMENTS)),
    ])  # fmt: skip


class ExperimentHelp(argparse.Action):
    """``experiment -h``: lists the experiments, imported only when help is asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # fmt: skip
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        parser.epilog = experiment_names_text()
        parser.print_help()
        parser.exit()


def run_experiment_command(args: argparse.Namespace) -> int:
    from processors.experiments import EXPERIMENTS, LIVE_EXPERIMENTS, run_experiment

    if args.name in LIVE_EXPERIMENTS:  # on the broker, with workers: not part of "all"
        paths = LIVE_EXPERIMENTS[args.name](
            Path(args.out), scale=args.scale, seed=args.seed, json_path=args.json
        )
        for path in paths:
            print(f"wrote {path}")
        return 0
    names = sorted(EXPERIMENTS) if args.name == "all" else [args.name]
    for name in names:
        if name not in EXPERIMENTS:
            known = sorted([*EXPERIMENTS, *LIVE_EXPERIMENTS])
            raise ValueError(f"unknown experiment {name!r}; choose one of {known}")
    for name in names:
        for path in run_experiment(name, Path(args.out), scale=args.scale, seed=args.seed):
            print(f"wrote {path}")
    return 0
