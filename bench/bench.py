#!/usr/bin/env python3
"""kmirror benchmark driver: kmirror fetchers vs MirrorMaker 2 vs the limit of the test bed.

Run through `bench/run.sh` (`make bench`, `make bench-fetcher`), which brings the test bed up,
builds the release fetcher and exports the bed's environment (`e2e/testbed.sh env`).

    bench.py [full|fetcher] [--bytes 2GB] [--partitions 6] [--runs 3] ...

Every option has an environment variable (BENCH_BYTES, BENCH_PARTITIONS, ...); see --help and
bench/README.md for what is measured and how.
"""

import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the repository
import kproto  # noqa: E402
import payloads  # noqa: E402
from procstat import TICK, Proc, Sampler, read_stat  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1e6
GB = 1e9


# --------------------------------------------------------------------------------------------
# settings


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)b?\s*", str(text), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 200MB, 2GB, 1GiB)")
    power = " kmgt".index(m.group(2).lower() or " ")
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** power)


def env(name, default):
    return os.environ.get(name, default)


def settings(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", nargs="?", default=env("BENCH_MODE", "full"), choices=["full", "fetcher"],
                   help="full: kmirror vs MM2 vs limit; fetcher: the kmirror fetcher alone")
    p.add_argument("--bytes", type=parse_size, default=None,
                   help="uncompressed payload bytes to preload (BENCH_BYTES; full 2GB, fetcher 1GB)")
    p.add_argument("--partitions", type=int, default=int(env("BENCH_PARTITIONS", "6")),
                   help="partitions of the source topic (BENCH_PARTITIONS)")
    p.add_argument("--record-size", type=int, default=int(env("BENCH_RECORD_SIZE", "1024")),
                   help="mean payload size in bytes (BENCH_RECORD_SIZE)")
    p.add_argument("--pool", type=int, default=int(env("BENCH_POOL", "40000")),
                   help="distinct payloads in the pool ProducerPerformance picks from (BENCH_POOL)")
    p.add_argument("--runs", type=int, default=None,
                   help="runs per measurement, alternating kmirror/MM2 (BENCH_RUNS; full 3, fetcher 3)")
    p.add_argument("--phases", default=env("BENCH_PHASES", "limits,catchup,failover,latency"),
                   help="comma list of limits,catchup,failover,latency (BENCH_PHASES; full mode)")
    p.add_argument("--mirrors", default=env("BENCH_MIRRORS", "kmirror,kmirror-pooled,kmirror-batch,mm2"),
                   help="comma list of kmirror (a process per --partitions-per-fetcher), kmirror-pooled "
                        "(one process for every partition), kmirror-batch (one process, the batch "
                        "engine) and mm2 (BENCH_MIRRORS; full mode)")
    p.add_argument("--latency-rate", type=parse_size, default=parse_size(env("BENCH_LAT_RATE", "5MB")),
                   help="steady-state produce rate per second (BENCH_LAT_RATE)")
    p.add_argument("--latency-seconds", type=float, default=float(env("BENCH_LAT_SECONDS", "60")),
                   help="steady-state measurement window (BENCH_LAT_SECONDS)")
    p.add_argument("--latency-warmup", type=float, default=float(env("BENCH_LAT_WARMUP", "10")),
                   help="seconds after the first mirrored record before the window (BENCH_LAT_WARMUP)")
    p.add_argument("--partitions-per-fetcher", type=int, default=int(env("BENCH_PARTITIONS_PER_FETCHER", "1")),
                   help="partitions per kmirror fetcher process (BENCH_PARTITIONS_PER_FETCHER)")
    p.add_argument("--limit-producers", type=int, default=int(env("BENCH_LIMIT_PRODUCERS", "3")),
                   help="parallel ProducerPerformance processes for the destination limit (BENCH_LIMIT_PRODUCERS)")
    p.add_argument("--retries", type=int, default=int(env("BENCH_RETRIES", "2")),
                   help="repeat a run disturbed by a broker restart up to this often (BENCH_RETRIES)")
    p.add_argument("--mm2-heap", default=env("BENCH_MM2_HEAP", "2g"),
                   help="MM2 JVM -Xmx, as connect-mirror-maker.sh ships it (BENCH_MM2_HEAP)")
    p.add_argument("--mm2-extra", default=env("BENCH_MM2_EXTRA", ""),
                   help="extra mm2.properties lines, ';'-separated (BENCH_MM2_EXTRA)")
    p.add_argument("--timeout", type=float, default=float(env("BENCH_TIMEOUT", "900")),
                   help="catch-up timeout in seconds (BENCH_TIMEOUT)")
    p.add_argument("--fetcher-bin", default=env("BENCH_FETCHER_BIN", ""),
                   help="kmirror-fetcher binary (BENCH_FETCHER_BIN; default: the release build)")
    p.add_argument("--results", default=env("BENCH_RESULTS", str(HERE / "results")),
                   help="directory for the JSON results (BENCH_RESULTS)")
    p.add_argument("--workdir", default=env("BENCH_WORKDIR", "/tmp/kmirror-bench"),
                   help="scratch directory for payloads, configs and logs (BENCH_WORKDIR)")
    a = p.parse_args(argv)
    if a.bytes is None:
        a.bytes = parse_size(env("BENCH_BYTES", "2GB" if a.mode == "full" else "1GB"))
    if a.runs is None:
        a.runs = int(env("BENCH_RUNS", "3"))
    a.phases = [x for x in a.phases.split(",") if x]
    a.mirrors = [x for x in a.mirrors.split(",") if x]
    if a.mode == "fetcher":
        a.phases = ["catchup"]
        a.mirrors = ["kmirror"]
    bad = set(a.phases) - {"limits", "catchup", "failover", "latency"}
    if bad:
        p.error(f"unknown phases {sorted(bad)}")
    if set(a.mirrors) - set(MIRRORS):
        p.error(f"mirrors are {', '.join(MIRRORS)}")
    if not a.fetcher_bin:
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        a.fetcher_bin = str(target / "release" / "kmirror-fetcher")
    return a


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


# --------------------------------------------------------------------------------------------
# the test bed


class Bed:
    def __init__(self):
        e = os.environ
        missing = [k for k in ("KMIRROR_SOURCE_BOOTSTRAP", "KMIRROR_DEST_BOOTSTRAP", "KMIRROR_KAFKA_RUN",
                               "KMIRROR_KAFKA_CLASSPATH") if k not in e]
        if missing:
            sys.exit(f"missing {missing}: run through bench/run.sh or eval \"$(e2e/testbed.sh env)\"")
        self.source = e["KMIRROR_SOURCE_BOOTSTRAP"]
        self.dest = e["KMIRROR_DEST_BOOTSTRAP"]
        self.admin = (e.get("KMIRROR_ADMIN_USER", "admin"), e.get("KMIRROR_ADMIN_PASSWORD", "admin-secret"))
        self.mirror_user = (e.get("KMIRROR_MIRROR_USER", "mirror"), e.get("KMIRROR_MIRROR_PASSWORD", "mirror-secret"))
        self.kafka_run = e["KMIRROR_KAFKA_RUN"]
        self.classpath = e["KMIRROR_KAFKA_CLASSPATH"]
        self.src = kproto.Client(self.source)
        self.dst = kproto.Client(self.dest, *self.admin)

    def jaas(self, user):
        return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'username="{user[0]}" password="{user[1]}";')

    def dest_java_props(self, user):
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": self.jaas(user)}


