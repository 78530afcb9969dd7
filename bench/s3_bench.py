"""S3 benchmark: blobstore through two clients, boto3 with its default settings and the load
generator of `bench/s3_load.py`, optionally beside a peer S3 endpoint measured in the same
run, with the machine's limits measured in that run too.

    .venv/bin/python -m bench.s3_bench [--duration 4] [--rounds 2] [--output docs/benchmarks/s3.md]
    .venv/bin/python -m bench.s3_bench --peer http://127.0.0.1:7480 --peer-name "Ceph RGW" \\
        --peer-access-key K --peer-secret-key S
    .venv/bin/python -m bench.s3_bench --endpoint http://127.0.0.1:9000 --access-key K \\
        --secret-key S        # an already running blobstore (`make run`), not a fresh cluster
    .venv/bin/python -m bench.s3_bench --serve        # start the cluster, print the endpoint, wait

Without --endpoint it starts a local cluster (ZooKeeper, 3 bookies, one gateway). Phases:
4 KiB PUT and GET (16 in flight), 16 MiB PUT and GET (4 in flight), random 1 MiB range GETs
of the 16 MiB objects (8 in flight), flat ListObjectsV2 over --list-keys keys (one client,
1000-key pages). Each phase runs through each client, and against blobstore and the peer in
turn (A B A B ..., --rounds rounds); the report gives each phase's median over its rounds
and, with a peer, the ratio blobstore/peer of the medians. The 16 MiB and 4 KiB PUTs and
GETs also run with SSE-S3 (`x-amz-server-side-encryption: AES256` on the PUT), against
blobstore only, each next to the same phase in clear in every round; the report gives the
ratio SSE/clear of their medians (--no-sse leaves them out). For each aim against the peer
that the run misses, it says what the run's CPU times predict and what the aim would need,
and, for the listing (one request in flight), the most the client itself allows. Without
--peer there is no peer column: figures from another run are never used. The objects read
are written untimed first; every timed PUT writes keys of its own; at the end everything
the run wrote is deleted from each endpoint's bucket (--keep-objects keeps it). Writes
docs/benchmarks/s3.md; the text after the ANALYSIS_MARK line of an existing report is kept
(prose written by hand). Not a test: no assertion on speed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import glob
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import crc32c
from awscrt import checksums
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from isal import isal_zlib

from bench import s3_boto
from bench.disk_probes import direct_mib_per_s, fsync_rate_4k, sequential_mb_per_s
from bench.ledger_bench import process_cpu_s, round_trip_rows
from bench.s3_load import (
    HttpConnection,
    Op,
    OpFactory,
    PhaseResult,
    S3Client,
    create_bucket,
    get_op,
    list_op,
    measure_ceiling,
    object_key,
    put_op,
    run_phase,
)
from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.runtime.sealing import CLUSTER_KEY_ENV, CLUSTER_KEY_FILE_ENV

ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY = "bench-access-key"
SECRET_KEY = "bench-secret-key"
BUCKET = "bench"
KIB = 1 << 10
MIB = 1 << 20
READY_TIMEOUT_S = 90.0
WRITE_QUORUM = 2  # the gateway's default E/WQ/AQ is 3/2/2
LARGE_BYTES = 16 * MIB
RANGE_BYTES = MIB
SMALL_BYTES = 4 * KIB
LARGE_OBJECTS = 16  # read by the 16 MiB and range GETs
SMALL_OBJECTS = 2000  # read by the 4 KiB GETs
PAGE_KEYS = 1000
RANDOM_SEED = 1
GENERATOR = "generator"
BOTO3 = "boto3"
CLIENTS = (BOTO3, GENERATOR)
ANALYSIS_MARK = "<!-- Written by hand below this line; kept when the report is regenerated. -->"


@dataclass(frozen=True)
class PhaseSpec:
    """A timed phase: its name, requests in flight, and the unit of its headline figure;
    an SSE-S3 phase names the phase in clear it is the twin of."""

    name: str
    concurrency: int
    unit: str  # "MiB/s", "/s" or "keys/s"
    note: str
    clear: str = ""  # an SSE-S3 phase: its twin in clear

    @property
    def base(self) -> str:
        """The phase in clear this one does (itself, or the twin of an SSE-S3 phase)."""
        return self.clear or self.name


PHASES = (
    PhaseSpec("put 16MiB", 4, "MiB/s", "PutObject of 16 MiB, new keys"),
    PhaseSpec("get 16MiB", 4, "MiB/s", f"whole GETs of {LARGE_OBJECTS} objects, at random"),
    PhaseSpec("get 1MiB range", 8, "/s", "random aligned 1 MiB ranges of the 16 MiB objects"),
    PhaseSpec("list flat", 1, "keys/s", "ListObjectsV2, 1000-key pages, no delimiter"),
    PhaseSpec("put 4KiB", 16, "/s", "PutObject of 4 KiB, new keys"),
    PhaseSpec("get 4KiB", 16, "/s", f"GETs of {SMALL_OBJECTS:,} objects of 4 KiB, at random"),
)
SSE_S3 = "SSE-S3"
SSE_HEADERS = (("x-amz-server-side-encryption", "AES256"),)  # the generator's PUT
SSE_BOTO = {"ServerSideEncryption": "AES256"}  # boto3's put_object
SSE_PREFIX = "sse-"  # the SSE-S3 objects read: sse-large-..., sse-small-...
# The twins of the phases in clear that SSE-S3 runs, against blobstore only.
SSE_PHASES = {
    spec.name: PhaseSpec(
        f"{spec.name} {SSE_S3}", spec.concurrency, spec.unit, f"{spec.note}, SSE-S3", spec.name
    )
    for spec in PHASES
    if spec.name in ("put 16MiB", "get 16MiB", "put 4KiB", "get 4KiB")
}
SSE_AIM = 0.85  # SSE-S3 at most 15 % slower than the same phase in clear


@dataclass(frozen=True)
class Target:
    """An S3 endpoint under test, and the processes whose CPU time it costs."""

    name: str
    endpoint: str
    access_key: str
    secret_key: str
    pids: tuple[int, ...] = ()
    gateway_pids: tuple[int, ...] = ()  # those of `pids` that are its gateway


@dataclass(frozen=True)
class Slot:
    """One timed run: a phase, through a client, in a round, against a target."""

    phase: PhaseSpec
    client: str
    round: int
    target: str


def alternation(
    phases: Sequence[PhaseSpec],
    clients: Sequence[str],
    targets: Sequence[str],
    rounds: int,
    twins: dict[str, PhaseSpec] | None = None,
) -> list[Slot]:
    """The timed runs in order: phase by phase, client by client, the targets taking turns
    round after round (A B A B), so both see the same moment of a busy machine. A phase's
    SSE-S3 twin (`twins`, by the name of the phase in clear) runs in each round against the
    first target only, next to that target's run in clear: after it in odd rounds, before
    it in even ones (A A' B, A' A B), so neither always follows the other."""
    slots: list[Slot] = []
    for phase in phases:
        twin = (twins or {}).get(phase.name)
        for client in clients:
            for round_index in range(1, rounds + 1):
                turn = [Slot(phase, client, round_index, target) for target in targets]
                if twin is not None:
                    sse = Slot(twin, client, round_index, targets[0])
                    turn.insert(1 if round_index % 2 else 0, sse)
                slots += turn
    return slots


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Run:
    """A timed run's result, with the CPU time its target's processes spent during it (and
    its gateway's alone, where the target's gateway is known)."""

    slot: Slot
    result: PhaseResult
    server_cpu_s: float | None = None
    gateway_cpu_s: float | None = None


def figure(spec: PhaseSpec, result: PhaseResult) -> float:
    """The phase's headline figure, in `spec.unit`."""
    if spec.unit == "MiB/s":
        return result.mb_per_s
    if spec.unit == "keys/s":
        return result.ops_per_s * PAGE_KEYS
    return result.ops_per_s


