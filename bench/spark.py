"""Throughput of the Spark data source (``format("disque")``), with the CPU it costs.

Every scenario runs against fresh ``disquette-server`` processes on loopback ports,
with one local SparkSession (``local[2]``, as in the tests), after a warm-up that
writes 300,000 rows and reads them back (the first Python data source job starts the
Python workers, and the JVM compiles the Arrow paths over the first rows).

By default, **the comparison issue 37 asks for**, all options at their defaults:

* **compare, 1 node** (``compare1``): ``--rows`` jobs written with
  ``df.write.format("disque")`` (only ``nodes`` and ``queue`` given), then consumed
  by ``spark.readStream.format("disque")`` (only ``nodes`` and ``queues``) with
  ``Trigger.AvailableNow`` into Spark's ``noop`` sink, every job acknowledged; the
  same cluster and session for both, ``--rounds`` times on fresh nodes. It prints
  both rates, the source's share of the sink's, and the targets: the source at
  100,000 jobs/s or more and at 0.6x the sink or more;
* **compare, 3 nodes** (``compare3``): the same on a three-node cluster (the sink's
  default there is REPLICATE 3, synchronous).

``--only`` runs others instead (repeatable):

* **sink, 1 node, REPLICATE 1** (``sink1``): ``spark.range(N)`` as ``body`` strings;
* **source, 1 node** (``source1``, implies ``sink1``): the jobs the sink left,
  consumed end to end as above (by the executors, or by the driver with
  ``--source-mode driver``); it also prints the CPU and peak memory of the
  driver-side Python process (PySpark's ``python_streaming_source_runner``, where
  the source's driver side runs);
* **sink, 3 nodes, REPLICATE 3** (``sink3``): every job synchronously replicated to
  all three nodes, so the sink spreads the jobs over many connections;
  ``--rows-r3`` rows, fewer by default; prints the most client connections a node
  had (sampled with INFO clients);
* **source, 3 nodes** (``source3``): ``--rows`` jobs written with REPLICATE 1 over
  three nodes, consumed the same way; prints the partitions each micro-batch
  planned on each node (from the checkpoint's offsets);
* **driver memory** (``srcmem``): the one-node source at ``maxJobsPerTrigger``
  10,000 then 100,000, the driver process's peak RSS;
* **dedup on/off** (``dedup1`` / ``dedup3``): the one-node (or three-node) sink
  with ``dedup=false`` then ``dedup=true``, each on fresh nodes, ``--rounds``
  times; prints every run and the ratio of the best runs' throughputs.

For each it prints jobs/s and CPU seconds per million jobs: the servers' (from
``/proc``) and Spark's (this process and every descendant that is not a
server: the JVM and the Python workers). A figure near 1 core-second per
second of wall time means that process was the bottleneck.

    python bench/spark.py [--rows 1000000] [--rows-r3 200000] [--rounds 2] [--json FILE]
        [--only compare1|compare3|sink1|source1|sink3|source3|srcmem|dedup1|dedup3 ...]
        [--sink-option KEY=VALUE ...] [--source-option KEY=VALUE ...]
        [--source-mode auto|driver]

``--sink-option`` and ``--source-option`` add options to every sink and source
(e.g. ``--sink-option connectionsPerNode=1`` for the three-node sink on one
connection per node and task, ``--source-option maxJobsPerTrigger=100000``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import _common as cm
from client import Cluster
from disquette import Client
from disquette.spark.local import local_session

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int, exclude: set[int]) -> float:
    """CPU seconds of ``root`` and its descendants (reaped children included), minus ``exclude``."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        stats[pid] = fields
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid not in stats:
            continue
        fields = stats[pid]
        total += sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
        todo += children.get(pid, [])
    return total


@dataclass
class Result:
    scenario: str
    jobs: int
    seconds: float
    server_cpu: float
    spark_cpu: float

    def row(self) -> str:
        per = 1e6 / self.jobs
        return (
            f"{self.scenario:<28} {self.jobs:>9,} {self.jobs / self.seconds:>10,.0f} "
            f"{self.server_cpu / self.seconds:>8.2f} {self.spark_cpu / self.seconds:>8.2f} "
            f"{self.server_cpu * per:>10.1f} {self.spark_cpu * per:>10.1f}"
        )