class Topics:
    """Every topic and group the benchmark creates, so that all of them are deleted."""

    def __init__(self, bed):
        self.bed = bed
        self.created = []  # (side, name)
        self.groups = []  # (side, name)

    def client(self, side):
        return self.bed.src if side == "src" else self.bed.dst

    def create(self, side, name, partitions, configs=None, fresh=False):
        c = self.client(side)
        if fresh:
            self.delete(side, name)
        deadline = time.monotonic() + 120
        while not c.create_topic(name, partitions, configs):
            # Still being deleted (or a leftover): delete and retry.
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} on {side} could not be created fresh")
            c.delete_topics([name])
            time.sleep(0.5)
        self.created.append((side, name))
        c.wait_ready(name, range(partitions))

    def delete(self, side, name):
        c = self.client(side)
        c.delete_topics([name])
        deadline = time.monotonic() + 60
        while name in c.topics([name]) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.created = [t for t in self.created if t != (side, name)]

    def group(self, side, name):
        self.groups.append((side, name))
        return name

    def cleanup(self):
        for side, name in list(self.created):
            try:
                self.delete(side, name)
            except Exception as e:  # noqa: BLE001 - best effort, reported
                log(f"warning: could not delete topic {name} on {side}: {e}")
        for side, name in self.groups:
            try:
                self.client(side).delete_groups([name])
            except Exception as e:  # noqa: BLE001
                log(f"warning: could not delete group {name} on {side}: {e}")
        self.groups = []


def kafka_tool(bed, cls, args, log_path, heap="1g"):
    env = dict(os.environ, KAFKA_TOOL_HEAP=heap)
    return Proc([bed.kafka_run, cls, *args], log_path, env=env)


def props_file(path, props):
    with open(path, "w") as f:
        for k, v in props.items():
            f.write(f"{k}={v}\n")
    return str(path)


def disk_free_gb(path="/tmp"):
    return shutil.disk_usage(path).free / GB


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Disturbed(RuntimeError):
    """A broker of the test bed restarted during a run (another test suite restarts brokers)."""


class BedWatch:
    """What else happened on the machine during a run: broker restarts (PID and start time from
    the test bed's pid files — other test suites restart brokers), the brokers' CPU, and the
    machine's total busy CPU (/proc/stat), so that interference is visible in the raw results."""

    BROKERS = ("kafka-source", "kafka-destination")

    def __init__(self):
        self.t0 = time.monotonic()
        self.ids0 = self.broker_ids()
        self.busy0 = self.machine_busy()
        self.broker_cpu0 = self.broker_cpu(self.ids0)
        self.self0 = self.harness_cpu()

    @staticmethod
    def broker_ids():
        out = {}
        pids = Path(os.environ.get("KMIRROR_TESTBED_DIR", "/tmp/kmirror-testbed")) / "pids"
        for name in BedWatch.BROKERS:
            try:
                pid = int((pids / f"{name}.pid").read_text().strip())
                with open(f"/proc/{pid}/stat") as f:
                    start = f.read().rsplit(")", 1)[1].split()[19]
                out[name] = (pid, start)
            except (OSError, ValueError, IndexError):
                out[name] = None
        return out

    @staticmethod
    def broker_cpu(ids):
        total = 0.0
        for v in ids.values():
            if v:
                st = read_stat(f"/proc/{v[0]}/stat")
                if st:
                    total += st[2] / TICK
        return total

    @staticmethod
    def machine_busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / TICK  # minus idle and iowait

    @staticmethod
    def harness_cpu():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    def check(self):
        """Raises Disturbed as soon as a broker restarted since the watch began."""
        if self.broker_ids() != self.ids0:
            raise Disturbed("a broker of the test bed restarted during the run (another test?)")

    def done(self, procs=()):
        ids = self.broker_ids()
        seconds = time.monotonic() - self.t0
        busy = self.machine_busy() - self.busy0
        restarted = ids != self.ids0
        brokers = None if restarted else self.broker_cpu(ids) - self.broker_cpu0
        mirror = sum(p.cpu_seconds or 0 for p in procs)
        harness = self.harness_cpu() - self.self0
        out = {"seconds": seconds, "broker_restarted": restarted, "machine_busy_cpu_s": busy,
               "machine_busy_pct_of_all_cores": 100 * busy / seconds / (os.cpu_count() or 1),
               "brokers_cpu_s": brokers, "measured_processes_cpu_s": mirror, "harness_cpu_s": harness}
        if brokers is not None:
            out["other_cpu_s"] = busy - brokers - mirror - harness
            out["other_cores_busy"] = out["other_cpu_s"] / seconds
        return out


