"""The S3 benchmark's bookkeeping, on made-up phase results: the targets take turns round
after round, a figure is the median of its rounds, the ratio is blobstore's median over the
peer's, the report has no peer column without a peer, and hand-written analysis survives
a regenerated report. No timing."""

from __future__ import annotations

import os

import botocore.parsers
import botocore.session

from bench import s3_bench, s3_boto
from bench.s3_bench import BOTO3, GENERATOR, PHASES, Run, Setting, Slot, Target
from bench.s3_load import PhaseResult

PUT_LARGE, GET_LARGE, RANGE, LISTING, PUT_SMALL, _ = PHASES
SSE_GET_LARGE = s3_bench.SSE_PHASES[GET_LARGE.name]
PEER = "Ceph RGW"


def _result(name: str, ops_per_s: float = 100.0, mb_per_s: float = 50.0) -> PhaseResult:
    return PhaseResult(
        name=name,
        ops=int(ops_per_s * 4),
        bytes=0,
        seconds=4.0,
        ops_per_s=ops_per_s,
        mb_per_s=mb_per_s,
        p50_ms=5.0,
        p99_ms=9.0,
        errors=0,
    )


def _setting(peer: Target | None) -> Setting:
    return Setting(
        started="2026-01-01 00:00",
        ours=Target("blobstore", "http://127.0.0.1:9000", "k", "s"),
        peer=peer,
        duration_s=4.0,
        rounds=3,
        list_keys=5000,
        boto_mode={"blobstore": "plain body"},
        load_before=(1.0, 1.0, 1.0),
        load_after=(2.0, 2.0, 2.0),
        cluster="a test",
    )


def _runs(target: str, client: str, mb_per_s: tuple[float, ...]) -> list[Run]:
    return [
        Run(Slot(PUT_LARGE, client, index, target), _result(PUT_LARGE.name, mb_per_s=value))
        for index, value in enumerate(mb_per_s, start=1)
    ]


def test_targets_take_turns_round_after_round_within_each_phase_and_client() -> None:
    slots = s3_bench.alternation(PHASES[:2], (BOTO3, GENERATOR), ("blobstore", PEER), 2)
    assert len(slots) == 2 * 2 * 2 * 2
    first = [(slot.round, slot.target) for slot in slots[:4]]
    assert first == [(1, "blobstore"), (1, PEER), (2, "blobstore"), (2, PEER)]
    assert {(slot.phase, slot.client) for slot in slots[:4]} == {(PHASES[0], BOTO3)}
    assert [slot.client for slot in slots[4:8]] == [GENERATOR] * 4
    assert [slot.phase for slot in slots[8:]] == [PHASES[1]] * 8


def test_a_figure_is_the_median_of_its_rounds_and_the_ratio_is_median_over_median() -> None:
    runs = _runs("blobstore", BOTO3, (30.0, 90.0, 60.0)) + _runs(PEER, BOTO3, (40.0, 10.0, 20.0))
    by_key = s3_bench.cells(runs)
    ours = by_key[(PUT_LARGE.name, BOTO3, "blobstore")]
    theirs = by_key[(PUT_LARGE.name, BOTO3, PEER)]
    assert ours.figures == (30.0, 90.0, 60.0)
    assert (ours.median, theirs.median) == (60.0, 20.0)
    assert s3_bench.ratio(ours, theirs) == 3.0
    assert s3_bench.ratio(ours, None) is None


def test_figures_are_in_each_phases_unit() -> None:
    result = _result("x", ops_per_s=7.0, mb_per_s=112.0)
    assert s3_bench.figure(PUT_LARGE, result) == 112.0
    assert s3_bench.figure(RANGE, result) == 7.0
    assert s3_bench.figure(PUT_SMALL, result) == 7.0
    assert s3_bench.figure(LISTING, result) == 7.0 * s3_bench.PAGE_KEYS


