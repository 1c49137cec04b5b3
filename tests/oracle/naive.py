"""Naive oracles for the window and MJoin stages, written only from docs/windows-and-joins.md.

Everything here is plain Python over lists of dicts, with nested loops and no cleverness, so that
it is obviously correct and independent of the stages it checks.

Delta format (what :func:`naive_window_deltas` returns, what :func:`naive_join` consumes, what
:func:`batches_to_rows` produces from columnar batches)::

    {"sign": +1 | -1, "ts": int, "rid": int, "row": {column: value, ...}}

``row`` holds the tuple's columns only: neither the event time (``ts_field``, which lives in
``"ts"`` of the insert) nor the row id ``__rid`` (which lives in ``"rid"``). A delete carries the
same ``rid`` and ``row`` as its insert.

Join result key format (the keys of the ``Counter`` that :func:`naive_join`,
:func:`naive_join_by_difference` and :func:`result_counter` return)::

    (sign, ts, (values_0, values_1, ..., values_{n-1}))

where ``values_i`` is the tuple of ``(column, value)`` pairs of input i's row, sorted by column
name, without ``__rid``; for example, with inputs r(k, a) and s(k, b)::

    (1, 5, ((("a", "x"), ("k", 1)), (("b", 10), ("k", 1))))

The count of a key is how many results with that sign, timestamp and values there are.
"""

from __future__ import annotations

from collections import Counter

from processors.core.batch import ROW_ID, Batch, VarColumn

Key = tuple[int, int, tuple[tuple[tuple[str, object], ...], ...]]
Predicate = tuple[tuple[int, str], tuple[int, str]]


# -- windows -----------------------------------------------------------------------------------


def naive_window_deltas(
    rows: list[dict],
    kind: str,
    size: int,
    partition_by: tuple[str, ...] = (),
    lateness_ms: int = 0,
    ts_field: str = "ts",
) -> tuple[list[dict], list[dict]]:
    """The delta stream of a ROWS / PARTITION BY ROWS / RANGE window over ``rows``, then flush.

    ``rows`` are the input tuples in arrival order, each with its event time under ``ts_field``.
    ``kind`` is ``"rows"`` or ``"range"``; ``size`` is the tuple count (ROWS: the window holds
    the last ``size`` tuples, per partition key with ``partition_by``) or milliseconds (RANGE:
    at time tau the window holds the tuples with ts in (tau - size, tau]).

    Returns ``(deltas, late)``: the deltas in emission order, and the input rows (copies) that
    were dead-lettered as late, in arrival order. The end of ``rows`` is a ``flush()``: the
    buffered tuples are admitted and nothing else happens (RANGE windows emit no deletes then).
    """
    kind = kind.lower()
    if kind not in ("rows", "range"):
        raise ValueError(f"unknown window kind {kind!r}")
    if size < 1:
        raise ValueError("window size must be at least 1")
    if kind == "range" and partition_by:
        raise ValueError("PARTITION BY is only defined for ROWS windows")
    if lateness_ms < 0:
        raise ValueError("lateness must be >= 0")

    deltas: list[dict] = []
    late: list[dict] = []

    # window contents: a list of (rid, ts, row) in admission order
    window: list[tuple[int, int, dict]] = []
    next_rid = 0

    def admit(ts: int, row: dict) -> None:
        """The window admits one tuple: first the deletes it causes, then its insert."""
        nonlocal next_rid
        if kind == "rows":
            key = tuple(row[c] for c in partition_by)
            same = [w for w in window if tuple(w[2][c] for c in partition_by) == key]
            if len(same) == size:
                # the entering tuple would be the (size+1)-th of its partition: the oldest
                # leaves, just before the insert, with the entering tuple's timestamp
                oldest = same[0]
                window.remove(oldest)
                deltas.append({"sign": -1, "ts": ts, "rid": oldest[0], "row": dict(oldest[2])})
        else:
            # every tuple whose expiry time t.ts + size has come, oldest expiry first, then rid
            expired = [w for w in window if w[1] + size <= ts]
            expired.sort(key=lambda w: (w[1] + size, w[0]))
            for w in expired:
                window.remove(w)
                deltas.append({"sign": -1, "ts": w[1] + size, "rid": w[0], "row": dict(w[2])})
        window.append((next_rid, ts, row))
        deltas.append({"sign": 1, "ts": ts, "rid": next_rid, "row": dict(row)})
        next_rid += 1

    # lateness buffer: (ts, arrival position, row)
    buffer: list[tuple[int, int, dict]] = []
    max_ts: int | None = None
    last_admitted: int | None = None

    def admit_buffered(limit: int | None) -> None:
        """Admit buffered tuples with ts <= limit (all of them if None), by (ts, arrival)."""
        nonlocal last_admitted
        ready = [b for b in buffer if limit is None or b[0] <= limit]
        ready.sort(key=lambda b: (b[0], b[1]))
        for b in ready:
            buffer.remove(b)
            admit(b[0], b[2])
            last_admitted = b[0]

    for position, raw in enumerate(rows):
        ts = raw[ts_field]
        row = {c: v for c, v in raw.items() if c != ts_field}
        if last_admitted is not None and ts < last_admitted:
            late.append(dict(raw))
            continue
        buffer.append((ts, position, row))
        max_ts = ts if max_ts is None else max(max_ts, ts)
        admit_buffered(max_ts - lateness_ms)

    admit_buffered(None)  # flush()
    return deltas, late