def wait_bed_stable(bed, quiet=15.0, timeout=600.0):
    """Until both brokers answer and neither restarted for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = BedWatch.broker_ids()
        try:
            bed.src.topics([])
            bed.dst.topics([])
        except (OSError, ConnectionError, kproto.KafkaError):
            time.sleep(2)
            continue
        time.sleep(quiet)
        if BedWatch.broker_ids() == ids:
            return
    raise RuntimeError("the test bed's brokers did not become stable")


# --------------------------------------------------------------------------------------------
# mirrors


STATE_TOPIC = "__kmirror_state"

# The mirrors a full run compares, in table order.
MIRRORS = ("kmirror", "kmirror-pooled", "kmirror-batch", "mm2")


class Kmirror:
    """kmirror fetchers: one process per partition (or per --partitions-per-fetcher)."""

    name = "kmirror"

    def __init__(self, ctx):
        self.ctx = ctx

    def ensure_state_topic(self):
        """The fetchers' state topic on the destination (as the operator creates it); shared
        with everything else on the bed, so it is created when missing and never deleted."""
        created = self.ctx.bed.dst.create_topic(STATE_TOPIC, 1, {
            "cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.bytes": "16777216"})
        if created:
            log(f"created the state topic {STATE_TOPIC} on the destination")
        self.ctx.bed.dst.wait_ready(STATE_TOPIC, [0])

    def start(self, uid, topic, group=None):
        ctx = self.ctx
        self.mirror_name = f"bench/{uid}"
        user = ctx.bed.mirror_user
        parts = list(range(ctx.args.partitions))
        step = self.partitions_per_process()
        procs = []
        for i in range(0, len(parts), step):
            chunk = parts[i:i + step]
            argv = [
                ctx.args.fetcher_bin,
                "--mirror", self.mirror_name,
                "--source-topic", topic,
                "--partitions", ",".join(map(str, chunk)),
                "--source-bootstrap", ctx.bed.source,
                "--destination-bootstrap", ctx.bed.dest,
                "--destination-property", "security.protocol=SASL_PLAINTEXT",
                "--destination-property", "sasl.mechanism=PLAIN",
                "--destination-property", f"sasl.username={user[0]}",
                "--destination-property", f"sasl.password={user[1]}",
                "--http-addr", "none",
                "--writer", f"bench-{uid}-{i}",
            ]
            argv += self.engine_args()
            argv += shlex.split(os.environ.get("BENCH_FETCHER_ARGS", ""))  # experiments only
            wrap = os.environ.get("BENCH_FETCHER_WRAP")  # e.g. a profiler: "perf record -g -o {logdir}/{uid}-{i}.perf --"
            if wrap:
                argv = [w.format(i=i, uid=uid, logdir=ctx.logdir) for w in shlex.split(wrap)] + argv
            env = dict(os.environ, RUST_LOG="info,librdkafka=warn")
            procs.append(Proc(argv, ctx.logdir / f"{uid}-fetcher-{i}.log", env=env))
        return procs

    def partitions_per_process(self):
        return max(1, self.ctx.args.partitions_per_fetcher)

    def engine_args(self):
        return []

    def settings(self):
        return {"processes": -(-self.ctx.args.partitions // self.partitions_per_process()),
                "binary": self.ctx.args.fetcher_bin, "http": "none", "destination_user": "mirror",
                "client_settings": "fetcher defaults (see fetcher/src/replicator/clients.rs)"}

    def sync_groups(self, uid, topic, group):
        """kmirror's consumer-group offset sync, one shot. Returns None while no such command
        exists (the sync belongs to the operator and is not implemented yet).

        Expected interface (a binary `kmirror-sync-groups`, e.g. in kmirror-operator):
            kmirror-sync-groups --mirror M --source-topic T [--destination-topic T]
                --source-bootstrap S [--source-property k=v ...]
                --destination-bootstrap D [--destination-property k=v ...]
                [--state-topic __kmirror_state] --group G [--group G2 ...]
        commits the groups' source offsets, translated through the mirror's offset map and
        clamped to the destination log, on the destination; exit 0 when done.
        """
        ctx = self.ctx
        exe = os.environ.get("KMIRROR_SYNC_GROUPS_BIN") or str(Path(ctx.args.fetcher_bin).parent / "kmirror-sync-groups")
        if not os.access(exe, os.X_OK):
            return None
        user = ctx.bed.mirror_user
        argv = [exe, "--mirror", self.mirror_name, "--source-topic", topic,
                "--source-bootstrap", ctx.bed.source, "--destination-bootstrap", ctx.bed.dest,
                "--destination-property", "security.protocol=SASL_PLAINTEXT",
                "--destination-property", "sasl.mechanism=PLAIN",
                "--destination-property", f"sasl.username={user[0]}",
                "--destination-property", f"sasl.password={user[1]}",
                "--group", group]
        t0 = time.monotonic()
        p = Proc(argv, ctx.logdir / f"{uid}-sync-groups.log")
        code = p.wait(120)
        if code != 0:
            raise RuntimeError(f"kmirror-sync-groups exited {code}: {p.tail()}")
        return {"command_seconds": time.monotonic() - t0}

    def cleanup(self, uid):
        # Position records stay in the compacted __kmirror_state topic (keyed by the unique mirror).
        pass


class KmirrorPooled(Kmirror):
    """kmirror with one fetcher process for every partition: what a pool pod runs."""

    name = "kmirror-pooled"

    def partitions_per_process(self):
        return max(1, self.ctx.args.partitions)


class KmirrorBatch(KmirrorPooled):
    """kmirror's batch engine (record batches as bytes), one fetcher process for every partition."""

    name = "kmirror-batch"

    def engine_args(self):
        return ["--engine", "batch"]


class Mm2:
    """MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker)."""

    name = "mm2"

    def __init__(self, ctx):
        self.ctx = ctx
        self.heartbeats_existed = True

    def properties(self, uid, topic, group):
        a = self.ctx.args
        src, dst = f"s{uid}", f"d{uid}"
        admin = self.ctx.bed.admin
        p = {
            "clusters": f"{src}, {dst}",
            f"{src}.bootstrap.servers": self.ctx.bed.source,
            f"{dst}.bootstrap.servers": self.ctx.bed.dest,
            f"{dst}.security.protocol": "SASL_PLAINTEXT",
            f"{dst}.sasl.mechanism": "PLAIN",
            f"{dst}.sasl.jaas.config": self.ctx.bed.jaas(admin),
            f"{src}->{dst}.enabled": "true",
            f"{src}->{dst}.topics": topic,
            f"{src}->{dst}.groups": group or "none-bench",
            f"{dst}->{src}.enabled": "false",
            "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            # Tuning (bench/README.md): a task per partition, batching and lz4 on the producer,
            # large fetches on the consumer, read_committed like kmirror.
            "tasks.max": str(a.partitions),
            f"{src}.consumer.isolation.level": "read_committed",
            f"{src}.consumer.fetch.max.bytes": "52428800",
            f"{src}.consumer.max.partition.fetch.bytes": "8388608",
            f"{src}.consumer.max.poll.records": "2000",
            f"{dst}.producer.compression.type": "lz4",
            f"{dst}.producer.linger.ms": "5",
            f"{dst}.producer.batch.size": "1000000",
            f"{dst}.producer.max.request.size": "16777216",
            f"{dst}.producer.acks": "all",
            # Group offsets: checkpoints and sync every 5 s.
            "emit.checkpoints.enabled": "true",
            "emit.checkpoints.interval.seconds": "5",
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": "5",
            "refresh.topics.interval.seconds": "10",
            "refresh.groups.interval.seconds": "10",
            # The source has no authorizer; nothing to sync.
            "sync.topic.acls.enabled": "false",
            # Single-node clusters.
            "replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
        }
        for line in a.mm2_extra.split(";"):
            if "=" in line:
                k, v = line.split("=", 1)
                p[k.strip().replace("{src}", src).replace("{dst}", dst)] = v.strip()
        return p, src, dst

    def start(self, uid, topic, group=None):
        ctx = self.ctx
        props, src, dst = self.properties(uid, topic, group)
        self.heartbeats_existed = "heartbeats" in ctx.bed.dst.topics(["heartbeats"])
        path = ctx.workdir / f"{uid}-mm2.properties"
        with open(path, "w") as f:
            for k, v in props.items():
                f.write(f"{k} = {v}\n")
        argv = ["java", f"-Xms256m", f"-Xmx{ctx.args.mm2_heap}", *MM2_JVM_OPTS,
                f"-Dlog4j2.configurationFile={ctx.mm2_log4j}", "-cp", ctx.bed.classpath,
                "org.apache.kafka.connect.mirror.MirrorMaker", str(path), "--clusters", dst]
        return [Proc(argv, ctx.logdir / f"{uid}-mm2.log")]

    def settings(self):
        props, _, _ = self.properties("X", "<topic>", "<group>")
        props.pop("sX.bootstrap.servers", None)
        return {"jvm": f"-Xms256m -Xmx{self.ctx.args.mm2_heap} " + " ".join(MM2_JVM_OPTS),
                "properties": {k: v for k, v in props.items() if "jaas" not in k}}

    def sync_groups(self, uid, topic, group):
        return {}  # continuous, inside MM2 (MirrorCheckpointConnector)

    def cleanup(self, uid):
        bed = self.ctx.bed
        src, dst = f"s{uid}", f"d{uid}"
        dst_topics = [f"mm2-configs.{src}.internal", f"mm2-offsets.{src}.internal",
                      f"mm2-status.{src}.internal", f"{src}.checkpoints.internal"]
        if not self.heartbeats_existed:
            dst_topics.append("heartbeats")
        bed.dst.delete_topics([t for t in dst_topics if t in bed.dst.topics(dst_topics)])
        bed.src.delete_topics([t for t in [f"mm2-offset-syncs.{dst}.internal"]
                               if t in bed.src.topics([f"mm2-offset-syncs.{dst}.internal"])])
        try:
            bed.dst.delete_groups([f"{src}-mm2"])
        except Exception:  # noqa: BLE001
            pass