def test_the_report_compares_with_the_peer_of_this_run_only() -> None:
    runs = _runs("blobstore", GENERATOR, (30.0, 90.0, 60.0))
    runs += _runs(PEER, GENERATOR, (40.0, 10.0, 20.0))
    peer = Target(PEER, "http://127.0.0.1:7480", "k", "s")
    text = s3_bench.report(_setting(peer), runs, [], {"buffered": 100.0}, [])
    (row,) = [line for line in text.splitlines() if line.startswith("| put 16MiB | 4 |")]
    assert "**60.0** (30.0, 90.0, 60.0)" in row
    assert "**20.0** (40.0, 10.0, 20.0)" in row
    assert "**3.00**" in row
    (aim,) = [line for line in text.splitlines() if line.startswith("| put 16MiB | generator")]
    assert aim == "| put 16MiB | generator | 3.00 | >= 1.5 | yes |"


def test_without_a_peer_there_is_no_peer_column() -> None:
    runs = _runs("blobstore", GENERATOR, (30.0, 90.0))
    text = s3_bench.report(_setting(None), runs, [], {"buffered": 100.0}, [])
    assert PEER not in text and "ratio" not in text
    (row,) = [line for line in text.splitlines() if line.startswith("| put 16MiB | 4 |")]
    assert row.startswith("| put 16MiB | 4 | MiB/s | **60.0** (30.0, 90.0) | 5.0 / 9.0 |")


def test_large_put_is_judged_against_each_measured_disk_mode() -> None:
    runs = _runs("blobstore", BOTO3, (35.0,))
    disk = {"buffered": 200.0, "O_DIRECT, 1 MiB blocks": 1000.0}
    lines = s3_bench.disk_aim_rows(s3_bench.cells(runs), "blobstore", disk)
    assert lines[2].endswith("| buffered (200 MiB/s) | 70.0 MiB/s | 0.50 | - | - | - |")
    assert lines[3].endswith("| 350 MiB/s | 0.10 | - | - | - |")  # no server CPU measured


def test_the_disk_aim_says_how_many_cpus_the_puts_kept_busy_and_the_aim_would() -> None:
    # 10 PUTs a second, each 117.9 ms of the server's CPU and 31.4 of the client's; the
    # aim, 350 MiB/s, is 21.875 PUTs a second
    runs = [_cpu_run(PUT_LARGE, "blobstore", 160.0, 117.9, 31.4)]
    (line,) = s3_bench.disk_aim_rows(s3_bench.cells(runs), "blobstore", {"direct": 1000.0})[2:]
    assert line.endswith(f"| 0.46 | 1.49 of {os.cpu_count()} | 3.27 | - |")
    # MD5 at 700 MiB/s and three loopback trips at 0.5 ms per MiB: 2.93 ms per MiB
    floor = 1e3 / 700 + 3 * 0.5
    cells = s3_bench.cells(runs)
    (line,) = s3_bench.disk_aim_rows(cells, "blobstore", {"direct": 1000.0}, floor)[2:]
    assert line.endswith("| 3.27 | 1.02 |")


def _cpu_run(
    spec: s3_bench.PhaseSpec,
    target: str,
    figure: float,
    server_ms: float,
    client_ms: float,
    gateway_ms: float | None = None,
) -> Run:
    """A round of `spec` through boto3 at `figure` (MiB/s, or requests a second) for 10 s,
    its requests costing the server (of it, the gateway) and the client the CPU given."""
    ops = 100
    result = PhaseResult(
        name=spec.name,
        ops=ops,
        bytes=0,
        seconds=10.0,
        ops_per_s=ops / 10.0 if spec.unit == "MiB/s" else figure,
        mb_per_s=figure,
        p50_ms=5.0,
        p99_ms=9.0,
        errors=0,
        client_cpu_s=client_ms * ops / 1e3,
    )
    gateway_s = None if gateway_ms is None else gateway_ms * ops / 1e3
    return Run(Slot(spec, BOTO3, 1, target), result, server_ms * ops / 1e3, gateway_s)


def test_sse_is_priced_by_the_gateway_s_cpu_where_the_gateway_is_the_bound() -> None:
    plain = _cpu_run(GET_LARGE, "blobstore", 1000.0, 17.1, 3.2, gateway_ms=10.4)
    sse = _cpu_run(SSE_GET_LARGE, "blobstore", 820.0, 19.9, 3.1, gateway_ms=13.0)
    (row,) = s3_bench.sse_rows(s3_bench.cells([plain, sse]), "blobstore")[2:]
    assert row.startswith("| get 16MiB (MiB/s) | boto3 | **820** (820) | **1,000** (1,000) ")
    assert row.endswith("| **0.82** | >= 0.85 | no | 19.90 / 17.10 | 13.00 / 10.40 | 0.80 |")
    unmeasured = _cpu_run(GET_LARGE, "blobstore", 1000.0, 17.1, 3.2)
    (row,) = s3_bench.sse_rows(s3_bench.cells([unmeasured, sse]), "blobstore")[2:]
    assert row.endswith("| 19.90 / 17.10 | - | - |")