# -- joins -------------------------------------------------------------------------------------


def _values(row: dict) -> tuple[tuple[str, object], ...]:
    """One input's part of a result key: its (column, value) pairs sorted by column, no rid."""
    return tuple(sorted((c, v) for c, v in row.items() if c != ROW_ID))


def _matches(combo: list[dict], predicates: list[Predicate]) -> bool:
    """Whether one row per input satisfies every equality predicate."""
    return all(combo[i][ci] == combo[j][cj] for (i, ci), (j, cj) in predicates)


def _all_combinations(windows: list[list[dict]]) -> list[list[dict]]:
    """Every way of picking one row from each window (the cross product), by nested loops."""
    combos: list[list[dict]] = [[]]
    for window in windows:
        longer = []
        for combo in combos:
            for row in window:
                longer.append(combo + [row])
        combos = longer
    return combos


def _global_order(inputs: list[list[dict]]) -> list[tuple[int, dict]]:
    """All deltas as (input index, delta) in the order (ts, input index, position in stream)."""
    tagged = []
    for i, stream in enumerate(inputs):
        for position, delta in enumerate(stream):
            tagged.append((delta["ts"], i, position, delta))
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    return [(i, delta) for _, i, _, delta in tagged]


def _check_predicates(n: int, predicates: list[Predicate]) -> None:
    for side in (p for pred in predicates for p in pred):
        if not 0 <= side[0] < n:
            raise ValueError(f"predicate names input {side[0]} of {n}")


def _remove_rid(window: list[tuple[int, dict]], delta: dict, i: int) -> None:
    """Remove the row a delete names; its values must be those of the insert."""
    for position, (rid, row) in enumerate(window):
        if rid == delta["rid"]:
            if row != delta["row"]:
                raise ValueError(f"input {i}: delete of row id {rid} with other values: {delta}")
            del window[position]
            return
    raise ValueError(f"input {i}: delete of row id {delta['rid']}, which is not in its window")


def naive_join_steps(inputs: list[list[dict]], predicates: list[Predicate]) -> list[Counter]:
    """The results of each delta, in the global processing order, one ``Counter`` per delta.

    Each delta of input i is joined by nested loops with the current windows of the other
    inputs; a delete first leaves input i's window, an insert enters it after joining.
    """
    n = len(inputs)
    _check_predicates(n, predicates)
    windows: list[list[tuple[int, dict]]] = [[] for _ in range(n)]  # (rid, row) per input
    steps: list[Counter] = []
    for i, delta in _global_order(inputs):
        if delta["sign"] == -1:
            _remove_rid(windows[i], delta, i)
        elif delta["sign"] != 1:
            raise ValueError(f"bad sign {delta['sign']!r}")
        others = [[delta["row"]] if k == i else [r for _, r in windows[k]] for k in range(n)]
        step: Counter = Counter()
        for combo in _all_combinations(others):
            if _matches(combo, predicates):
                key = (delta["sign"], delta["ts"], tuple(_values(r) for r in combo))
                step[key] += 1
        if delta["sign"] == 1:
            windows[i].append((delta["rid"], delta["row"]))
        steps.append(step)
    return steps