# The JVM options of Kafka's bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS).
MM2_JVM_OPTS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true"]


# --------------------------------------------------------------------------------------------
# measurements


class Context:
    def __init__(self, args, bed):
        self.args = args
        self.bed = bed
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.workdir = Path(args.workdir) / self.stamp
        self.logdir = self.workdir / "logs"
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.topics = Topics(bed)
        self.counter = 0
        self.mm2_log4j = self.workdir / "mm2-log4j2.properties"
        self.mm2_log4j.write_text(
            "status = warn\nappender.out.type = Console\nappender.out.name = OUT\n"
            "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\nrootLogger.appenderRef.out.ref = OUT\n"
            "logger.ak.name = org.apache.kafka.clients\nlogger.ak.level = WARN\n")
        self.pool = self.workdir / "payloads.txt"
        self.mean_size = None
        self.bulk_topic = None
        self.bulk_end = None
        self.bulk_records = 0
        self.bulk_bytes = None  # exact, from the consumer limit run
        self.estimated_bytes = None

    def uid(self):
        self.counter += 1
        return f"{self.stamp[4:8]}{self.stamp[9:15]}x{self.counter}"

    def partitions(self):
        return range(self.args.partitions)

    def check_disk(self):
        free = disk_free_gb()
        if free < 5:
            raise RuntimeError(f"only {free:.1f} GB free on /tmp; stopping")
        return free


def preload(ctx):
    a = ctx.args
    log(f"generating {a.pool} distinct payloads (mean {a.record_size} B)")
    ctx.mean_size = payloads.write_pool(ctx.pool, a.pool, a.record_size)
    n = max(a.partitions, int(a.bytes / ctx.mean_size))
    topic = f"bench-src-{ctx.uid()}"
    ctx.topics.create("src", topic, a.partitions)
    log(f"preloading {topic}: {n} records, ~{n * ctx.mean_size / MB:.0f} MB, {a.partitions} partitions, lz4")
    t0 = time.monotonic()
    p = kafka_tool(ctx.bed, "org.apache.kafka.tools.ProducerPerformance", [
        "--topic", topic, "--num-records", str(n), "--throughput", "-1", "--payload-file", str(ctx.pool),
        "--producer-props", f"bootstrap.servers={ctx.bed.source}", "acks=1", "linger.ms=10",
        "batch.size=262144", "compression.type=lz4", "buffer.memory=67108864"],
        ctx.logdir / "preload.log")
    if p.wait(3600) != 0:
        raise RuntimeError(f"preload failed: {p.tail()}")
    ctx.bulk_topic = topic
    ctx.bulk_end = ctx.bed.src.end_offsets(topic, ctx.partitions())
    ctx.bulk_records = sum(ctx.bulk_end.values())
    ctx.estimated_bytes = ctx.bulk_records * ctx.mean_size
    disk = topic_disk_bytes(topic)
    log(f"preloaded {ctx.bulk_records} records in {time.monotonic() - t0:.0f}s; "
        f"on disk {disk / MB:.0f} MB (lz4 ratio {ctx.estimated_bytes / max(disk, 1):.2f})")
    return {"topic": topic, "records": ctx.bulk_records, "mean_payload_bytes": ctx.mean_size,
            "estimated_payload_bytes": ctx.estimated_bytes, "disk_bytes": disk,
            "seconds": time.monotonic() - t0, "producer_summary": summary_line(p)}


def topic_disk_bytes(topic):
    base = Path(os.environ.get("KMIRROR_TESTBED_DIR", "/tmp/kmirror-testbed")) / "kafka" / "source" / "data"
    total = 0
    for d in base.glob(f"{topic}-*"):
        for f in d.glob("*.log"):
            total += f.stat().st_size
    return total


def summary_line(proc):
    try:
        with open(proc.log_path) as f:
            lines = [l for l in f if "records sent" in l]
        return lines[-1].strip() if lines else None
    except OSError:
        return None


def payload_bytes(ctx):
    return ctx.bulk_bytes or ctx.estimated_bytes


# -- limits -----------------------------------------------------------------------------------