HEADER = (
    f"{'scenario':<28} {'jobs':>9} {'jobs/s':>10} {'server':>8} {'spark':>8} "
    f"{'server s/M':>10} {'spark s/M':>10}\n"
    f"{'':<28} {'':>9} {'':>10} {'cores':>8} {'cores':>8} {'(CPU s per 1M jobs)':>21}"
)


def measure(name: str, cluster: Cluster, jobs: int, run: Callable[[], None]) -> Result:
    servers = {s.pid for s in cluster.servers}
    s0, k0, t0 = cluster.cpu(), tree_cpu(os.getpid(), servers), time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    result = Result(
        name,
        jobs,
        seconds,
        server_cpu=cluster.cpu() - s0,
        spark_cpu=tree_cpu(os.getpid(), servers) - k0,
    )
    print(result.row(), flush=True)
    return result


WARMUP_ROWS = 300_000
DEFAULT_SCENARIOS = ("compare1", "compare3")
SCENARIOS = (*DEFAULT_SCENARIOS, "sink1", "source1", "sink3", "source3")
EXTRA_SCENARIOS = ("srcmem", "dedup1", "dedup3")
RUNNER = "python_streaming_source_runner"


class DriverProbe(cm.Sampler):
    """CPU seconds and peak RSS of the source's driver-side Python process (the
    JVM's ``python_streaming_source_runner`` child), sampled every 50 ms."""

    def __init__(self) -> None:
        super().__init__("driver-probe")
        self.cpu = 0.0
        self.peak_rss = 0  # bytes

    def _find(self) -> int | None:
        """The runner among this process's grandchildren (the JVM's children)."""
        parents: dict[int, int] = {}
        runners = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if RUNNER.encode() in f.read():
                            runners.append(int(entry))
                except OSError:
                    continue
        mine = [pid for pid in runners if parents.get(parents.get(pid, 0)) == os.getpid()]
        return mine[0] if mine else None

    def _sample(self) -> None:
        pid = None
        while not self._stop.wait(0.05):
            pid = pid or self._find()
            if pid is None:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/status") as f:
                    hwm = [line for line in f if line.startswith("VmHWM:")]
            except OSError:
                pid = None
                continue
            self.cpu = sum(int(x) for x in fields[11:13]) / TICK
            if hwm:  # (none once it exited)
                self.peak_rss = max(self.peak_rss, int(hwm[0].split()[1]) * 1024)