def naive_join(inputs: list[list[dict]], predicates: list[Predicate]) -> Counter:
    """The multiset of signed results of joining the delta streams ``inputs``.

    ``inputs[i]`` is input i's delta stream in order (see the module docstring for the delta
    format); ``predicates`` are equalities ``((i, column), (j, column))``. Returns a
    ``Counter`` keyed by ``(sign, ts, (values_0, ..., values_{n-1}))``, ``values_i`` being the
    ``(column, value)`` pairs of input i's row sorted by column name, ``__rid`` excluded. Only
    the final multiset is modelled, not when the MJoin releases results.
    """
    total: Counter = Counter()
    for step in naive_join_steps(inputs, predicates):
        total.update(step)
    return total


def _full_join(windows: list[list[tuple[int, dict]]], predicates: list[Predicate]) -> Counter:
    """The full join of the current windows as a multiset of value tuples."""
    out: Counter = Counter()
    for combo in _all_combinations([[r for _, r in w] for w in windows]):
        if _matches(combo, predicates):
            out[tuple(_values(r) for r in combo)] += 1
    return out


def naive_join_by_difference_steps(
    inputs: list[list[dict]], predicates: list[Predicate]
) -> list[Counter]:
    """Per delta: the full join after it minus the full join before it, as signed keys.

    A second, differently built oracle for :func:`naive_join_steps` (tiny inputs only: it
    recomputes the whole cross product at every delta).
    """
    n = len(inputs)
    _check_predicates(n, predicates)
    windows: list[list[tuple[int, dict]]] = [[] for _ in range(n)]
    steps: list[Counter] = []
    before = _full_join(windows, predicates)
    for i, delta in _global_order(inputs):
        if delta["sign"] == -1:
            _remove_rid(windows[i], delta, i)
        elif delta["sign"] == 1:
            windows[i].append((delta["rid"], delta["row"]))
        else:
            raise ValueError(f"bad sign {delta['sign']!r}")
        after = _full_join(windows, predicates)
        step: Counter = Counter()
        for values in set(before) | set(after):
            change = after[values] - before[values]
            if change > 0:
                step[(1, delta["ts"], values)] += change
            elif change < 0:
                step[(-1, delta["ts"], values)] += -change
        steps.append(step)
        before = after
    return steps


def naive_join_by_difference(inputs: list[list[dict]], predicates: list[Predicate]) -> Counter:
    """Same result and key format as :func:`naive_join`, computed by full-join differences."""
    total: Counter = Counter()
    for step in naive_join_by_difference_steps(inputs, predicates):
        total.update(step)
    return total


# -- columnar conversion -----------------------------------------------------------------------


def _python_columns(batch: Batch) -> dict[str, list]:
    return {
        name: col.to_list() if isinstance(col, VarColumn) else col.tolist()
        for name, col in batch.columns.items()
    }


def batches_to_rows(batches: list[Batch]) -> list[dict]:
    """Deltas from columnar batches, in order, in the module's delta format.

    ``rid`` is the ``__rid`` column's value (None if the batch has no such column); ``row``
    holds every other column as Python values.
    """
    out: list[dict] = []
    for batch in batches:
        cols = _python_columns(batch)
        signs = batch.sign.tolist()
        stamps = batch.ts.tolist()
        for r in range(len(batch)):
            out.append(
                {
                    "sign": int(signs[r]),
                    "ts": int(stamps[r]),
                    "rid": cols[ROW_ID][r] if ROW_ID in cols else None,
                    "row": {c: v[r] for c, v in cols.items() if c != ROW_ID},
                }
            )
    return out


def result_counter(
    batches: list[Batch], input_columns: list[list[str]], prefixes: list[str]
) -> Counter:
    """A join stage's output batches as a ``Counter`` in :func:`naive_join`'s key format.

    Input i's column ``c`` is the output column ``f"{prefixes[i]}{c}"``; ``input_columns[i]``
    lists input i's columns (``__rid`` among them is ignored).
    """
    if len(input_columns) != len(prefixes):
        raise ValueError("one prefix per input is needed")
    out: Counter = Counter()
    for batch in batches:
        cols = _python_columns(batch)
        signs = batch.sign.tolist()
        stamps = batch.ts.tolist()
        for r in range(len(batch)):
            values = tuple(
                tuple(sorted((c, cols[prefix + c][r]) for c in columns if c != ROW_ID))
                for columns, prefix in zip(input_columns, prefixes, strict=True)
            )
            out[(int(signs[r]), int(stamps[r]), values)] += 1
    return out