def limit_produce(ctx, rnd):
    """How fast the destination accepts the same records from plain producers: K parallel
    ProducerPerformance processes (BENCH_LIMIT_PRODUCERS) share the records; timed like the
    mirrors, from the first record on the destination until all are there."""
    a = ctx.args
    uid = ctx.uid()
    topic = f"bench-limit-{uid}"
    ctx.topics.create("dst", topic, a.partitions, fresh=True)
    cfg = props_file(ctx.workdir / f"{uid}-producer.properties", ctx.bed.dest_java_props(ctx.bed.admin))
    k = max(1, a.limit_producers)
    shares = [ctx.bulk_records // k + (1 if i < ctx.bulk_records % k else 0) for i in range(k)]
    rec = {"phase": "limit_produce", "round": rnd, "uid": uid, "producers": k, "load_before": loadavg()}
    watch = BedWatch()
    procs = []
    try:
        t_launch = time.monotonic()
        for i, n in enumerate(shares):
            procs.append(kafka_tool(ctx.bed, "org.apache.kafka.tools.ProducerPerformance", [
                "--topic", topic, "--num-records", str(n), "--throughput", "-1",
                "--payload-file", str(ctx.pool), "--producer.config", cfg,
                "--producer-props", f"bootstrap.servers={ctx.bed.dest}", "acks=all", "linger.ms=5",
                "batch.size=1000000", "compression.type=lz4", "max.request.size=16777216"],
                ctx.logdir / f"{uid}-limit-produce-{i}.log"))
        t_first, t_done = poll_until_copied(ctx, topic, ctx.bulk_records, procs, "limit producer",
                                            t_launch, watch)
        codes = [p.wait(60) for p in procs]
        nbytes = payload_bytes(ctx)
        rec.update({
            "records": ctx.bulk_records, "startup_s": t_first - t_launch,
            "wall_s_from_first_record": t_done - t_first,
            "mb_s": nbytes / MB / (t_done - t_first), "records_s": ctx.bulk_records / (t_done - t_first),
            "cpu_s": sum(p.cpu_seconds or 0 for p in procs),
            "peak_rss_mb": sum(p.maxrss_mb or 0 for p in procs),
            "exit_codes": codes, "summaries": [summary_line(p) for p in procs],
        })
        rates = [re.search(r"\(([\d.]+) MB/sec\)", s or "") for s in rec["summaries"]]
        if all(rates):
            rec["sum_of_reported_mb_s"] = sum(float(m.group(1)) for m in rates) * 1048576 / MB
    finally:
        for p in procs:
            p.stop(30)
        rec["bed"] = watch.done(procs)
        ctx.topics.delete("dst", topic)
    return rec


def poll_until_copied(ctx, topic, total, procs, what, t_launch, watch):
    """Polls the destination end offsets every 0.1 s until they sum to `total` while producer
    processes run; returns (t_first, t_done)."""
    t_first = None
    last_check = 0.0
    while True:
        dst_end = ctx.bed.dst.end_offsets(topic, ctx.partitions())
        now = time.monotonic()
        copied = sum(dst_end.values())
        if t_first is None and copied > 0:
            t_first = now
        if copied >= total:
            return t_first, now
        if now - t_launch > ctx.args.timeout:
            raise RuntimeError(f"{what}: not done within {ctx.args.timeout}s: {copied}/{total} records")
        if now - last_check >= 1.0:
            watch.check()
            last_check = now
        for p in procs:
            if p.poll() not in (None, 0):
                raise RuntimeError(f"{what}: process {p.pid} exited with {p.code}:\n{p.tail()}")
        time.sleep(0.1)


def limit_consume(ctx, rnd):
    """How fast the source serves the records to a plain consumer."""
    a = ctx.args
    uid = ctx.uid()
    group = ctx.topics.group("src", f"bench-limit-{uid}")
    cfg = props_file(ctx.workdir / f"{uid}-consumer.properties", {
        "isolation.level": "read_committed", "fetch.max.bytes": "52428800",
        "max.poll.records": "2000", "auto.offset.reset": "earliest"})
    p = kafka_tool(ctx.bed, "org.apache.kafka.tools.ConsumerPerformance", [
        "--bootstrap-server", ctx.bed.source, "--topic", ctx.bulk_topic, "--messages", str(ctx.bulk_records),
        "--group", group, "--consumer.config", cfg, "--fetch-size", "8388608", "--timeout", "60000"],
        ctx.logdir / f"{uid}-limit-consume.log")
    code = p.wait(a.timeout)
    rec = {"phase": "limit_consume", "round": rnd, "uid": uid}
    try:
        with open(p.log_path) as f:
            lines = [l.strip() for l in f if l.strip()]
        header = next(i for i, l in enumerate(lines) if l.startswith("start.time"))
        keys = [k.strip() for k in lines[header].split(",")]
        vals = [v.strip() for v in lines[header + 1].split(",")]
        row = dict(zip(keys, vals))
        consumed_mb = float(row["data.consumed.in.MB"])
        fetch_ms = float(row["fetch.time.ms"])
        n = int(row["data.consumed.in.nMsg"])
        rec.update({"records": n, "payload_bytes": consumed_mb * 1048576, "fetch_ms": fetch_ms,
                    "mb_s": consumed_mb * 1048576 / MB / (fetch_ms / 1000),
                    "records_s": n / (fetch_ms / 1000), "cpu_s": p.cpu_seconds,
                    "peak_rss_mb": p.maxrss_mb})
        if n >= ctx.bulk_records and ctx.bulk_bytes is None:
            ctx.bulk_bytes = consumed_mb * 1048576
        if code != 0:
            rec["warning"] = f"exit {code}"
    except (StopIteration, KeyError, ValueError, IndexError):
        rec["error"] = f"exit {code}: {p.tail()}"
    ctx.topics.client("src").delete_groups([group])
    return rec


# -- the mirrors: catch-up and failover replay ----------------------------------------------


def alive_or_raise(procs, what):
    for p in procs:
        if p.poll() is not None:
            raise RuntimeError(f"{what}: process {p.pid} exited with {p.code} early:\n{p.tail()}")


def stop_all(procs, timeout=60.0):
    for p in procs:
        p.signal(signal.SIGTERM)
    codes = [p.wait(timeout) for p in procs]
    return codes


def app_consumer(ctx, topic, group):
    """An application consumer group on the source: reads each partition from its start to a
    point between 35% and 65% of it (deterministic per partition) and commits there."""
    start = ctx.bed.src.start_offsets(topic, ctx.partitions())
    end = ctx.bed.src.end_offsets(topic, ctx.partitions())
    target = {}
    for p in ctx.partitions():
        frac = 0.35 + 0.3 * ((p * 7919 + ctx.counter * 104729) % 1000) / 1000
        target[p] = start[p] + int((end[p] - start[p]) * frac)
    consumed = 0
    for p, b in ctx.bed.src.scan(topic, start, target):
        lo = max(b.base_offset, start[p])
        hi = min(b.last_offset + 1, target[p])
        consumed += max(0, hi - lo)
    ctx.bed.src.commit(group, topic, target)
    return target, consumed


def destination_replay(ctx, topic, group, src_committed, end):
    """A consumer of the group on the destination: from the group's destination offsets to the
    end. With identical offsets (checked by the caller), a record at offset < the source's
    committed offset was consumed already on the source (re-delivered); records between the
    source commit and the destination position are never delivered (skipped)."""
    dst_committed = ctx.bed.dst.committed(group, topic, ctx.partitions())
    per = {}
    for p in ctx.partitions():
        d = dst_committed[p]
        s = src_committed[p]
        per[p] = {"source_committed": s, "destination_committed": d,
                  "redelivered": max(0, s - d) if d >= 0 else None,
                  "skipped": max(0, d - s) if d >= 0 else None}
    start = {p: max(dst_committed[p], 0) for p in ctx.partitions()}
    delivered = 0
    for p, b in ctx.bed.dst.scan(topic, start, end):
        delivered += max(0, min(b.last_offset + 1, end[p]) - max(b.base_offset, start[p]))
    ok = all(v["redelivered"] is not None for v in per.values())
    return {
        "partitions": per,
        "delivered_on_destination": delivered,
        "redelivered": sum(v["redelivered"] for v in per.values()) if ok else None,
        "skipped": sum(v["skipped"] for v in per.values()) if ok else None,
        "missing_offsets": [p for p, v in per.items() if v["redelivered"] is None],
    }


def wait_group_synced(ctx, topic, group, timeout=120.0, settle=12.0):
    """Until every partition has a destination offset for the group and it stopped changing."""
    t0 = time.monotonic()
    last = None
    since = None
    while time.monotonic() - t0 < timeout:
        cur = ctx.bed.dst.committed(group, topic, ctx.partitions())
        if all(v >= 0 for v in cur.values()):
            if cur != last:
                last, since = cur, time.monotonic()
            elif time.monotonic() - since >= settle:
                return since - t0, cur
        time.sleep(1.0)
    return None, ctx.bed.dst.committed(group, topic, ctx.partitions())


def catchup(ctx, mirror, rnd, failover):
    """Mirrors the preloaded topic onto a fresh destination topic; times the catch-up."""
    a = ctx.args
    uid = ctx.uid()
    topic = ctx.bulk_topic
    rec = {"phase": "catchup", "mirror": mirror.name, "round": rnd, "uid": uid,
           "disk_free_gb": ctx.check_disk(), "load_before": loadavg()}
    ctx.topics.create("dst", topic, a.partitions, fresh=True)
    group = None
    if failover:
        group = ctx.topics.group("src", f"bench-app-{uid}")
        ctx.topics.groups.append(("dst", group))
        t = time.monotonic()
        src_committed, consumed = app_consumer(ctx, topic, group)
        rec["failover_setup"] = {"group": group, "consumed_on_source": consumed,
                                 "source_committed": src_committed, "seconds": time.monotonic() - t}
    try:
        return _catchup(ctx, mirror, rnd, uid, topic, group, rec)
    finally:
        try:
            mirror.cleanup(uid)
            ctx.topics.delete("dst", topic)
            if group:
                for side in ("src", "dst"):
                    ctx.topics.client(side).delete_groups([group])
        except Exception as e:  # noqa: BLE001
            log(f"warning: cleanup after {uid}: {e}")


def _catchup(ctx, mirror, rnd, uid, topic, group, rec):
    a = ctx.args
    failover = group is not None
    src_end = ctx.bulk_end
    total = sum(src_end.values())
    procs = []
    sampler = None
    rss_at_done = None
    codes = None
    watch = BedWatch()
    try:
        t_launch = time.monotonic()
        procs = mirror.start(uid, topic, group)
        sampler = Sampler([p.pid for p in procs])
        t_first = cpu_first = None
        last_check = 0.0
        while True:
            if time.monotonic() - last_check >= 1.0:
                watch.check()
                last_check = time.monotonic()
            alive_or_raise(procs, mirror.name)
            dst_end = ctx.bed.dst.end_offsets(topic, ctx.partitions())
            now = time.monotonic()
            copied = sum(dst_end.values())
            if t_first is None and copied > 0:
                t_first, cpu_first = now, sampler.now()
                first_copied = copied
            if all(dst_end[p] >= src_end[p] for p in ctx.partitions()):
                t_done = now
                cpu_done = sampler.now()
                break
            if now - t_launch > a.timeout:
                raise RuntimeError(f"no catch-up within {a.timeout}s: {copied}/{total} records")
            time.sleep(0.1)
        rec["threads_cpu_s"] = sampler.threads()
        rss_at_done = sampler.peak_rss_mb()
        nbytes = payload_bytes(ctx)
        copy_s = t_done - t_first
        rec.update({
            "records": total, "payload_bytes": nbytes,
            "startup_s": t_first - t_launch,
            "wall_s_from_launch": t_done - t_launch,
            "wall_s_from_first_record": copy_s,
            "records_before_first_poll": first_copied,
            "mb_s": nbytes / MB / copy_s,
            "records_s": total / copy_s,
            "mb_s_incl_startup": nbytes / MB / (t_done - t_launch),
            "cpu_s_at_first_record": cpu_first,
            "cpu_s_at_catchup": cpu_done,
            "cpu_s_per_gb_copy": (cpu_done - cpu_first) / (nbytes / GB),
            "cpu_s_per_gb_incl_startup": cpu_done / (nbytes / GB),
            "duplicates_or_extra": sum(dst_end[p] - src_end[p] for p in ctx.partitions()),
            "offsets_identical": dst_end == src_end,
        })
        if failover:
            rec["failover"] = failover_check(ctx, mirror, uid, topic, group,
                                             rec["failover_setup"]["source_committed"], dst_end)
    finally:
        codes = stop_all(procs)
        if sampler:
            sampler.stop()
    rec["exit_codes"] = codes
    rec["bed"] = watch.done(procs)
    rec["cpu_s_total_at_exit"] = sum(p.cpu_seconds or 0 for p in procs)
    # VmHWM of the exec'd processes (see procstat.Proc.maxrss_mb for why not ru_maxrss).
    rec["peak_rss_mb"] = sampler.peak_rss_mb() if sampler else None
    rec["peak_rss_mb_at_catchup"] = rss_at_done
    rec["load_after"] = loadavg()
    return rec


def failover_check(ctx, mirror, uid, topic, group, src_committed, dst_end):
    t = time.monotonic()
    out = {"group": group}
    try:
        synced = mirror.sync_groups(uid, topic, group)
    except RuntimeError as e:
        out["error"] = str(e)
        return out
    if synced is None:
        out["status"] = "pending: no kmirror group-offset sync command yet"
        out["destination_committed"] = ctx.bed.dst.committed(group, topic, ctx.partitions())
        return out
    waited, _ = wait_group_synced(ctx, topic, group)
    out["sync_wait_s"] = waited
    out["sync_s_after_catchup"] = time.monotonic() - t
    out.update(synced)
    out.update(destination_replay(ctx, topic, group, src_committed, dst_end))
    out["status"] = "measured" if waited is not None else "offsets incomplete after 120 s"
    return out


# -- steady-state latency --------------------------------------------------------------------


def latency(ctx, mirror, rnd):
    """Produces at a fixed rate while the mirror runs; end-to-end latency from the source
    append time to the destination append time (both topics LogAppendTime), per record matched
    by partition and offset."""
    a = ctx.args
    uid = ctx.uid()
    topic = f"bench-lat-{uid}"
    lat_cfg = {"message.timestamp.type": "LogAppendTime"}
    ctx.topics.create("src", topic, a.partitions, lat_cfg, fresh=True)
    ctx.topics.create("dst", topic, a.partitions, lat_cfg, fresh=True)
    try:
        return _latency(ctx, mirror, rnd, uid, topic)
    finally:
        try:
            mirror.cleanup(uid)
            ctx.topics.delete("src", topic)
            ctx.topics.delete("dst", topic)
        except Exception as e:  # noqa: BLE001
            log(f"warning: cleanup after {uid}: {e}")


def _latency(ctx, mirror, rnd, uid, topic):
    a = ctx.args
    rate = max(1, int(a.latency_rate / ctx.mean_size))
    rec = {"phase": "latency", "mirror": mirror.name, "round": rnd, "uid": uid, "topic": topic,
           "target_records_s": rate, "target_mb_s": rate * ctx.mean_size / MB, "load_before": loadavg()}
    procs, producer, sampler = [], None, None
    parts = ctx.partitions()
    watch = BedWatch()
    try:
        t_launch = time.monotonic()
        procs = mirror.start(uid, topic, None)
        sampler = Sampler([p.pid for p in procs])
        producer = kafka_tool(ctx.bed, "org.apache.kafka.tools.ProducerPerformance", [
            "--topic", topic, "--num-records", str(rate * int(a.latency_seconds + a.latency_warmup + 600)),
            "--throughput", str(rate), "--payload-file", str(ctx.pool),
            "--producer-props", f"bootstrap.servers={ctx.bed.source}", "acks=all", "linger.ms=5",
            "batch.size=65536", "compression.type=lz4"], ctx.logdir / f"{uid}-lat-producer.log", heap="512m")
        def pause(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                watch.check()
                alive_or_raise(procs + [producer], mirror.name)
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))

        while sum(ctx.bed.dst.end_offsets(topic, parts).values()) == 0:
            if time.monotonic() - t_launch > 300:
                raise RuntimeError("nothing mirrored within 300 s")
            pause(0.1)
        rec["startup_s"] = time.monotonic() - t_launch
        pause(a.latency_warmup)
        w_start = ctx.bed.src.end_offsets(topic, parts)
        cpu0, t0 = sampler.now(), time.monotonic()
        pause(a.latency_seconds)
        w_end = ctx.bed.src.end_offsets(topic, parts)
        cpu1, t1 = sampler.now(), time.monotonic()
        alive_or_raise(procs + [producer], mirror.name)
        producer.stop(30)
        final = ctx.bed.src.end_offsets(topic, parts)
        deadline = time.monotonic() + 300
        while True:
            dst_end = ctx.bed.dst.end_offsets(topic, parts)
            if all(dst_end[p] >= final[p] for p in parts):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("no catch-up within 300 s after the producer stopped")
            time.sleep(0.2)
        n = sum(w_end[p] - w_start[p] for p in parts)
        rec.update({
            "window_s": t1 - t0, "window_records": n,
            "achieved_records_s": n / (t1 - t0),
            "achieved_mb_s": n * ctx.mean_size / MB / (t1 - t0),
            "cpu_s_window": cpu1 - cpu0,
            "cpu_pct_of_core": 100 * (cpu1 - cpu0) / (t1 - t0),
            "offsets_identical": dst_end == final,
            "duplicates_or_extra": sum(dst_end[p] - final[p] for p in parts),
        })
    finally:
        if producer:
            producer.stop(30)
        stop_all(procs)
        if sampler:
            sampler.stop()
    rec["bed"] = watch.done(procs)
    rec["peak_rss_mb"] = sampler.peak_rss_mb() if sampler else None
    rec["cpu_s_total_at_exit"] = sum(p.cpu_seconds or 0 for p in procs)
    if "window_records" in rec:
        rec.update(latency_stats(ctx, topic, w_start, w_end))
    return rec


