"""``make demo``: the claims pipeline with faults, end to end, on a real Kafka broker.

Starts a broker (unless ``HOPCHAIN_KAFKA_BOOTSTRAP`` names one), the dead-letter service and
the three stage services as separate processes, feeds N documents, waits until every one is
accounted for, prints what happened, and stops everything it started. Exits 1 if any
document is unaccounted for (sent != delivered + dead-lettered + rejected).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from examples.claims.accounting import Accounting, account
from examples.claims.feeder import FeedReport, feed
from examples.claims.pipeline import CLASSIFIED, DEAD_LETTER_TOPICS, PREFIX, TOPICS
from hopchain.testing import LocalKafka, create_topics

console = Console(highlight=False, width=max(120, shutil.get_terminal_size().columns))
STAGES = ("extract", "classify", "file")
HTTP_OK = 200
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _broker() -> Iterator[str]:
    external = os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP")
    if external:
        console.print(
            f"using the Kafka broker at {external} (HOPCHAIN_KAFKA_BOOTSTRAP); topics are "
            f"prefixed {PREFIX!r}"
        )
        yield external
        return
    console.print("starting a local Apache Kafka broker ...")
    kafka = LocalKafka(kafka_home=REPO / "deploy" / "kafka")
    kafka.start()
    console.print(
        f"Kafka {kafka.version} ready at {kafka.bootstrap} in {kafka.startup_seconds:.1f} s"
    )
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()
        console.print("stopped the local Kafka broker")


class Processes:
    """Child processes, stopped (TERM, then KILL) however the demo ends."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.run_dir / f"{name}.log").open("wb")
        child = subprocess.Popen(  # noqa: S603 - our own interpreter and modules
            [sys.executable, *args],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        )
        self.children[name] = child
        return child

    def stop(self) -> dict[str, int | None]:
        for child in self.children.values():
            if child.poll() is None:
                child.terminate()
        codes: dict[str, int | None] = {}
        for name, child in self.children.items():
            try:
                codes[name] = child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                codes[name] = child.wait()
        return codes

    def dead(self) -> dict[str, int]:
        return {n: c.returncode for n, c in self.children.items() if c.poll() is not None}


def _depths(exposition: str) -> dict[tuple[str, str, str], int]:
    """``hopchain_dlq_depth`` samples by (owner, source topic, error type)."""
    depths: dict[tuple[str, str, str], int] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "hopchain_dlq_depth" and sample.value:
                labels = sample.labels
                key = (labels["owner"], labels["source_topic"], labels["error_type"])
                depths[key] = int(sample.value)
    return depths


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def _wait_ready(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp,
        ):
            if resp.status == HTTP_OK:
                return
        time.sleep(0.5)
    msg = f"the dead-letter service on port {port} did not become ready in {timeout:.0f} s"
    raise RuntimeError(msg)


def _summary(report: FeedReport, result: Accounting) -> Table:
    table = Table(title=f"claims run {report.run_id}: {report.sent} documents")
    table.add_column("outcome")
    table.add_column("count", justify="right")
    table.add_row("sent", str(report.sent))
    table.add_row("delivered (filed)", str(len(result.delivered)))
    table.add_row("  of which recovered by retry", str(len(result.recovered)))
    table.add_row("  of which degraded (category unknown)", str(len(result.degraded)))
    for (error_type, owner), count in sorted(result.dead_lettered.items()):
        table.add_row(f"dead-lettered: {error_type} -> {owner}", str(count))
    for (reason, owner), count in sorted(result.rejected.items()):
        table.add_row(f"rejected as malformed: {reason} -> {owner}", str(count))
    table.add_row("duplicates delivered", str(result.duplicates))
    unaccounted = report.sent - result.accounted
    table.add_row("unaccounted", str(unaccounted), style="bold red" if unaccounted else "green")
    return table


def _scenario_table(report: FeedReport) -> Table:
    table = Table(title="what the feeder sent, by scenario")
    table.add_column("scenario")
    table.add_column("count", justify="right")
    for name, count in sorted(report.scenarios.items()):
        table.add_row(name, str(count))
    return table


def _hopchain(*args: str) -> None:
    console.rule(f"hopchain {' '.join(args)}")
    subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "-m", "hopchain.cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"},
        check=False,
    )