def consume(spark, cluster: Cluster, checkpoint: str, options: dict[str, str]) -> None:
    """Every job of ``bench`` read by the stream source (AvailableNow) into ``noop``,
    with ``options`` beyond ``nodes`` and ``queues``."""
    stream = spark.readStream.format("disque").option("nodes", ",".join(cluster.seeds))
    stream = stream.option("queues", "bench").options(**options)
    query = (
        stream.load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    with Client(cluster.seeds) as client:
        left = sum(client.on_node(s).qlen("bench") for s in cluster.seeds)
    assert left == 0, left


def measure_source(
    spark, name: str, cluster: Cluster, rows: int, options: dict[str, str]
) -> tuple[Result, DriverProbe, str]:
    """The source consuming ``rows`` jobs, with its driver process probed."""
    checkpoint = tempfile.mkdtemp(prefix="bench-cp-")
    with DriverProbe() as probe:
        result = measure(name, cluster, rows, lambda: consume(spark, cluster, checkpoint, options))
    given = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(
        f"  driver process: {probe.cpu:.2f} CPU s ({probe.cpu * 1e6 / rows:.2f} s per 1M jobs), "
        f"peak RSS {probe.peak_rss / 2**20:.0f} MiB ({given}); "
        f"{batches(checkpoint)} micro-batches"
    )
    return result, probe, checkpoint


def batches(checkpoint: str) -> int:
    """The micro-batches a query's checkpoint has offsets for."""
    return sum(1 for path in (Path(checkpoint) / "offsets").iterdir() if path.name.isdigit())


def planned_split(checkpoint: str) -> None:
    """Print the partitions the planned batches had on each node, and their jobs."""
    per_node: dict[str, list[int]] = {}
    folder = Path(checkpoint) / "offsets"
    for path in sorted(folder.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        if path.name.isdigit():
            offset = json.loads(path.read_text().splitlines()[-1])
            for node, counts in offset.get("parts", {}).items():
                per_node.setdefault(node, []).extend(counts)
    for node, counts in per_node.items():
        print(
            f"  {node}: {len(counts)} partitions, {sum(counts):,} jobs planned, "
            f"largest {max(counts):,}"
        )


class ClientCount(cm.Sampler):
    """The most client connections any node of ``cluster`` had, sampled every 50 ms."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__("client-count")
        self.cluster = cluster
        self.peak = 0

    def _sample(self) -> None:
        with Client(self.cluster.seeds) as client:
            views = [client.on_node(seed) for seed in self.cluster.seeds]
            while not self._stop.wait(0.05):
                counts = [v.info("clients")["connected_clients"] - 1 for v in views]
                self.peak = max(self.peak, *counts)


def key_values(pairs: list[str], flag: str) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} wants KEY=VALUE, not {pair!r}")
        options[key] = value
    return options


def write_jobs(
    spark, cluster: Cluster, name: str, rows: int, replicate: int | None, options: dict[str, str]
) -> Result:
    """``rows`` bodies written into the queue ``bench`` of ``cluster`` (``replicate``
    None: the sink's default), measured and checked."""
    df = spark.range(rows).selectExpr("concat('job-', id) AS body")
    write = df.write.format("disque").mode("append").option("nodes", ",".join(cluster.seeds))
    write = write.option("queue", "bench").options(**options)
    if replicate is not None:
        write = write.option("replicate", replicate)
    result = measure(name, cluster, rows, write.save)
    with Client(cluster.seeds) as client:
        queued = sum(client.on_node(s).qlen("bench") for s in cluster.seeds)
    assert queued == rows, queued
    return result


def compare_dedup(spark, size: int, rows: int, extra: dict[str, str], rounds: int) -> list[Result]:
    """The sink with dedup off then on, ``rounds`` times, each on fresh nodes."""
    runs: dict[str, list[Result]] = {"false": [], "true": []}
    for _ in range(rounds):
        for dedup in runs:
            with Cluster(size) as cluster:
                name = f"sink {size} node(s) R{size} dedup={dedup}"
                options = {**extra, "dedup": dedup}
                runs[dedup].append(write_jobs(spark, cluster, name, rows, size, options))
    off, on = (max(r.jobs / r.seconds for r in runs[d]) for d in ("false", "true"))
    best = f"{on:,.0f} / {off:,.0f} jobs/s = {on / off:.1%}"
    print(f"  dedup on / off, best of {rounds} each: {best}")
    return runs["false"] + runs["true"]


#: Issue 37's targets for the source against the sink, all options at their defaults.
SOURCE_TARGET = 100_000
SHARE_TARGET = 0.6


def compare(
    spark, size: int, rows: int, rounds: int, sink: dict[str, str], source: dict[str, str]
) -> tuple[list[Result], str]:
    """The sink then the source, all defaults (but ``sink`` and ``source``), on the same
    fresh cluster and session, ``rounds`` times; their rates and the verdict."""
    nodes = f"{size} node{'s' if size > 1 else ''}"
    results: list[Result] = []
    shares: list[float] = []
    rates: list[float] = []
    for r in range(rounds):
        with Cluster(size) as cluster:
            written = write_jobs(spark, cluster, f"sink, {nodes}, defaults", rows, None, sink)
            name = f"source, {nodes}, defaults"
            read = measure_source(spark, name, cluster, rows, source)[0]
        rate = read.jobs / read.seconds
        share = rate / (written.jobs / written.seconds)
        print(f"  round {r + 1}: the source read {rate:,.0f} jobs/s, {share:.2f}x the sink's rate")
        results += [written, read]
        shares.append(share)
        rates.append(rate)
    share, rate = statistics.median(shares), statistics.median(rates)
    met = "met" if rate >= SOURCE_TARGET and share >= SHARE_TARGET else "NOT MET"
    verdict = (
        f"{nodes}: source {rate:,.0f} jobs/s (>= {SOURCE_TARGET:,}), {share:.2f}x the sink "
        f"(>= {SHARE_TARGET}), medians of {rounds} round(s): {met}"
    )
    return results, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-r3", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2, help="compare*, dedup*: runs of each")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--only", action="append", choices=SCENARIOS + EXTRA_SCENARIOS, help="repeatable"
    )
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--source-mode", choices=("auto", "driver"), default="auto")
    args = parser.parse_args()
    only = set(args.only or DEFAULT_SCENARIOS)
    if "source1" in only:
        only.add("sink1")
    extra = key_values(args.sink_option, "--sink-option")
    source = key_values(args.source_option, "--source-option")
    if args.source_mode != "auto":
        source["readMode"] = args.source_mode

    print(cm.describe_background(cm.background_load()))
    spark = local_session("disquette-bench")
    results = []
    verdicts = []
    try:
        # Warm-up: the first Python data source job starts the Python workers, and
        # the JVM compiles the Arrow paths over the first rows: without this, the first
        # 1M-row sink of a session was the slowest of the session in most runs, and the
        # first source of a session spent more of its CPU compiling than reading.
        with Cluster(1) as warm:
            write_jobs(spark, warm, "(warm-up sink)", WARMUP_ROWS, None, {})
            measure_source(spark, "(warm-up source)", warm, WARMUP_ROWS, {})
        print(HEADER)
        for size, scenario in ((1, "compare1"), (3, "compare3")):
            if scenario in only:
                runs, verdict = compare(spark, size, args.rows, args.rounds, extra, source)
                results += runs
                verdicts.append(verdict)
        if "sink1" in only:
            with Cluster(1) as one:
                name = "sink 1 node REPLICATE 1"
                results.append(write_jobs(spark, one, name, args.rows, 1, extra))

                if "source1" in only:
                    name = f"source 1 node ({args.source_mode})"
                    results.append(measure_source(spark, name, one, args.rows, source)[0])
        if "sink3" in only:
            with Cluster(3) as three, ClientCount(three) as clients:
                name = "sink 3 nodes REPLICATE 3"
                results.append(write_jobs(spark, three, name, args.rows_r3, 3, extra))
            print(f"  (at most {clients.peak} sink connections on a node during the write)")
        if "source3" in only:
            with Cluster(3) as three:
                write_jobs(spark, three, "(sink 3 nodes REPLICATE 1)", args.rows, 1, extra)
                name = f"source 3 nodes ({args.source_mode})"
                result, _, checkpoint = measure_source(spark, name, three, args.rows, source)
                results.append(result)
                planned_split(checkpoint)
        if "srcmem" in only:
            for max_jobs in (10_000, 100_000):
                with Cluster(1) as one:
                    write_jobs(spark, one, "(sink 1 node REPLICATE 1)", args.rows, 1, extra)
                    name = f"source 1 node max {max_jobs:,}"
                    limited = {**source, "maxJobsPerTrigger": str(max_jobs)}
                    results.append(measure_source(spark, name, one, args.rows, limited)[0])
        if "dedup1" in only:
            results += compare_dedup(spark, 1, args.rows, extra, args.rounds)
        if "dedup3" in only:
            results += compare_dedup(spark, 3, args.rows_r3, extra, args.rounds)
    finally:
        spark.stop()
    if verdicts:
        print("\ntargets (issue 37: the source, all defaults, against the sink in the same run)")
        for verdict in verdicts:
            print(f"  {verdict}")
    print(f"command: {cm.command_line()}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    sys.exit(main())
