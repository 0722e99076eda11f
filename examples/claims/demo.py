"""``make demo``: the claims pipeline with faults, end to end, on a real Kafka broker.

Starts a broker (unless ``HOPCHAIN_KAFKA_BOOTSTRAP`` names one) and a schema registry (unless
``HOPCHAIN_SCHEMA_REGISTRY_URL`` names one) side by side, the dead-letter service and the four
stage services as separate processes, feeds N documents (some of them as the partner's Avro,
whose schema changes halfway), waits until every one is accounted for, prints what happened,
and stops everything it started. Exits 1 if any document is unaccounted for (sent !=
delivered + dead-lettered + rejected), or if the records parked as ``unresolvable_schema`` are
not exactly those the partner wrote with its new schema.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from examples.claims.accounting import Accounting, account
from examples.claims.feeder import DEMO_RATES, FeedReport, feed
from examples.claims.pipeline import (
    AVRO_TOPICS,
    CLASSIFIED,
    DEAD_LETTER_TOPICS,
    PARTNER,
    PREFIX,
    TOPICS,
    registry,
)
from hopchain.exceptions import ReasonCode
from hopchain.formats.registry import REGISTRY_URL_SETTING
from hopchain.testing import LocalKafka, LocalRegistry, create_topics

console = Console(highlight=False, width=max(120, shutil.get_terminal_size().columns))
STAGES = ("intake", "extract", "classify", "file")
HTTP_OK = 200
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _services() -> Iterator[tuple[str, str]]:
    """The Kafka bootstrap and the schema registry's URL.

    Those the environment names, else a local broker and a local registry, started side by
    side: the two JVMs are ready in little more time than the slower of them alone.
    """
    bootstrap = os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP", "")
    url = os.environ.get(REGISTRY_URL_SETTING, "")
    for name, external in (("Kafka broker", bootstrap), ("schema registry", url)):
        if external:
            console.print(
                f"using the {name} at {external}; topics and subjects are prefixed {PREFIX!r}"
            )
    kafka = None if bootstrap else LocalKafka(kafka_home=REPO / "deploy" / "kafka")
    schemas = None if url else LocalRegistry()
    named = {"the local Apache Kafka broker": kafka, "the local schema registry": schemas}
    local = {what: service for what, service in named.items() if service is not None}
    started: set[str] = set()
    try:
        if local:
            console.print(f"starting {' and '.join(local)} ...")
            with ThreadPoolExecutor(max_workers=len(local)) as pool:
                starts = {what: pool.submit(service.start) for what, service in local.items()}
            started = {what for what, start in starts.items() if start.exception() is None}
            for start in starts.values():
                start.result()  # the first failure, raised
        if kafka is not None:
            bootstrap = kafka.bootstrap
            console.print(
                f"Kafka {kafka.version} ready at {bootstrap} in {kafka.startup_seconds:.1f} s"
            )
        if schemas is not None:
            url = schemas.url
            console.print(
                f"Apicurio Registry {schemas.version} ready at {url} in "
                f"{schemas.startup_seconds:.1f} s"
            )
        yield bootstrap, url
    finally:
        for what, service in local.items():
            service.stop()
            if what in started:
                console.print(f"stopped {what}")


class Processes:
    """Child processes, stopped (TERM, then KILL) however the demo ends."""

    def __init__(self, run_dir: Path, env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.env = env
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
            env={**os.environ, "PYTHONPATH": str(REPO), **self.env, **(env or {})},
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
    table.add_row("  of which came in as the partner's Avro", str(len(result.from_partner)))
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


def _schema_change(report: FeedReport, result: Accounting) -> bool:
    """Print what became of the partner's claims; whether it is exactly what was due.

    Those written with schema v1 are clean claims: intake adopts them and they are filed.
    Those written with v2 (which renames a field the reader schema needs) are parked as
    ``unresolvable_schema``, all of them and nothing else.
    """
    contract = registry.get(PARTNER)
    written_v1, written_v2 = report.scenarios["partner"], report.scenarios["partner_v2"]
    parked = result.rejected_from[(PARTNER, ReasonCode.UNRESOLVABLE_SCHEMA.value)]
    filed = len(result.from_partner)
    exact = (parked, filed) == (written_v2, written_v1)
    console.print(
        f"schema change mid-run: of the partner's Avro claims, {written_v1} written with schema "
        f"v1 and {filed} filed (adopted by intake); {written_v2} written with v2 and {parked} "
        f"parked as unresolvable_schema in {contract.dead_letter_topic} for "
        f"{contract.owner} ({'exactly those' if exact else 'NOT exactly those'})",
        style="green" if exact else "bold red",
    )
    return exact


def _hopchain(*args: str, env: dict[str, str]) -> None:
    console.rule(f"hopchain {' '.join(args)}")
    subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "-m", "hopchain.cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160", **env},
        check=False,
    )


def _start_services(processes: Processes, bootstrap: str, metrics_port: int) -> None:
    """The dead-letter service and the stage services, each its own process."""
    run_dir = processes.run_dir
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


async def _run(args: argparse.Namespace, bootstrap: str, url: str, run_dir: Path) -> int:
    await create_topics(bootstrap, *TOPICS, *AVRO_TOPICS, partitions=2, exist_ok=True)
    await create_topics(
        bootstrap,
        *DEAD_LETTER_TOPICS,
        configs={"retention.ms": "-1", "retention.bytes": "-1"},
        exist_ok=True,
    )
    env = {REGISTRY_URL_SETTING: url}
    processes = Processes(run_dir, env)
    metrics_port = _free_port()
    exit_code = 0
    try:
        _start_services(processes, bootstrap, metrics_port)
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
                rates=DEMO_RATES,
                seed=args.seed,
                on_sent=lambda: progress.advance(sending),
                registry_url=url,
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
        exact = _schema_change(report, result)
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
        _hopchain("policy", "show", "examples.claims.pipeline:pipeline", env=env)
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
                env=env,
            )
        if not (agree and exact):
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
        with _services() as (bootstrap, url):
            return asyncio.run(_run(args, bootstrap, url, run_dir))
    finally:
        if args.keep:
            console.print(f"logs and state kept in {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def run(argv: list[str] | None = None) -> int:
    """Entry point: on a shared broker or registry, re-run with a prefix unique to this run.

    The prefix (of topics, and so of subjects) must be set before the pipeline module is
    imported, by this process and the stage processes, so the demo re-executes itself with it
    in the environment.
    """
    shared = os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP") or os.environ.get(REGISTRY_URL_SETTING)
    if shared and "CLAIMS_TOPIC_PREFIX" not in os.environ:
        prefix = f"demo-{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}."
        env = {**os.environ, "CLAIMS_TOPIC_PREFIX": prefix, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "examples.claims.demo", *(argv or sys.argv[1:])]
        return subprocess.call(command, cwd=REPO, env=env)  # noqa: S603 - ourselves
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