def batch_index(client, topic, start, end):
    out = {p: [] for p in start}
    for p, b in client.scan(topic, start, end):
        if not b.log_append_time:
            raise RuntimeError(f"{topic}[{p}] batch at {b.base_offset} is not LogAppendTime")
        out[p].append((b.base_offset, b.last_offset, b.max_timestamp))
    return out


def latency_stats(ctx, topic, w_start, w_end):
    src = batch_index(ctx.bed.src, topic, w_start, w_end)
    dst = batch_index(ctx.bed.dst, topic, w_start, w_end)
    weights = {}  # latency ms -> records
    per_partition = {}
    for p in w_start:
        pw = {}
        i = j = 0
        s, d = src[p], dst[p]
        while i < len(s) and j < len(d):
            lo = max(s[i][0], d[j][0], w_start[p])
            hi = min(s[i][1], d[j][1], w_end[p] - 1)
            if lo <= hi:
                lat = d[j][2] - s[i][2]
                weights[lat] = weights.get(lat, 0) + (hi - lo + 1)
                pw[lat] = pw.get(lat, 0) + (hi - lo + 1)
            if s[i][1] < d[j][1]:
                i += 1
            else:
                j += 1
        if pw:
            per_partition[p] = percentiles(pw)
    if not weights:
        return {"latency_error": "no overlapping records"}
    return {"latency_records": sum(weights.values()), "latency_ms": percentiles(weights),
            "latency_ms_per_partition": per_partition,
            "batches": {"source": sum(len(v) for v in src.values()),
                        "destination": sum(len(v) for v in dst.values())}}


