"""From a validated logical plan to what runs: steps, stage kinds, chains, the in-process runner.

``compile_plan`` (compiler.py) is the one way from a :class:`~processors.core.plan.LogicalPlan`
to running stages; the worker's agents and the in-process :class:`~.runner.QueryRunner` are both
built from its steps (``docs/architecture.md``).
"""