def test_an_aim_not_met_is_priced_by_the_cpu_it_takes_and_the_clients_floor() -> None:
    runs = [
        _cpu_run(PUT_LARGE, "blobstore", 180.0, 117.9, 31.4),
        _cpu_run(PUT_LARGE, PEER, 137.0, 162.5, 32.5),
        _cpu_run(LISTING, "blobstore", 9.944, 18.75, 83.57),
        _cpu_run(LISTING, PEER, 12.222, 18.37, 71.7),
        _cpu_run(RANGE, "blobstore", 500.0, 1.8, 1.4),  # met: no bound row
        _cpu_run(RANGE, PEER, 300.0, 2.8, 1.7),
    ]
    put, listing = s3_bench.bound_rows(s3_bench.cells(runs), "blobstore", PEER)[2:]
    assert put.startswith("| put 16MiB >= 1.5 | boto3 | 1.31 | 1.31 |")
    assert "server CPU per request <= 98.6 ms (measured 117.9)" in put
    assert put.endswith("| - |")  # four in flight: no floor from the client alone
    assert listing.startswith("| list flat >= 1.3 | boto3 | 0.81 | 0.88 |")
    # (18.37 + 71.7) / 1.3 = 69.3 ms in all, less than boto3's 83.57 on our pages
    assert "| 69.3 ms of CPU a request in all, less than the client's alone (83.6) |" in listing
    # 1000 / 12.222 = 81.8 ms per page at the peer, 71.7 of them boto3's CPU
    assert "| 1.14 (the peer answers every 81.8 ms; boto3 spends 71.7 ms" in listing


def test_no_bound_table_when_every_aim_is_met() -> None:
    runs = [
        _cpu_run(PUT_LARGE, "blobstore", 300.0, 90.0, 30.0),
        _cpu_run(PUT_LARGE, PEER, 100.0, 160.0, 30.0),
    ]
    assert s3_bench.bound_rows(s3_bench.cells(runs), "blobstore", PEER) == []
    text = s3_bench.report(_setting(Target(PEER, "u", "k", "s")), runs, [], {}, [])
    assert s3_bench.BOUNDS_TEXT not in text


def test_a_regenerated_report_keeps_the_hand_written_analysis() -> None:
    previous = f"# old tables\n\n{s3_bench.ANALYSIS_MARK}\n## Analysis\n\nprose\n"
    text = s3_bench.with_kept_analysis("# new tables\n", previous)
    assert text == f"# new tables\n\n{s3_bench.ANALYSIS_MARK}\n## Analysis\n\nprose\n"
    assert s3_bench.with_kept_analysis("# new\n", "# no mark\n").endswith(
        s3_bench.ANALYSIS_MARK + "\n"
    )