def percentiles(weights):
    """Percentiles of a {value: count} histogram."""
    total = sum(weights.values())
    ordered = sorted(weights.items())

    def pct(q):
        need = q * total
        acc = 0
        for value, w in ordered:
            acc += w
            if acc >= need:
                return value
        return ordered[-1][0]

    return {"p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "p999": pct(0.999),
            "max": ordered[-1][0], "min": ordered[0][0],
            "mean": sum(v * w for v, w in ordered) / total}


# --------------------------------------------------------------------------------------------
# report


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def table(rows, header):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(widths[i]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                             for i, c in enumerate(r)))
    return "\n".join(out)


def summarize(ctx, runs):
    def pick(phase, mirror, key, sub=None):
        vals = []
        for r in runs:
            if r.get("phase") != phase or (mirror and r.get("mirror") != mirror) or "error" in r \
                    or r.get("disturbed"):
                continue
            v = r.get(key)
            if sub is not None:
                v = v.get(sub) if isinstance(v, dict) else None
            vals.append(v)
        return med(vals)

    lp = pick("limit_produce", None, "mb_s")
    lc = pick("limit_consume", None, "mb_s")
    lpr = pick("limit_produce", None, "records_s")
    lcr = pick("limit_consume", None, "records_s")
    limit = min([x for x in (lp, lc) if x is not None], default=None)
    limit_r = min([x for x in (lpr, lcr) if x is not None], default=None)
    rows = []

    def row(label, phase, key, sub=None, lim=None, digits=1):
        k, p, b, m = (pick(phase, name, key, sub) for name in MIRRORS)
        rows.append([label, fmt(k, digits), fmt(p, digits), fmt(b, digits), fmt(m, digits),
                     fmt(lim, digits), fmt(ratio(k, m), 2), fmt(ratio(p, m), 2),
                     fmt(ratio(b, m), 2), fmt(ratio(b, p), 2), fmt(ratio(k, lim), 2)])

    if "catchup" in ctx.args.phases:
        row("catch-up MB/s (from first record)", "catchup", "mb_s", lim=limit)
        row("catch-up records/s", "catchup", "records_s", lim=limit_r)
        row("catch-up wall s (from first record)", "catchup", "wall_s_from_first_record", digits=2)
        row("catch-up wall s (incl. start-up)", "catchup", "wall_s_from_launch", digits=2)
        row("start-up to first record s", "catchup", "startup_s", digits=2)
        row("CPU s to catch-up (incl. start-up)", "catchup", "cpu_s_at_catchup")
        row("CPU s per GB (copy only)", "catchup", "cpu_s_per_gb_copy")
        row("peak RSS MB (sum of processes)", "catchup", "peak_rss_mb", digits=0)
        row("[noise] other work, cores busy", "catchup", "bed", "other_cores_busy", digits=2)
    if "latency" in ctx.args.phases:
        row("steady latency p50 ms", "latency", "latency_ms", "p50", digits=0)
        row("steady latency p99 ms", "latency", "latency_ms", "p99", digits=0)
        row("steady latency max ms", "latency", "latency_ms", "max", digits=0)
        row("steady CPU % of a core", "latency", "cpu_pct_of_core")
        row("steady peak RSS MB", "latency", "peak_rss_mb", digits=0)
        row("[noise] other work, cores busy", "latency", "bed", "other_cores_busy", digits=2)
    if "failover" in ctx.args.phases:
        for label, key in (("failover re-delivered records", "redelivered"),
                           ("failover skipped records", "skipped")):
            vals = {}
            for m in MIRRORS:
                fs = [r.get("failover", {}) for r in runs if r.get("phase") == "catchup"
                      and r.get("mirror") == m and not r.get("disturbed") and "error" not in r]
                if fs and all(str(f.get("status", "")).startswith("pending") for f in fs):
                    vals[m] = "pending"
                else:
                    vals[m] = med([f.get(key) for f in fs])
            rows.append([label] + [fmt(vals.get(m), 0) for m in MIRRORS] + ["", "", "", "", "", ""])
    lim_rows = []
    if lp is not None or lc is not None:
        lim_rows = [["limit: plain producer -> destination MB/s", fmt(lp), fmt(lpr)],
                    ["limit: source -> plain consumer MB/s", fmt(lc), fmt(lcr)]]
    return rows, lim_rows


