"""The S3 benchmark's aims table judges the paced PUT latency aim on the median of its
runs and names every run's p99 beside it."""

from __future__ import annotations

from bench import s3_bench
from bench.s3_load import PhaseResult


def _result(name: str, p99_ms: float = 10.0, ops_per_s: float = 1000.0) -> PhaseResult:
    return PhaseResult(
        name=name,
        ops=int(ops_per_s * 8),
        bytes=0,
        seconds=8.0,
        ops_per_s=ops_per_s,
        mb_per_s=100.0,
        p50_ms=5.0,
        p99_ms=p99_ms,
        errors=0,
    )


def test_paced_put_aim_is_the_median_of_its_runs() -> None:
    names = [
        "put 4KiB",
        s3_bench.SCATTERED_PUT,
        "get 4KiB",
        "put 16MiB",
        "get 16MiB",
        "multipart 256MiB",
        "get 1MiB range",
        "list 5000 keys",
        "delete-objects",
    ]
    results = [(_result(name), "") for name in names]
    results += [
        (_result(f"{s3_bench.PACED_PUT} {run}/3", p99_ms=p99), "")
        for run, p99 in zip((1, 2, 3), (40.0, 12.0, 20.0), strict=True)
    ]
    ceilings = [_result("ceiling put"), _result("ceiling get")]
    lines = s3_bench.verdicts(results, ceilings, {"disk": 400.0})
    (row,) = [line for line in lines if "at 1,000/s offered" in line]
    assert "median of 3 runs (40.0, 12.0, 20.0 ms)" in row
    assert row.endswith("| 20.0 | 15.0 ms | 0.75 |"), row
