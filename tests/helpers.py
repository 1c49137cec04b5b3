"""Plain helpers and data several unit test files share (imported as ``from helpers import ...``;
pyproject's pythonpath puts tests/ on sys.path). Fixtures live in tests/conftest.py."""

from __future__ import annotations

import io
import math
from fractions import Fraction as F

import fastavro

# Babcock et al., Sect. 5.3: the progress chart on which Mixed clips Chain's envelope
MIXED_CHART = [(0, 1), (1000, F(3, 10)), (1990, F(1, 5)), (3490, F(1, 10)), (5490, 0)]


def within(measured: float, expected: float, samples: int, sigmas: float = 5.0) -> bool:
    """Whether a measured frequency is within ``sigmas`` standard errors of ``expected``."""
    err = math.sqrt(max(expected * (1 - expected), 1e-12) / samples)
    return abs(measured - expected) <= sigmas * err


def avro_body(schema: dict, record: dict) -> bytes:
    """A record's schemaless Avro body written by fastavro, the independent oracle."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()