def report(ctx, runs):
    rows, lim_rows = summarize(ctx, runs)
    n = ctx.args.runs
    text = []
    if rows:
        text.append(f"medians of {n} run(s); MB = 10^6 bytes of uncompressed payload; "
                    "limit = min(plain producer, plain consumer)")
        text.append("kmirror: a fetcher process per --partitions-per-fetcher partitions; pooled: one "
                    "process for every partition (what a pool pod runs); batch: one process, the "
                    "batch engine (record batches as bytes)")
        text.append(table(rows, ["metric", "kmirror", "pooled", "batch", "MM2", "limit",
                                 "kmirror/MM2", "pooled/MM2", "batch/MM2", "batch/pooled",
                                 "kmirror/limit"]))
    if lim_rows:
        text.append("")
        text.append(table(lim_rows, ["limit", "MB/s", "records/s"]))
    return "\n".join(text)


def fetcher_report(ctx, runs):
    ok = [r for r in runs if r.get("phase") == "catchup" and "error" not in r and not r.get("disturbed")]
    rows = []
    for i, r in enumerate(ok, 1):
        rows.append([f"run {i}", fmt(r["mb_s"]), fmt(r["records_s"]), fmt(r["cpu_s_per_gb_copy"], 2),
                     fmt(r["cpu_s_per_gb_incl_startup"], 2), fmt(r["peak_rss_mb"], 0),
                     fmt(r["peak_rss_mb"] / max(1, len(r["exit_codes"])), 0), fmt(r["startup_s"], 2)])
    if ok:
        rows.append(["median", fmt(med([r["mb_s"] for r in ok])), fmt(med([r["records_s"] for r in ok])),
                     fmt(med([r["cpu_s_per_gb_copy"] for r in ok]), 2),
                     fmt(med([r["cpu_s_per_gb_incl_startup"] for r in ok]), 2),
                     fmt(med([r["peak_rss_mb"] for r in ok]), 0),
                     fmt(med([r["peak_rss_mb"] / max(1, len(r["exit_codes"])) for r in ok]), 0),
                     fmt(med([r["startup_s"] for r in ok]), 2)])
    return table(rows, ["fetcher", "MB/s", "records/s", "CPU s/GB (copy)", "CPU s/GB (all)",
                        "peak RSS MB (sum)", "per process", "start-up s"])


# --------------------------------------------------------------------------------------------


def machine():
    info = {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = int(f.readline().split()[1]) / 1024 / 1024
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        info["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except OSError:
        pass
    return info


def main(argv):
    args = settings(argv)
    if not os.access(args.fetcher_bin, os.X_OK):
        sys.exit(f"{args.fetcher_bin} not found: build it with cargo build --release -p kmirror-fetcher")
    bed = Bed()
    ctx = Context(args, bed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    mirrors = {"kmirror": Kmirror(ctx), "kmirror-pooled": KmirrorPooled(ctx),
               "kmirror-batch": KmirrorBatch(ctx), "mm2": Mm2(ctx)}
    chosen = [mirrors[m] for m in args.mirrors]
    results = {"command": " ".join(sys.argv), "mode": args.mode, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "settings": {k: v for k, v in vars(args).items()}, "machine": machine(),
               "mirror_settings": {m.name: m.settings() for m in chosen}, "runs": []}
    Path(args.results).mkdir(parents=True, exist_ok=True)
    out_path = Path(args.results) / f"{ctx.stamp}{'-fetcher' if args.mode == 'fetcher' else ''}.json"
    t_start = time.monotonic()
    log(f"kmirror bench ({args.mode}): {args.bytes / MB:.0f} MB, {args.partitions} partitions, "
        f"{args.runs} run(s), phases {','.join(args.phases)}, mirrors {','.join(args.mirrors)}; "
        f"workdir {ctx.workdir}; /tmp free {disk_free_gb():.0f} GB")

    def save():
        results["duration_s"] = time.monotonic() - t_start
        with open(out_path, "w") as f:
            json.dump(results, f, indent=2, default=str)

    def record(rec):
        results["runs"].append(rec)
        save()
        brief = {k: rec.get(k) for k in ("mb_s", "records_s", "wall_s_from_launch", "cpu_s_at_catchup",
                                         "cpu_s_per_gb_copy", "peak_rss_mb", "cpu_pct_of_core") if rec.get(k) is not None}
        if rec.get("latency_ms"):
            brief["latency_ms"] = {k: rec["latency_ms"][k] for k in ("p50", "p99", "max")}
        if rec.get("failover"):
            f = rec["failover"]
            brief["failover"] = f.get("status") if f.get("status", "").startswith("pending") else \
                {k: f.get(k) for k in ("redelivered", "skipped", "sync_wait_s")}
        if rec.get("bed"):
            brief["machine_busy_pct"] = round(rec["bed"]["machine_busy_pct_of_all_cores"])
        label = rec["phase"] + (f" {rec['mirror']}" if rec.get("mirror") else "")
        if rec.get("disturbed"):
            label += " (DISTURBED, not counted)"
        if "error" in rec:
            log(f"  {label} round {rec['round']}: ERROR {rec['error'][:2000]}")
        else:
            log(f"  {label} round {rec['round']}: " + ", ".join(
                f"{k}={fmt(v, 2) if isinstance(v, float) else v}" for k, v in brief.items()))

    def attempt(fn, *a, phase, mirror=None, rnd=None):
        for tries in range(args.retries + 1):
            watch = BedWatch()
            try:
                rec = fn(*a)
            except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
                rec = {"phase": phase, "mirror": mirror, "round": rnd, "error": f"{type(e).__name__}: {e}"}
            if watch.done()["broker_restarted"] or rec.get("bed", {}).get("broker_restarted"):
                rec["disturbed"] = "a broker of the test bed restarted during the run (another test?)"
                if str(rec.get("error", "")).startswith("Disturbed"):
                    del rec["error"]
                record(rec)
                if tries < args.retries:
                    log("  a broker restarted during the run; waiting for a stable bed, then repeating it")
                    wait_bed_stable(bed)
                    continue
                return
            record(rec)
            return

    try:
        for m in chosen:
            if isinstance(m, Kmirror):
                m.ensure_state_topic()
                break
        results["preload"] = preload(ctx)
        save()
        for rnd in range(1, args.runs + 1):
            order = chosen if rnd % 2 == 1 else list(reversed(chosen))
            log(f"round {rnd}/{args.runs}: order {', '.join(m.name for m in order)}; "
                f"load {loadavg()}; /tmp free {disk_free_gb():.0f} GB")
            if "limits" in args.phases:
                attempt(limit_produce, ctx, rnd, phase="limit_produce", rnd=rnd)
                attempt(limit_consume, ctx, rnd, phase="limit_consume", rnd=rnd)
            if "catchup" in args.phases:
                for m in order:
                    attempt(catchup, ctx, m, rnd, "failover" in args.phases, phase="catchup", mirror=m.name, rnd=rnd)
            if "latency" in args.phases:
                for m in order:
                    attempt(latency, ctx, m, rnd, phase="latency", mirror=m.name, rnd=rnd)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        results["interrupted"] = True
    finally:
        ctx.topics.cleanup()
        try:
            ctx.pool.unlink()
        except OSError:
            pass
        save()
    text = fetcher_report(ctx, results["runs"]) if args.mode == "fetcher" else report(ctx, results["runs"])
    results["table"] = text
    save()
    print()
    print(text)
    print()
    log(f"done in {(time.monotonic() - t_start) / 60:.1f} min; raw runs: {out_path}; logs: {ctx.logdir}")
    errors = [r for r in results["runs"] if "error" in r]
    return 1 if errors and len(errors) == len(results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