def test_the_boto3_request_mode_names_the_body_encoding_and_checksum() -> None:
    plain = s3_boto.describe_request_mode(
        {"x-amz-content-sha256": "a" * 64, "x-amz-checksum-crc32": "AAAAAA=="}
    )
    assert plain == (
        "plain body, x-amz-content-sha256 the payload's SHA-256 (signed payload), "
        "header x-amz-checksum-crc32"
    )
    chunked = s3_boto.describe_request_mode(
        {
            "content-encoding": "aws-chunked",
            "x-amz-trailer": "x-amz-checksum-crc32",
            "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        }
    )
    assert chunked.startswith("aws-chunked body, trailer x-amz-checksum-crc32")


def test_a_peer_needs_two_rounds_and_its_keys() -> None:
    parser = s3_bench.build_parser()
    peer = ["--peer", "http://127.0.0.1:7480", "--peer-access-key", "k", "--peer-secret-key", "s"]
    assert s3_bench.usage_problem(parser.parse_args([*peer, "--rounds", "2"])) is None
    assert "rounds" in (s3_bench.usage_problem(parser.parse_args([*peer, "--rounds", "1"])) or "")
    assert s3_bench.usage_problem(parser.parse_args(["--peer", "http://127.0.0.1:7480"]))
    assert s3_bench.usage_problem(parser.parse_args(["--list-keys", "1500"]))


def test_an_sse_twin_runs_next_to_its_phase_in_clear_against_blobstore_only() -> None:
    twin = s3_bench.SSE_PHASES[PUT_LARGE.name]
    slots = s3_bench.alternation(
        (PUT_LARGE,), (BOTO3,), ("blobstore", PEER), 2, s3_bench.SSE_PHASES
    )
    order = [(slot.round, slot.phase.name, slot.target) for slot in slots]
    assert order == [
        (1, PUT_LARGE.name, "blobstore"),
        (1, twin.name, "blobstore"),
        (1, PUT_LARGE.name, PEER),
        (2, twin.name, "blobstore"),
        (2, PUT_LARGE.name, "blobstore"),
        (2, PUT_LARGE.name, PEER),
    ]
    assert twin.base == PUT_LARGE.name and twin.clear == PUT_LARGE.name
    listing = s3_bench.alternation((LISTING,), (BOTO3,), ("blobstore",), 2, s3_bench.SSE_PHASES)
    assert [slot.phase for slot in listing] == [LISTING, LISTING]


def test_the_sse_table_gives_sse_over_clear_against_the_aim() -> None:
    twin = s3_bench.SSE_PHASES[PUT_LARGE.name]
    runs = _runs("blobstore", GENERATOR, (100.0, 80.0, 90.0))
    runs += [
        Run(Slot(twin, GENERATOR, index, "blobstore"), _result(twin.name, mb_per_s=value))
        for index, value in enumerate((70.0, 81.0, 72.0), start=1)
    ]
    runs += _runs(PEER, GENERATOR, (40.0, 10.0, 20.0))
    peer = Target(PEER, "http://127.0.0.1:7480", "k", "s")
    text = s3_bench.report(_setting(peer), runs, [], {"buffered": 100.0}, [])
    assert "## Server-side encryption (SSE-S3) cost" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| put 16MiB (MiB/s) |")]
    assert "| generator | **72.0** (70.0, 81.0, 72.0) | **90.0** (100, 80.0, 90.0) |" in row
    assert "| **0.80** | >= 0.85 | no |" in row
    (table_row,) = [line for line in text.splitlines() if line.startswith(f"| {twin.name} |")]
    assert f"{PEER}:" not in table_row


def test_without_sse_runs_there_is_no_sse_table() -> None:
    text = s3_bench.report(_setting(None), _runs("blobstore", BOTO3, (1.0,)), [], {}, [])
    assert "SSE" not in text


def test_the_listing_parse_probe_prices_a_page_as_boto3_reads_it() -> None:
    """The limits' listing row parses pages botocore reads as S3 listings, with each
    element there unless taken out."""
    model = botocore.session.get_session().get_service_model("s3")
    output = model.operation_model("ListObjectsV2").output_shape
    parser = botocore.parsers.RestXMLParser()

    def contents(without: frozenset[str]) -> list[dict[str, object]]:
        page = s3_boto.listing_page(3, without)
        parsed = parser.parse({"body": page, "headers": {}, "status_code": 200}, output)
        return list(parsed["Contents"])

    whole = contents(frozenset())
    assert [c["Key"] for c in whole] == [f"list/key-{n:08d}" for n in range(3)]
    assert whole[0]["Size"] == 16 << 20 and whole[0]["ChecksumAlgorithm"] == ["CRC32"]
    assert whole[0]["LastModified"].year == 2026  # type: ignore[attr-defined]
    trimmed = contents(frozenset({"LastModified", "Checksum"}))
    assert "LastModified" not in trimmed[0] and "ChecksumAlgorithm" not in trimmed[0]
    assert trimmed[0]["ETag"] == whole[0]["ETag"]
    assert s3_boto.listing_parse_ms(keys=10) > 0
    name, value, notes = s3_bench.listing_parse_row()
    assert value.endswith(" ms") and "LastModified" in notes