async def _run(args: argparse.Namespace, bootstrap: str, run_dir: Path) -> int:
    await create_topics(bootstrap, *TOPICS, partitions=2, exist_ok=True)
    await create_topics(
        bootstrap,
        *DEAD_LETTER_TOPICS,
        configs={"retention.ms": "-1", "retention.bytes": "-1"},
        exist_ok=True,
    )
    processes = Processes(run_dir)
    metrics_port = _free_port()
    exit_code = 0
    try:
        processes.start(
            "dlq-service",
            "-m",
            "hopchain.cli",
            "dlq",
            "serve",
            "--contracts",
            "examples.claims.pipeline:registry",
            "--bootstrap",
            bootstrap,
            "--port",
            str(metrics_port),
            # The index beside the run's logs, not in the user's data folder.
            env={"HOPCHAIN_DLQ_INDEX_PATH": str(run_dir / "dlq-index.sqlite")},
        )
        for stage in STAGES:
            processes.start(
                stage,
                "-m",
                "examples.claims.stages",
                stage,
                "--bootstrap",
                bootstrap,
                "--run-dir",
                str(run_dir),
            )
        run_id = f"claims-{time.strftime('%Y%m%dT%H%M%S')}"
        started = time.monotonic()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            sending = progress.add_task("sending documents", total=args.documents)
            report = await feed(
                bootstrap,
                args.documents,
                run_id=run_id,
                seed=args.seed,
                on_sent=lambda: progress.advance(sending),
            )
            settled = progress.add_task("accounted for", total=report.sent)
            deadline = time.monotonic() + args.timeout
            result = await account(bootstrap)
            while result.accounted < report.sent and time.monotonic() < deadline:
                if dead := processes.dead():
                    console.print(f"[red]a service exited early: {dead}[/]")
                    break
                progress.update(settled, completed=result.accounted)
                await asyncio.sleep(1.0)
                result = await account(bootstrap)
            progress.update(settled, completed=result.accounted)
        elapsed = time.monotonic() - started
        console.print(_scenario_table(report))
        console.print(_summary(report, result))
        console.print(f"pipeline time: {elapsed:.1f} s for {report.sent} documents")
        _wait_ready(metrics_port)
        console.rule("dead-letter metrics, as Prometheus scrapes them")
        scraped = _scrape(metrics_port)
        for line in scraped.splitlines():
            if line.startswith(("hopchain_dlq_depth", "hopchain_dlq_oldest_age_seconds")):
                print(line)  # verbatim, as a scraper reads it
        depth = _depths(scraped)
        agree = depth == dict(result.parked_by_label)
        console.print(
            f"dead-letter service depth {'matches' if agree else 'DOES NOT match'} the "
            f"dead-letter topics: {sum(depth.values())} in the service, "
            f"{sum(result.parked_by_label.values())} in the topics",
            style="green" if agree else "bold red",
        )
        _hopchain("policy", "show", "examples.claims.pipeline:pipeline")
        # Trace a claim that got furthest before it was parked: its whole path shows.
        traced = result.parked_envelopes.get(f"{CLASSIFIED}.dlq") or next(
            iter(result.parked_envelopes.values()), None
        )
        if traced is not None:
            # Every topic the contracts name, dead-letter topics included.
            _hopchain(
                "trace",
                traced,
                "--bootstrap",
                bootstrap,
                "--contracts",
                "examples.claims.pipeline:registry",
            )
        if not agree:
            exit_code = 1
        if result.accounted != report.sent:
            console.print(
                f"[bold red]{report.sent - result.accounted} document(s) unaccounted for[/]"
            )
            exit_code = 1
    finally:
        codes = processes.stop()
        console.print(f"stopped the services: {codes}")
    return exit_code


def main(argv: list[str] | None = None) -> int:
    """Run the demo (in a fresh interpreter when a broker is shared: see ``run``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=1000, help="documents to feed")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic data")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to settle")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="hopchain-demo-"))
    try:
        with _broker() as bootstrap:
            return asyncio.run(_run(args, bootstrap, run_dir))
    finally:
        if args.keep:
            console.print(f"logs and state kept in {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def run(argv: list[str] | None = None) -> int:
    """Entry point: on a shared broker, re-run with a topic prefix unique to this run.

    The prefix must be set before the pipeline module is imported, by this process and the
    stage processes, so the demo re-executes itself with it in the environment.
    """
    if os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP") and "CLAIMS_TOPIC_PREFIX" not in os.environ:
        prefix = f"demo-{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}."
        env = {**os.environ, "CLAIMS_TOPIC_PREFIX": prefix, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "examples.claims.demo", *(argv or sys.argv[1:])]
        return subprocess.call(command, cwd=REPO, env=env)  # noqa: S603 - ourselves
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