@dataclass(frozen=True)
class Cell:
    """One phase, one client, one target: the rounds' figures and their median."""

    figures: tuple[float, ...]
    runs: tuple[Run, ...] = field(default=())

    @property
    def median(self) -> float:
        return statistics.median(self.figures)

    @property
    def errors(self) -> int:
        return sum(run.result.errors for run in self.runs)


def cells(runs: Sequence[Run]) -> dict[tuple[str, str, str], Cell]:
    """(phase, client, target) -> the rounds' figures, in round order."""
    grouped: dict[tuple[str, str, str], list[Run]] = {}
    for run in sorted(runs, key=lambda run: run.slot.round):
        key = (run.slot.phase.name, run.slot.client, run.slot.target)
        grouped.setdefault(key, []).append(run)
    return {
        key: Cell(tuple(figure(group[0].slot.phase, run.result) for run in group), tuple(group))
        for key, group in grouped.items()
    }


def ratio(ours: Cell | None, theirs: Cell | None) -> float | None:
    """Median over median; None without both, or when the peer's median is zero."""
    if ours is None or theirs is None or not theirs.median:
        return None
    return ours.median / theirs.median


# --------------------------------------------------------------------------- report


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def cell_text(cell: Cell | None) -> str:
    if cell is None:
        return ""
    rounds = ", ".join(number(value) for value in cell.figures)
    errors = f"; **{cell.errors} errors**" if cell.errors else ""
    return f"**{number(cell.median)}** ({rounds}){errors}"


def latency_text(cell: Cell | None) -> str:
    if cell is None or not cell.runs:
        return ""
    p50 = statistics.median(run.result.p50_ms for run in cell.runs)
    p99 = statistics.median(run.result.p99_ms for run in cell.runs)
    return f"{p50:,.1f} / {p99:,.1f}"


def server_cpu_ms(cell: Cell) -> float | None:
    """The target's processes' CPU per request, median over the rounds (None unmeasured)."""
    return _cpu_ms_per_request(cell, [run.server_cpu_s for run in cell.runs])


def gateway_cpu_ms(cell: Cell) -> float | None:
    """The target's gateway's CPU per request, median over the rounds (None unmeasured)."""
    return _cpu_ms_per_request(cell, [run.gateway_cpu_s for run in cell.runs])


def _cpu_ms_per_request(cell: Cell, spent_s: Sequence[float | None]) -> float | None:
    per_request = [
        spent * 1e3 / run.result.ops
        for run, spent in zip(cell.runs, spent_s, strict=True)
        if spent is not None and run.result.ops
    ]
    return statistics.median(per_request) if per_request else None


def client_cpu_ms(cell: Cell) -> float:
    """The client's CPU per request, median over the rounds (the cell has runs)."""
    return statistics.median(run.result.client_cpu_us_per_op for run in cell.runs) / 1e3


def request_rate(cell: Cell) -> float:
    """Requests a second, median over the rounds (the cell has runs)."""
    return statistics.median(run.result.ops_per_s for run in cell.runs)


def cpu_text(cell: Cell | None) -> str:
    """The server's and the client's CPU per request, medians over the rounds."""
    if cell is None or not cell.runs:
        return ""
    client = client_cpu_ms(cell)
    server = server_cpu_ms(cell)
    return f"{'-' if server is None else f'{server:,.2f}'} / {client:,.2f}"


def client_table(
    client: str, by_key: dict[tuple[str, str, str], Cell], ours: str, peer: str | None
) -> list[str]:
    """One client's table: a row per phase, medians with their rounds, and the ratio."""
    head = f"| phase | in flight | unit | {ours} median (rounds) |"
    rule = "|---|---|---|---|"
    if peer is not None:
        head += f" {peer} median (rounds) | ratio {ours} / {peer} |"
        rule += "---|---|"
    head += " p50 / p99 ms | server / client CPU ms per request |"
    rule += "---|---|"
    lines = [head, rule]
    for spec in (*PHASES, *SSE_PHASES.values()):
        mine = by_key.get((spec.name, client, ours))
        if mine is None:
            continue
        row = f"| {spec.name} | {spec.concurrency} | {spec.unit} | {cell_text(mine)} |"
        theirs = by_key.get((spec.name, client, peer)) if peer is not None else None
        if peer is not None:
            value = ratio(mine, theirs)
            row += f" {cell_text(theirs)} | {'' if value is None else f'**{value:.2f}**'} |"
        latencies = latency_text(mine)
        cpus = cpu_text(mine)
        if theirs is not None:
            latencies += f" ({peer}: {latency_text(theirs)})"
            cpus += f" ({peer}: {cpu_text(theirs)})"
        lines.append(f"{row} {latencies} | {cpus} |")
    return lines


