"""S3 gateway benchmark: boto3 against a real local cluster (ZooKeeper, 3 bookies, the
gateway), beside the machine's limits measured in the same run (MD5 speed, loopback
bandwidth, disk write+fsync rate), reported as ratios.

    .venv/bin/python bench/s3_bench.py [--object-mib 64] [--small-count 400] [--workers 1]

Measures large-object PUT and GET (one stream and four concurrent streams), small-object
(4 KiB) PUT and GET rates with 16 clients, and a 4-part multipart upload. Writes
docs/benchmarks/s3.md. Not a test: no assertion on speed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blobstore.zookeeper_server import free_port, start_zookeeper  # noqa: E402

ACCESS_KEY = "bench-access-key"
SECRET_KEY = "bench-secret-key"
MIB = 1 << 20
READY_TIMEOUT_S = 90.0


# --------------------------------------------------------------------------- machine limits


def md5_mb_s(seconds: float = 1.0) -> float:
    block = os.urandom(MIB)
    digest = hashlib.md5()
    count = 0
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < deadline:
        digest.update(block)
        count += 1
    return count / (time.monotonic() - started)


def loopback_mb_s(total_mib: int = 512) -> float:
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
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(total_mib):
            client.sendall(block)
    thread.join(timeout=60)
    server.close()
    return total_mib / (time.monotonic() - started)


def fsync_rate(directory: Path, seconds: float = 1.0) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    count = 0
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    try:
        while time.monotonic() < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.monotonic() - started)


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


# --------------------------------------------------------------------------- workloads


def timed(function, *args):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    function(*args)
    return time.monotonic() - started


def run(args: argparse.Namespace) -> str:
    work = Path(tempfile.mkdtemp(prefix="s3-bench-"))
    env = dict(os.environ)
    env.update({"BLOBSTORE_ACCESS_KEY": ACCESS_KEY, "BLOBSTORE_SECRET_KEY": SECRET_KEY})
    zookeeper = start_zookeeper(work / "zookeeper", free_port(), heap_mb=512)
    children: list[subprocess.Popen[bytes]] = []
    try:
        zk = zookeeper.connect_string
        for index in range(3):
            root = work / f"bookie-{index}"
            root.mkdir()
            process, _ = start_child(
                cli(
                    "bookie",
                    "--zk",
                    zk,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--http-port",
                    "0",
                    "--journal-dir",
                    str(root / "journal"),
                    "--ledger-dir",
                    str(root / "ledgers"),
                    "--ready-file",
                    str(root / "ready.json"),
                ),
                root / "bookie.log",
                root / "ready.json",
                env,
            )
            children.append(process)
        process, ready = start_child(
            cli(
                "gateway",
                "--zk",
                zk,
                "--port",
                "0",
                "--workers",
                str(args.workers),
                "--ready-file",
                str(work / "gateway.json"),
            ),
            work / "gateway.log",
            work / "gateway.json",
            env,
        )
        children.append(process)
        endpoint = f"http://127.0.0.1:{ready['port']}"
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path", "payload_signing_enabled": False},
                max_pool_connections=32,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        s3.create_bucket(Bucket="bench")
        size = args.object_mib * MIB
        body = os.urandom(size)
        results: list[tuple[str, str, str]] = []

        put_s = timed(lambda: s3.put_object(Bucket="bench", Key="large-0", Body=body))
        get_s = timed(lambda: s3.get_object(Bucket="bench", Key="large-0")["Body"].read())
        results.append(
            ("PUT 1 stream", f"{args.object_mib / put_s:.0f} MB/s", f"{args.object_mib} MiB object")
        )
        results.append(
            ("GET 1 stream", f"{args.object_mib / get_s:.0f} MB/s", f"{args.object_mib} MiB object")
        )

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            started = time.monotonic()
            list(
                pool.map(
                    lambda i: s3.put_object(Bucket="bench", Key=f"large-{i}", Body=body), range(4)
                )
            )
            put4 = time.monotonic() - started
            started = time.monotonic()
            list(
                pool.map(
                    lambda i: s3.get_object(Bucket="bench", Key=f"large-{i}")["Body"].read(),
                    range(4),
                )
            )
            get4 = time.monotonic() - started
        results.append(("PUT 4 streams", f"{4 * args.object_mib / put4:.0f} MB/s", "aggregate"))
        results.append(("GET 4 streams", f"{4 * args.object_mib / get4:.0f} MB/s", "aggregate"))

        small = os.urandom(4096)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            started = time.monotonic()
            list(
                pool.map(
                    lambda i: s3.put_object(Bucket="bench", Key=f"small/{i}", Body=small),
                    range(args.small_count),
                )
            )
            small_put = time.monotonic() - started
            started = time.monotonic()
            list(
                pool.map(
                    lambda i: s3.get_object(Bucket="bench", Key=f"small/{i}")["Body"].read(),
                    range(args.small_count),
                )
            )
            small_get = time.monotonic() - started
        results.append(
            (
                "PUT 4 KiB x16 clients",
                f"{args.small_count / small_put:.0f} objects/s",
                f"{args.small_count} objects",
            )
        )
        results.append(
            (
                "GET 4 KiB x16 clients",
                f"{args.small_count / small_get:.0f} objects/s",
                f"{args.small_count} objects",
            )
        )

        part = os.urandom(8 * MIB)
        started = time.monotonic()
        upload = s3.create_multipart_upload(Bucket="bench", Key="multipart")["UploadId"]
        parts = [
            {
                "PartNumber": n,
                "ETag": s3.upload_part(
                    Bucket="bench", Key="multipart", UploadId=upload, PartNumber=n, Body=part
                )["ETag"],
            }
            for n in range(1, 5)
        ]
        s3.complete_multipart_upload(
            Bucket="bench", Key="multipart", UploadId=upload, MultipartUpload={"Parts": parts}
        )
        results.append(
            (
                "Multipart 4 x 8 MiB",
                f"{32 / (time.monotonic() - started):.0f} MB/s",
                "parts sequential",
            )
        )

        limits = [
            ("MD5 one core", f"{md5_mb_s():.0f} MB/s", "ETag ceiling per stream"),
            ("Loopback TCP", f"{loopback_mb_s():.0f} MB/s", "one connection"),
            ("4 KiB write+fdatasync", f"{fsync_rate(work):.0f} /s", "bookie journal disk"),
        ]
        md5 = float(limits[0][1].split()[0])
        put1 = args.object_mib / put_s
        lines = [
            "# S3 gateway benchmark",
            "",
            f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
            f"({os.cpu_count()} CPUs, Python {platform.python_version()}), 3 bookies (E/WQ/AQ 3/2/2), "
            f"gateway workers={args.workers}, 1 MiB entries, boto3 client on the same machine. "
            "Client, gateway, bookies and ZooKeeper share the CPUs: on a small machine the "
            "small-object rates are bounded by the client's own CPU use.",
            "",
            "| measure | result | notes |",
            "|---|---|---|",
            *[f"| {a} | {b} | {c} |" for a, b, c in results],
            "",
            "Machine limits, same run:",
            "",
            "| limit | value | notes |",
            "|---|---|---|",
            *[f"| {a} | {b} | {c} |" for a, b, c in limits],
            "",
            f"PUT single stream / MD5 speed = {put1 / md5:.2f} (each PUT byte is hashed "
            "for the ETag, sent twice to bookies (WQ=2) and fsync'd in their journals).",
            "",
        ]
        return "\n".join(lines)
    finally:
        for child in reversed(children):
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        zookeeper.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--object-mib", type=int, default=64)
    parser.add_argument("--small-count", type=int, default=400)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "s3.md"))
    args = parser.parse_args()
    report = run(args)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
