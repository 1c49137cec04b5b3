"""The pure parts of ``streamon bench peers``: agreement, JSON keys, failures reported, the
shared filters' texts and checksums. Needs none of the peers installed."""

from __future__ import annotations

import numpy as np

from processors.bench import peers_data as D
from processors.bench.peers import agreement, attempt, json_keys


def _ran(count: int, checksum: int, rate: float) -> dict:
    return {"count": count, "checksum": checksum, "rate": rate, "rate_per_core": rate / 2,
            "peak_rss_mb": 100.0, "startup_s": 1.0}  # fmt: skip


def test_agreement_needs_same_count_and_checksum() -> None:
    same = {"streamon": _ran(10, 5, 1.0), "flink": _ran(10, 5 + D.MOD, 1.0)}
    assert agreement(same)["agree"]  # checksums compare modulo P
    assert agreement(same, (10, 5))["agree"]
    assert not agreement(same, (10, 6))["agree"]
    assert not agreement({"streamon": _ran(10, 5, 1.0), "flink": _ran(11, 5, 1.0)})["agree"]


def test_agreement_with_own_oracle_and_failures() -> None:
    faust = {**_ran(3, 4, 1.0), "oracle": [3, 4]}
    systems = {"streamon": _ran(10, 5, 1.0), "faust": faust, "quix": {"error": "boom"}}
    assert agreement(systems, (10, 5))["agree"]
    systems["faust"] = {**_ran(3, 4, 1.0), "oracle": [3, 9]}
    assert not agreement(systems, (10, 5))["agree"]
    assert not agreement({"quix": {"error": "x"}}, (1, 1))["agree"]  # nothing ran


def test_json_keys_and_ratio() -> None:
    systems = {"streamon": _ran(1, 1, 300.0), "flink": _ran(1, 1, 100.0),
               "quix": {"error": "RuntimeError: no venv"}}  # fmt: skip
    keys = json_keys("filters", systems, agreement(systems))
    assert keys["filters_streamon_rate"] == 300.0
    assert keys["filters_flink_rate"] == 100.0
    assert keys["filters_streamon_vs_best_peer"] == 3.0
    assert keys["filters_quix_rate"] is None
    assert keys["filters_quix_error"] == "RuntimeError: no venv"
    assert keys["filters_agree"] is True
    for fig in ("rate_per_core", "peak_rss_mb", "startup_s"):
        assert f"filters_flink_{fig}" in keys
    e2e = json_keys("e2e_filters", systems, agreement(systems), kafka_peers=True)
    assert e2e["e2e_filters_streamon_vs_best_kafka_peer"] == 3.0


def test_no_peer_ran_gives_no_ratio() -> None:
    systems = {"streamon": _ran(1, 1, 300.0), "flink": {"error": "x"}}
    assert json_keys("join3", systems, agreement(systems))["join3_streamon_vs_best_peer"] is None


def test_attempt_reports_the_error() -> None:
    def broken() -> dict:
        raise RuntimeError("flink: exit code 1")

    assert attempt("flink", broken) == {"error": "RuntimeError: flink: exit code 1"}


def test_filter_texts_and_oracle() -> None:
    where = D.flink_filter_where()
    assert where.count(" AND ") == 8  # 7 between filters + the BETWEEN's own AND
    assert "site IN ('north', 'south', 'east', 'lab-1')" in where
    assert "ok = TRUE" in where
    assert D.streamon_where().count("col(") == 8
    batch = D.filters_batch(20_000)
    mask = D.filter_mask(batch)
    first, second = mask[:10_000].mean(), mask[10_000:].mean()
    assert 0 < mask.sum() < len(mask)
    codes = D.site_codes(batch)
    assert (codes >= 0).all()
    # the selectivities change halfway: ok passes far more often in the second half
    ok = batch.columns["ok"]
    assert ok[10_000:].mean() - ok[:10_000].mean() > 0.5
    assert first != second


def test_checksums_ignore_order() -> None:
    ts, sid = np.arange(100, dtype=np.int64) * 7, np.arange(100, dtype=np.int64) % 13
    perm = np.random.default_rng(0).permutation(100)
    assert D.reading_checksum(ts, sid) == D.reading_checksum(ts[perm], sid[perm])
    ids = [np.arange(50, dtype=np.int64) + k for k in range(3)]
    assert D.join_checksum(ids) == D.join_checksum([i[::-1] for i in ids])
    assert D.netmon_checksum(np.array([-5, 7]), np.array([1, 2])) == D.netmon_checksum(
        np.array([7, -5]), np.array([2, 1])
    )


def test_join_sql_has_every_pair() -> None:
    sql = D.flink_join3_sql(3_000)
    assert sql.count("INTERVAL '3.000' SECOND") == 4  # s1 and s2 against s0 on rt, two bounds
    assert "s2.ts - s1.ts < 3000 AND s1.ts - s2.ts < 3000" in sql  # the third pair: a filter
    netmon = D.flink_netmon_sql(600_000)
    assert netmon.count("INTERVAL '10' MINUTE") == 6  # r1..r3 against r0
    assert netmon.count(".ts < 600000") == 6  # the other 3 pairs, both ways