def sse_rows(by_key: dict[tuple[str, str, str], Cell], ours: str) -> list[str]:
    """Each SSE-S3 phase against the same phase in clear, same client, same rounds."""
    lines = [
        "| phase | client | SSE-S3 median (rounds) | clear median (rounds) | ratio SSE / clear "
        "| aim | met | server CPU ms per request, SSE / clear | gateway's, SSE / clear "
        "| ratio if the gateway is the bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for client in CLIENTS:
        for clear, spec in SSE_PHASES.items():
            sse = by_key.get((spec.name, client, ours))
            plain = by_key.get((clear, client, ours))
            value = ratio(sse, plain)
            if sse is None or plain is None or value is None:
                continue
            met = "yes" if value >= SSE_AIM else "no"
            lines.append(
                f"| {clear} ({spec.unit}) | {client} | {cell_text(sse)} | {cell_text(plain)} "
                f"| **{value:.2f}** | >= {SSE_AIM:g} | {met} "
                f"| {server_cpu_text(sse)} / {server_cpu_text(plain)} "
                f"| {gateway_bound_text(sse, plain)} |"
            )
    return lines


def gateway_bound_text(sse: Cell, plain: Cell) -> str:
    """The gateway's CPU per request in both cells, and the ratio they give where the
    gateway's processes are the bound: its CPU in clear over its CPU with SSE."""
    mine, theirs = gateway_cpu_ms(sse), gateway_cpu_ms(plain)
    if mine is None or theirs is None or not mine:
        return "- | -"
    return f"{mine:,.2f} / {theirs:,.2f} | {theirs / mine:.2f}"


def server_cpu_text(cell: Cell) -> str:
    value = server_cpu_ms(cell)
    return "-" if value is None else f"{value:,.2f}"


# An aim of the issue: (phase, clients, the ratio to reach against the peer).
PEER_AIMS = (
    ("put 16MiB", (BOTO3, GENERATOR), 1.5),
    ("get 16MiB", (BOTO3, GENERATOR), 1.3),
    ("get 1MiB range", (BOTO3, GENERATOR), 1.3),
    ("list flat", (BOTO3,), 1.3),
)


BOUNDS_TEXT = (
    "What bounds the aims not met, from this run's CPU times: the two CPUs are shared by "
    "the target's processes and the client, so when both targets keep them busy the ratio "
    "is the inverse of the CPU a request costs all processes; with one request in flight "
    "the client's own CPU per answer is a floor on the time per request."
)


def peer_aim_rows(by_key: dict[tuple[str, str, str], Cell], ours: str, peer: str) -> list[str]:
    lines = [
        f"| aim | client | ratio {ours} / {peer} | aim | met |",
        "|---|---|---|---|---|",
    ]
    for phase, clients, wanted in PEER_AIMS:
        for client in clients:
            value = ratio(by_key.get((phase, client, ours)), by_key.get((phase, client, peer)))
            if value is None:
                continue
            met = "yes" if value >= wanted else "no"
            lines.append(f"| {phase} | {client} | {value:.2f} | >= {wanted:g} | {met} |")
    return lines


def cpu_pair_ms(cell: Cell | None) -> tuple[float, float] | None:
    """The server's and the client's CPU per request (medians over the rounds), or None
    when either is not measured."""
    if cell is None or not cell.runs:
        return None
    server = server_cpu_ms(cell)
    if server is None:
        return None
    return server, client_cpu_ms(cell)


def cpu_bound_text(mine: Cell, theirs: Cell, wanted: float) -> tuple[str, str]:
    """With every CPU busy in both runs, a target's rate goes as one over the CPU that a
    request costs its processes and the client's together: the ratio that predicts, and
    the server CPU per request the aim would need at the client CPU measured."""
    ours, peers = cpu_pair_ms(mine), cpu_pair_ms(theirs)
    if ours is None or peers is None:
        return "-", "-"
    allowed = sum(peers) / wanted  # server and client CPU per request, together
    if allowed <= ours[1]:
        needs = (
            f"{allowed:,.1f} ms of CPU a request in all, "
            f"less than the client's alone ({ours[1]:,.1f})"
        )
    else:
        needs = f"server CPU per request <= {allowed - ours[1]:,.1f} ms (measured {ours[0]:,.1f})"
    return f"{sum(peers) / sum(ours):.2f}", needs


def client_ceiling_text(spec: PhaseSpec, client: str, theirs: Cell) -> str:
    """One request in flight: the client spends its CPU per response one after the other,
    so no server, however fast, gets a request done in less. If ours cost the client
    what the peer's do, the ratio can be at most the peer's time per request over that
    CPU."""
    if spec.concurrency != 1 or not theirs.runs:
        return "-"
    per_request_ms = 1e3 / request_rate(theirs)
    client_ms = client_cpu_ms(theirs)
    if not client_ms:
        return "-"
    return (
        f"{per_request_ms / client_ms:.2f} (the peer answers every {per_request_ms:,.1f} ms; "
        f"{client} spends {client_ms:,.1f} ms of CPU on each answer)"
    )


def bound_rows(by_key: dict[tuple[str, str, str], Cell], ours: str, peer: str) -> list[str]:
    """For each aim against the peer not met: what the CPU time measured in this run
    predicts, and, with one request in flight, the most the client itself allows."""
    lines = [
        "| aim not met | client | ratio | predicted if the CPUs are the bound | the aim needs "
        "| most the client allows |",
        "|---|---|---|---|---|---|",
    ]
    specs = {spec.name: spec for spec in PHASES}
    for phase, clients, wanted in PEER_AIMS:
        for client in clients:
            mine, theirs = by_key.get((phase, client, ours)), by_key.get((phase, client, peer))
            value = ratio(mine, theirs)
            if mine is None or theirs is None or value is None or value >= wanted:
                continue
            predicted, needs = cpu_bound_text(mine, theirs, wanted)
            ceiling = client_ceiling_text(specs[phase], client, theirs)
            lines.append(
                f"| {phase} >= {wanted:g} | {client} | {value:.2f} | {predicted} | {needs} "
                f"| {ceiling} |"
            )
    return lines if len(lines) > 2 else []


def disk_aim_rows(
    by_key: dict[tuple[str, str, str], Cell],
    ours: str,
    disk: dict[str, float],
    floor_ms_per_mib: float | None = None,
) -> list[str]:
    """Large PUT against 70 % of (sequential disk bandwidth / WQ), for each way of writing
    the disk that the limits measured; how much of the machine's CPU the PUTs kept busy
    meanwhile (the other bound), how much PUTs at the aim's rate would keep busy at this
    run's CPU per PUT, and how much at least, whatever the store (`floor_ms_per_mib`: MD5
    and the loopback trips). More than the machine has: the aim is out of its reach."""
    lines = [
        "| client | 16 MiB PUT median | disk mode | 0.7 x bandwidth / WQ | share of it "
        "| CPUs busy | CPUs the aim's rate needs | of which MD5 and loopback alone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for client in CLIENTS:
        cell = by_key.get(("put 16MiB", client, ours))
        if cell is None:
            continue
        busy = cpus_busy_text(cell)
        for mode, bandwidth in disk.items():
            bound = 0.7 * bandwidth / WRITE_QUORUM
            lines.append(
                f"| {client} | {number(cell.median)} MiB/s | {mode} ({number(bandwidth)} MiB/s) "
                f"| {number(bound)} MiB/s | {cell.median / bound:.2f} | {busy} "
                f"| {cpus_needed_text(cell, bound * MIB / LARGE_BYTES)} "
                f"| {cpus_floor_text(bound, floor_ms_per_mib)} |"
            )
    return lines


def cpus_floor_text(mib_per_s: float, floor_ms_per_mib: float | None) -> str:
    """The CPUs storing `mib_per_s` takes at least, at `floor_ms_per_mib`."""
    return "-" if floor_ms_per_mib is None else f"{mib_per_s * floor_ms_per_mib / 1e3:.2f}"


def cpus_needed_text(cell: Cell, rate: float) -> str:
    """The CPUs `rate` requests a second would keep busy at the server and client CPU
    each of the cell's requests cost."""
    pair = cpu_pair_ms(cell)
    if pair is None:
        return "-"
    return f"{rate * sum(pair) / 1e3:.2f}"


def cpus_busy_text(cell: Cell) -> str:
    """Requests a second times the CPU each cost the server's processes and the client:
    how many of the machine's CPUs the phase kept busy (medians over the rounds)."""
    needed = cpus_needed_text(cell, request_rate(cell))
    return needed if needed == "-" else f"{needed} of {os.cpu_count()}"


@dataclass(frozen=True)
class Setting:
    """What the report says about how the run was made."""

    started: str
    ours: Target
    peer: Target | None
    duration_s: float
    rounds: int
    list_keys: int
    boto_mode: dict[str, str]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    cluster: str
    note: str = ""


def report_head(setting: Setting) -> list[str]:
    peer = setting.peer
    against = f" and {peer.name} ({peer.endpoint})" if peer is not None else ""
    lines = [
        "# S3 benchmark",
        "",
        f"Run {setting.started} UTC on {platform.node()} ({os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, boto3 {boto3.__version__}): {setting.ours.name} "
        f"({setting.cluster}){against}, the clients on the same machine. Load average "
        f"{load_text(setting.load_before)} before the run, {load_text(setting.load_after)} "
        "after.",
        "",
    ]
    if setting.note:
        lines += [f"**{setting.note}**", ""]
    lines += [
        f"Every phase ran {setting.duration_s:g} s per round, {setting.rounds} rounds"
        + (f", {setting.ours.name} and {peer.name} taking turns (A B A B)" if peer else "")
        + f"; a figure is the median of the rounds, the rounds in brackets. The flat listing "
        f"walks {setting.list_keys:,} keys. The objects read were written untimed first. "
        "`python -m bench.s3_bench` regenerates this file.",
        "",
        "Clients:",
        "",
        "- **boto3**: one client per target with default settings (only its connection pool "
        "sized for 16 threads), shared by one thread per request in flight. `put_object` "
        "with the body in memory; `get_object(...)['Body'].read()`. "
        + " ".join(f"Its PutObject to {name}: {mode}." for name, mode in setting.boto_mode.items()),
        "- **generator**: `bench/s3_load.py`, asyncio + httptools, one connection per request "
        "in flight, SigV4 with UNSIGNED-PAYLOAD, no checksum headers.",
        "",
        "Server CPU: the CPU time of the target's processes during the run, per request "
        f"({server_processes(setting)}); client CPU: the benchmark process's.",
        "",
    ]
    return lines


def sse_text(peer: str | None) -> str:
    skipped = f" ({peer} is not set up for SSE-S3: no SSE phase ran against it)" if peer else ""
    return (
        f"The SSE-S3 phases ran against blobstore only{skipped}: PUTs with "
        "`x-amz-server-side-encryption: AES256` (boto3: `ServerSideEncryption='AES256'`), "
        "GETs of objects written so (no header). Each ran in every round next to the same "
        "phase in clear, through the same client, before it in even rounds and after it in "
        f"odd ones. Aim: at most 15 % slower than in clear (ratio >= {SSE_AIM:g}). The "
        "gateway's CPU is its processes' alone: where they are the bound (one event loop "
        "a worker), the ratio is its CPU per request in clear over its CPU with SSE."
    )


def server_processes(setting: Setting) -> str:
    ours = "gateway, bookies and ZooKeeper" if setting.ours.pids else "not measured"
    text = f"{setting.ours.name}: {ours}"
    if setting.peer is not None:
        theirs = "the processes of its pid files" if setting.peer.pids else "not measured"
        text += f"; {setting.peer.name}: {theirs}"
    return text


def load_text(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{value:.1f}" for value in load)


def report(
    setting: Setting,
    runs: Sequence[Run],
    limits: Sequence[tuple[str, str, str]],
    disk: dict[str, float],
    ceilings: Sequence[PhaseResult],
    floor_ms_per_mib: float | None = None,
) -> str:
    by_key = cells(runs)
    ours = setting.ours.name
    peer = setting.peer.name if setting.peer is not None else None
    lines = report_head(setting)
    for client in CLIENTS:
        lines += [f"## Through {client}", "", *client_table(client, by_key, ours, peer), ""]
    lines += ["## Against the aims", ""]
    if peer is not None:
        lines += [*peer_aim_rows(by_key, ours, peer), ""]
        bounds = bound_rows(by_key, ours, peer)
        if bounds:
            lines += [BOUNDS_TEXT, "", *bounds, ""]
    lines += [*disk_aim_rows(by_key, ours, disk, floor_ms_per_mib), ""]
    if any(spec.name == key[0] for spec in SSE_PHASES.values() for key in by_key):
        lines += ["## Server-side encryption (SSE-S3) cost", "", sse_text(peer), ""]
        lines += [*sse_rows(by_key, ours), ""]
    lines += ["## Machine limits, same run", "", "| limit | value | notes |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in limits]
    lines += ["", *ceiling_rows(ceilings), ""]
    errors = [run for run in runs if run.result.error_samples]
    if errors:
        lines += ["## Errors", ""]
        lines += [
            f"- {run.slot.phase.name}, {run.slot.client}, {run.slot.target}, round "
            f"{run.slot.round}: {run.result.error_samples[0]}"
            for run in errors
        ]
        lines.append("")
    return "\n".join(lines)


def ceiling_rows(ceilings: Sequence[PhaseResult]) -> list[str]:
    lines = [
        "The generator's own ceiling, same run (same requests against a trivial HTTP server):",
        "",
        "| ceiling | requests/s | MiB/s | generator CPU per request |",
        "|---|---|---|---|",
    ]
    for result in ceilings:
        lines.append(
            f"| {result.name}, {result.concurrency} in flight | {result.ops_per_s:,.0f} "
            f"| {result.mb_per_s:,.0f} | {result.client_cpu_us_per_op / 1e3:,.2f} ms |"
        )
    return lines


def with_kept_analysis(text: str, previous: str) -> str:
    """The new report, followed by the hand-written part of the previous one (if any)."""
    _, mark, kept = previous.partition(ANALYSIS_MARK)
    return f"{text}\n{ANALYSIS_MARK}{kept if mark else chr(10)}"


# --------------------------------------------------------------------------- machine limits


def hash_mb_s(update: Callable[[bytes], object], seconds: float = 0.5) -> float:
    block = os.urandom(MIB)
    count = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        update(block)
        count += 1
    return count / (time.monotonic() - started)


def hashing_limits() -> list[tuple[str, float]]:
    md5 = hashlib.md5()
    sha = hashlib.sha256()
    state = {"crc32": 0, "crc32c": 0, "crc64": 0}

    def crc32_update(block: bytes) -> None:
        state["crc32"] = isal_zlib.crc32(block, state["crc32"])

    def crc32c_update(block: bytes) -> None:
        state["crc32c"] = crc32c.crc32c(block, state["crc32c"])

    def crc64_update(block: bytes) -> None:
        state["crc64"] = checksums.crc64nvme(block, state["crc64"])

    return [
        ("AES-256-GCM, 64 KiB chunks", hash_mb_s(aes_gcm_update())),
        ("MD5", hash_mb_s(md5.update)),
        ("SHA256", hash_mb_s(sha.update)),
        ("CRC32 (ISA-L, as the gateway)", hash_mb_s(crc32_update)),
        ("CRC32C", hash_mb_s(crc32c_update)),
        ("CRC64NVME", hash_mb_s(crc64_update)),
    ]


def aes_gcm_update() -> Callable[[bytes], object]:
    """Seals a block in 64 KiB AES-256-GCM chunks, as SSE-S3 stores an object."""
    sealer = AESGCM(AESGCM.generate_key(bit_length=256))
    nonce = os.urandom(12)
    chunk = 64 * KIB

    def update(block: bytes) -> None:
        view = memoryview(block)
        for start in range(0, len(block), chunk):
            sealer.encrypt(nonce, view[start : start + chunk], None)

    return update


def loopback_probe(total_mib: int = 512) -> tuple[float, float]:
    """(MiB/s, CPU ms per MiB, both ends) of one loopback TCP connection, its sender and
    receiver threads of this process."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    block = os.urandom(MIB)

    def sink() -> None:
        connection, _ = server.accept()
        with connection:
            while connection.recv(4 * MIB):
                pass

    thread = threading.Thread(target=sink, daemon=True)
    thread.start()
    started, cpu_started = time.monotonic(), time.process_time()
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(total_mib):
            client.sendall(block)
    thread.join(timeout=60)
    server.close()
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
    return total_mib / elapsed, cpu * 1e3 / total_mib


def disk_limits(directory: Path) -> dict[str, float]:
    """Sequential write bandwidth (MiB/s) per way of writing: buffered write + fdatasync of
    each 4 MiB (as the bookies write today, and the ledger benchmark probes), and O_DIRECT."""
    out = {"buffered, fdatasync per 4 MiB": sequential_mb_per_s(directory, 3.0) * 1e6 / MIB}
    for block in (MIB, 4 * MIB):
        value = direct_mib_per_s(directory, 2.0, block)
        if value is not None:
            out[f"O_DIRECT, {block // MIB} MiB blocks"] = value
    return out


def machine_limits(
    directory: Path,
) -> tuple[list[tuple[str, str, str]], dict[str, float], float]:
    """The limits table's rows, the disk's sequential bandwidth per way of writing, and
    the CPU a MiB stored through S3 costs at least (ms): MD5 for its ETag, and its trips
    over loopback TCP, from the client and to WQ bookies (each both ends)."""
    fsyncs = fsync_rate_4k(directory, 1.0)
    disk = disk_limits(directory)
    rows = [("4 KiB write+fdatasync", f"{fsyncs:,.0f} /s", "one thread, the bookies' disk")]
    rows += [
        (f"sequential write, {mode}", f"{value:,.0f} MiB/s", "the bookies' disk, shared by all 3")
        for mode, value in disk.items()
    ]
    if not any(mode.startswith("O_DIRECT") for mode in disk):
        rows.append(("sequential write, O_DIRECT", "refused", "by the filesystem"))
    loopback, loopback_cpu_ms = loopback_probe()
    rows.append(
        (
            "loopback TCP",
            f"{loopback:,.0f} MiB/s",
            f"one connection; {loopback_cpu_ms:.2f} ms of CPU per MiB, both ends",
        )
    )
    rows += round_trip_rows()
    hashing = hashing_limits()
    rows += [(f"{name}, one core", f"{value:,.0f} MiB/s", "") for name, value in hashing]
    rows.append(listing_parse_row())
    floor_ms = 1e3 / dict(hashing)["MD5"] + (1 + WRITE_QUORUM) * loopback_cpu_ms
    return rows, disk, floor_ms


def listing_parse_row() -> tuple[str, str, str]:
    """boto3's floor per listing page: its parse of one, and what each element costs."""
    whole = s3_boto.listing_parse_ms()
    no_time = s3_boto.listing_parse_ms(frozenset({"LastModified"}))
    no_checksum = s3_boto.listing_parse_ms(frozenset({"Checksum"}))
    return (
        "boto3 parse of a 1,000-key ListObjectsV2 page, one core",
        f"{whole:.1f} ms",
        f"{whole - no_time:.1f} ms of it the LastModified timestamps, "
        f"{whole - no_checksum:.1f} ms the checksum elements",
    )


# --------------------------------------------------------------------------- cluster


def start_child(
    command: list[str], log: Path, ready: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    ready.unlink(missing_ok=True)
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready.exists():
            try:
                return process, json.loads(ready.read_text())
            except json.JSONDecodeError:
                pass
        if process.poll() is not None:
            raise RuntimeError(f"{command[3]} exited early; see {log}")
        time.sleep(0.05)
    raise TimeoutError(f"{command[3]} not ready; see {log}")


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "blobstore.cli", *args]


class Cluster:
    """ZooKeeper, 3 bookies and a gateway in child processes, under one temporary dir."""

    def __init__(self, workers: int) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="s3-bench-"))
        self.workers = workers
        self.children: list[subprocess.Popen[bytes]] = []
        self.zookeeper: ZooKeeperServer | None = None
        self.endpoint = ""
        self.gateway_pid = 0

    @property
    def pids(self) -> tuple[int, ...]:
        zookeeper = (self.zookeeper.process.pid,) if self.zookeeper is not None else ()
        return (*zookeeper, *(child.pid for child in self.children))

    def __enter__(self) -> Cluster:
        env = dict(os.environ)
        env.update({"BLOBSTORE_ACCESS_KEY": ACCESS_KEY, "BLOBSTORE_SECRET_KEY": SECRET_KEY})
        if not (env.get(CLUSTER_KEY_ENV) or env.get(CLUSTER_KEY_FILE_ENV)):
            # SSE-S3 wraps data keys under master keys sealed with it
            env[CLUSTER_KEY_ENV] = base64.b64encode(os.urandom(32)).decode()
        self.zookeeper = start_zookeeper(self.work / "zookeeper", free_port(), heap_mb=512)
        try:
            zk = self.zookeeper.connect_string
            for index in range(3):
                self.children.append(self._bookie(zk, self.work / f"bookie-{index}", env))
            process, ready = start_child(
                cli(
                    "gateway",
                    *("--zk", zk, "--port", "0", "--workers", str(self.workers)),
                    *("--ready-file", str(self.work / "gateway.json")),
                ),
                self.work / "gateway.log",
                self.work / "gateway.json",
                env,
            )
            self.children.append(process)
            self.gateway_pid = process.pid
            self.endpoint = f"http://127.0.0.1:{ready['port']}"
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @staticmethod
    def _bookie(zk: str, root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        root.mkdir()
        process, _ = start_child(
            cli(
                "bookie",
                *("--zk", zk, "--host", "127.0.0.1", "--port", "0", "--http-port", "0"),
                *("--journal-dir", str(root / "journal")),
                *("--ledger-dir", str(root / "ledgers")),
                *("--ready-file", str(root / "ready.json")),
            ),
            root / "bookie.log",
            root / "ready.json",
            env,
        )
        return process

    def __exit__(self, *exc: object) -> None:
        for child in reversed(self.children):
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        # Gigabytes of journals and entry logs per run: gone with the cluster.
        shutil.rmtree(self.work, ignore_errors=True)


def children_pids(pids: Sequence[int]) -> tuple[int, ...]:
    """The processes and their children (a gateway's workers), those still running."""
    out: list[int] = []
    for pid in pids:
        out.append(pid)
        try:
            out += [
                int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            ]
        except OSError:
            continue
    return tuple(out)


def server_cpu_s(pids: Sequence[int]) -> float | None:
    if not pids:
        return None
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_s(pid)
        except (OSError, IndexError):
            continue
    return total


# --------------------------------------------------------------------------- phases


def generator_factory(slot: Slot) -> OpFactory:
    """The generator's operation for a slot's phase (objects as `prepare` wrote them)."""
    name = slot.phase.base
    sse = SSE_PREFIX if slot.phase.clear else ""
    if name.startswith("put"):
        size = LARGE_BYTES if name == "put 16MiB" else SMALL_BYTES
        return put_op(BUCKET, size, put_prefix(slot), headers=SSE_HEADERS if sse else ())
    if name == "get 16MiB":
        return get_op(BUCKET, LARGE_OBJECTS, f"{sse}large-", random_seed=RANDOM_SEED)
    if name == "get 4KiB":
        return get_op(BUCKET, SMALL_OBJECTS, f"{sse}small-", random_seed=RANDOM_SEED)
    if name == "get 1MiB range":
        return ranged_get_op()
    return list_op(BUCKET, "list-", PAGE_KEYS)


def boto_factory(slot: Slot) -> s3_boto.BotoOpFactory:
    name = slot.phase.base
    sse = SSE_PREFIX if slot.phase.clear else ""
    if name.startswith("put"):
        size = LARGE_BYTES if name == "put 16MiB" else SMALL_BYTES
        return s3_boto.put_op(BUCKET, size, put_prefix(slot), SSE_BOTO if sse else None)
    if name == "get 16MiB":
        return s3_boto.get_op(BUCKET, LARGE_OBJECTS, f"{sse}large-")
    if name == "get 4KiB":
        return s3_boto.get_op(BUCKET, SMALL_OBJECTS, f"{sse}small-")
    if name == "get 1MiB range":
        return s3_boto.get_op(BUCKET, LARGE_OBJECTS, "large-", RANGE_BYTES, LARGE_BYTES)
    return s3_boto.list_op(BUCKET, "list-", PAGE_KEYS)


def put_prefix(slot: Slot) -> str:
    return f"{slot.phase.name.replace(' ', '-')}-{slot.client}-r{slot.round}-"


def ranged_get_op() -> OpFactory:
    """Random aligned 1 MiB ranges of the 16 MiB objects, one seeded sequence for all."""
    rng = random.Random(RANDOM_SEED)
    ranges = LARGE_BYTES // RANGE_BYTES

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            start = rng.randrange(ranges) * RANGE_BYTES
            byte_range = (start, start + RANGE_BYTES - 1)
            inner = get_op(BUCKET, LARGE_OBJECTS, "large-", byte_range)(client)
            return await inner(connection, rng.randrange(LARGE_OBJECTS))

        return op

    return factory


def run_slot(slot: Slot, target: Target, boto_client: s3_boto.BotoClient, duration_s: float) -> Run:
    concurrency = slot.phase.concurrency
    pids = children_pids(target.pids)
    gateway = children_pids(target.gateway_pids)
    cpu_before, gateway_before = server_cpu_s(pids), server_cpu_s(gateway)
    if slot.client == GENERATOR:
        result = run_phase(
            slot.phase.name,
            target.endpoint,
            target.access_key,
            target.secret_key,
            generator_factory(slot),
            concurrency,
            duration_s,
        )
    else:
        result = s3_boto.run_phase(
            slot.phase.name, boto_client, boto_factory(slot), concurrency, duration_s
        )
    spent = cpu_spent(pids, cpu_before)
    gateway_spent = cpu_spent(gateway, gateway_before)
    print(
        f"{slot.phase.name:<22} {slot.client:<9} r{slot.round} {target.name:<10} "
        f"{figure(slot.phase, result):>9,.1f} {slot.phase.unit:<6} p50 {result.p50_ms:7.1f} ms "
        f"p99 {result.p99_ms:7.1f} ms errors {result.errors}",
        flush=True,
    )
    for sample in result.error_samples[:2]:
        print(f"    error: {sample}", flush=True)
    return Run(slot, result, spent, gateway_spent)


def cpu_spent(pids: Sequence[int], before: float | None) -> float | None:
    """The CPU time `pids` spent since they had spent `before` (None unmeasured)."""
    after = server_cpu_s(pids)
    return None if before is None or after is None else after - before


def write_counted(target: Target, name: str, factory: OpFactory, count: int) -> None:
    """Untimed: `count` PUTs, all of them answered 200, or an error."""
    result = run_phase(
        name, target.endpoint, target.access_key, target.secret_key, factory, 16, count=count
    )
    if result.errors or result.ops != count:
        # Reading objects that were never written would measure errors, not reads.
        raise RuntimeError(
            f"{target.name}: {name}: {result.ops} of {count} written, {result.errors} "
            f"errors, e.g. {list(result.error_samples[:2])}"
        )
    print(f"{target.name}: {name}: {result.ops_per_s:,.0f}/s", flush=True)


def prepare(target: Target, list_keys: int, warm_up_s: float, sse: bool) -> None:
    """Untimed: the bucket, a warm-up of 4 KiB PUTs, and the objects the phases read (with
    `sse`, those of the SSE-S3 GETs too)."""
    create_bucket(target.endpoint, target.access_key, target.secret_key, BUCKET)

    def counted(name: str, factory: OpFactory, count: int) -> None:
        write_counted(target, name, factory, count)

    if warm_up_s > 0:
        run_phase(
            "warm-up",
            target.endpoint,
            target.access_key,
            target.secret_key,
            put_op(BUCKET, SMALL_BYTES, "warm-"),
            16,
            warm_up_s,
        )
    counted("prepare 16 MiB objects", put_op(BUCKET, LARGE_BYTES, "large-"), LARGE_OBJECTS)
    counted("prepare 4 KiB objects", put_op(BUCKET, SMALL_BYTES, "small-"), SMALL_OBJECTS)
    counted("prepare listing keys", put_op(BUCKET, 1, "list-"), list_keys)
    if sse:
        large = put_op(BUCKET, LARGE_BYTES, f"{SSE_PREFIX}large-", headers=SSE_HEADERS)
        counted("prepare 16 MiB SSE-S3 objects", large, LARGE_OBJECTS)
        small = put_op(BUCKET, SMALL_BYTES, f"{SSE_PREFIX}small-", headers=SSE_HEADERS)
        counted("prepare 4 KiB SSE-S3 objects", small, SMALL_OBJECTS)


def measure(
    args: argparse.Namespace, targets: Sequence[Target], boto_clients: dict[str, s3_boto.BotoClient]
) -> list[Run]:
    by_name = {target.name: target for target in targets}
    twins = SSE_PHASES if args.sse else None
    slots = alternation(PHASES, CLIENTS, list(by_name), args.rounds, twins)
    return [
        run_slot(slot, by_name[slot.target], boto_clients[slot.target], args.duration)
        for slot in slots
    ]


def boto_clients(targets: Sequence[Target]) -> tuple[dict[str, s3_boto.BotoClient], dict[str, str]]:
    """A boto3 client per target, shared by all phases (pool for the largest concurrency),
    warmed up, and how each sends a PutObject."""
    clients: dict[str, s3_boto.BotoClient] = {}
    modes: dict[str, str] = {}
    pool = max(spec.concurrency for spec in PHASES)
    for target in targets:
        client = s3_boto.make_client(target.endpoint, target.access_key, target.secret_key, pool)
        modes[target.name] = s3_boto.request_mode(client, BUCKET)
        s3_boto.warm(client, BUCKET, object_key("small-", 0))
        clients[target.name] = client
    return clients, modes


def check_encrypted(client: s3_boto.BotoClient) -> None:
    """The SSE-S3 objects are encrypted, as a HEAD reports: else the SSE phases would
    measure objects in clear."""
    key = object_key(f"{SSE_PREFIX}large-", 0)
    found = s3_boto.server_side_encryption(client, BUCKET, key)
    if found != "AES256":
        raise RuntimeError(f"{key}: x-amz-server-side-encryption {found!r}, not AES256")


def run(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()
    started = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}"
    print("measuring machine limits", flush=True)
    probe_dir = Path(tempfile.mkdtemp(prefix="s3-bench-probe-"))
    try:
        limits, disk, floor_ms = machine_limits(probe_dir)
    finally:
        probe_dir.rmdir()
    for row in limits:
        print(" | ".join(row), flush=True)
    ceilings = [
        measure_ceiling("put", SMALL_BYTES, 16, duration_s=2.0),
        measure_ceiling("get", LARGE_BYTES, 4, duration_s=2.0),
    ]
    peer = peer_target(args)
    with serving(args) as (ours, cluster_text):
        targets = [ours] + ([peer] if peer is not None else [])
        for target in targets:
            prepare(target, args.list_keys, args.warm_up, args.sse and target is ours)
        clients, modes = boto_clients(targets)
        if args.sse:
            check_encrypted(clients[ours.name])
        runs = measure(args, targets, clients)
        if not args.keep_objects:
            for target in targets:
                count = s3_boto.empty_bucket(clients[target.name], BUCKET)
                print(f"{target.name}: deleted the {count:,} objects written", flush=True)
    setting = Setting(
        started=started,
        ours=ours,
        peer=peer,
        duration_s=args.duration,
        rounds=args.rounds,
        list_keys=args.list_keys,
        boto_mode=modes,
        load_before=load_before,
        load_after=os.getloadavg(),
        cluster=cluster_text,
        note=args.note,
    )
    return report(setting, runs, limits, disk, ceilings, floor_ms)


def peer_target(args: argparse.Namespace) -> Target | None:
    if not args.peer:
        return None
    pids: list[int] = []
    for path in sorted(glob.glob(args.peer_pid_files)) if args.peer_pid_files else []:
        pids.append(int(Path(path).read_text().split()[0]))
    return Target(
        args.peer_name, args.peer, args.peer_access_key, args.peer_secret_key, tuple(pids)
    )


@contextlib.contextmanager
def serving(args: argparse.Namespace) -> Iterator[tuple[Target, str]]:
    """The blobstore under test, and how it runs: an endpoint given on the command line, or
    a local cluster started for the run (and stopped after it)."""
    if args.endpoint:
        target = Target("blobstore", args.endpoint, args.access_key, args.secret_key)
        yield target, f"already running at {args.endpoint}"
        return
    with Cluster(args.workers) as cluster:
        target = Target(
            "blobstore",
            cluster.endpoint,
            ACCESS_KEY,
            SECRET_KEY,
            cluster.pids,
            (cluster.gateway_pid,),
        )
        yield (
            target,
            (
                "started for the run: ZooKeeper, 3 bookies, E/WQ/AQ 3/2/2, one gateway with "
                f"workers={args.workers}, data under {tempfile.gettempdir()}"
            ),
        )


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per timed run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each phase per target")
    parser.add_argument("--warm-up", type=float, default=10.0, help="untimed PUT seconds")
    parser.add_argument("--list-keys", type=int, default=5000, help="keys the listing walks")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes")
    parser.add_argument("--endpoint", default="", help="an already running blobstore")
    parser.add_argument("--access-key", default=ACCESS_KEY)
    parser.add_argument("--secret-key", default=SECRET_KEY)
    parser.add_argument("--peer", default="", help="a peer S3 endpoint, measured in turn")
    parser.add_argument("--peer-name", default="peer")
    parser.add_argument("--peer-access-key", default="")
    parser.add_argument("--peer-secret-key", default="")
    parser.add_argument(
        "--peer-pid-files", default="", help="a glob of the peer's pid files, for its CPU time"
    )
    parser.add_argument(
        "--no-sse",
        dest="sse",
        action="store_false",
        help="no SSE-S3 phases (a blobstore whose gateway has no cluster key)",
    )
    parser.add_argument(
        "--keep-objects",
        action="store_true",
        help=f"leave what the run wrote in bucket {BUCKET!r} (deleted by default)",
    )
    parser.add_argument("--note", default="", help="a sentence printed at the top")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "s3.md"))
    parser.add_argument(
        "--serve", action="store_true", help="start the cluster, print the endpoint and wait"
    )
    return parser


def usage_problem(args: argparse.Namespace) -> str | None:
    if args.rounds < 1 or args.duration <= 0:
        return "--rounds must be >= 1 and --duration > 0"
    if args.peer and args.rounds < 2:
        return "--peer needs --rounds >= 2 (the targets take turns, A B A B)"
    if args.list_keys < PAGE_KEYS or args.list_keys % PAGE_KEYS:
        return f"--list-keys must be a multiple of {PAGE_KEYS} (full pages)"
    if args.peer and not (args.peer_access_key and args.peer_secret_key):
        return "--peer needs --peer-access-key and --peer-secret-key"
    if args.peer and args.peer_name == "blobstore":
        return "--peer-name must differ from blobstore"
    return None


def serve(workers: int) -> int:
    def stop(_signum: int, _frame: object) -> None:
        # Once: a second signal must not cut the cleanup short (it would leave
        # ZooKeeper running and the data behind).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    # also when started in the background, where SIGINT is ignored
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with Cluster(workers) as cluster:
        print(
            json.dumps({"endpoint": cluster.endpoint, "gateway_pid": cluster.gateway_pid}),
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.workers)
    problem = usage_problem(args)
    if problem is not None:
        parser.error(problem)
    text = run(args)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    previous = output.read_text() if output.exists() else ""
    output.write_text(with_kept_analysis(text, previous))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
