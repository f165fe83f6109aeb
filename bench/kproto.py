"""A minimal Kafka wire-protocol client for the benchmark harness (Python 3 standard library only).

Only what the harness needs, against the single-node brokers of the test bed (every request goes
to the bootstrap broker, which leads every partition and coordinates every group):

- SASL/PLAIN authentication (SaslHandshake v1 + SaslAuthenticate v0);
- Metadata v1, ListOffsets v1, CreateTopics v2, DeleteTopics v1;
- Fetch v4, decoding record-batch *headers* only (base offset, record count, timestamps), so
  compressed batches never need decompressing — with `message.timestamp.type=LogAppendTime` a
  batch's max timestamp is the broker's append time of every record in it;
- OffsetCommit v2 (a standalone commit, as an assign()-mode consumer does), OffsetFetch v1,
  DeleteGroups v0.

All chosen versions are non-flexible (no tagged fields) and supported by Kafka 2.1 through 4.x.
"""

import socket
import struct
import threading
import time

API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_SASL_HANDSHAKE = 17
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_SASL_AUTHENTICATE = 36
API_DELETE_GROUPS = 42

ERR_NONE = 0
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_TOPIC_ALREADY_EXISTS = 36
ERR_GROUP_ID_NOT_FOUND = 69
ERR_NON_EMPTY_GROUP = 68

# UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: transient right after a topic or group appears.
RETRIABLE = {3, 5, 6, 14, 15, 16}

LATEST = -1
EARLIEST = -2


class KafkaError(Exception):
    def __init__(self, code, what):
        super().__init__(f"{what}: Kafka error code {code}")
        self.code = code


class _Writer:
    def __init__(self):
        self.parts = []

    def i8(self, v):
        self.parts.append(struct.pack(">b", v))
        return self

    def i16(self, v):
        self.parts.append(struct.pack(">h", v))
        return self

    def i32(self, v):
        self.parts.append(struct.pack(">i", v))
        return self

    def i64(self, v):
        self.parts.append(struct.pack(">q", v))
        return self

    def boolean(self, v):
        return self.i8(1 if v else 0)

    def string(self, s):
        if s is None:
            return self.i16(-1)
        b = s.encode()
        self.i16(len(b))
        self.parts.append(b)
        return self

    def bytes_(self, b):
        if b is None:
            return self.i32(-1)
        self.i32(len(b))
        self.parts.append(b)
        return self

    def array(self, items, each):
        if items is None:
            return self.i32(-1)
        self.i32(len(items))
        for item in items:
            each(self, item)
        return self

    def build(self):
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data, pos=0):
        self.data = data
        self.pos = pos

    def _take(self, fmt, n):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += n
        return v

    def i8(self):
        return self._take(">b", 1)

    def i16(self):
        return self._take(">h", 2)

    def i32(self):
        return self._take(">i", 4)

    def i64(self):
        return self._take(">q", 8)

    def boolean(self):
        return self.i8() != 0

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self):
        n = self.i32()
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def array(self, each):
        n = self.i32()
        if n < 0:
            return None
        return [each(self) for _ in range(n)]


class Batch:
    """A record batch header (magic 2)."""

    __slots__ = ("base_offset", "last_offset", "count", "max_timestamp", "log_append_time",
                 "control", "transactional", "size")

    def __init__(self, base_offset, last_offset, count, max_timestamp, log_append_time, control,
                 transactional, size):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.count = count
        self.max_timestamp = max_timestamp
        self.log_append_time = log_append_time
        self.control = control
        self.transactional = transactional
        self.size = size


def parse_batches(records):
    """Record-batch headers in a Fetch response's records blob (a partial trailing batch is
    dropped, as consumers do)."""
    out = []
    pos = 0
    end = len(records)
    while pos + 61 <= end:
        base_offset, batch_length = struct.unpack_from(">qi", records, pos)
        total = 12 + batch_length
        if pos + total > end:
            break
        magic = records[pos + 16]
        if magic != 2:
            raise ValueError(f"record batch with magic {magic} at offset {base_offset}")
        attributes, last_delta, _base_ts, max_ts, _pid, _epoch, _seq, count = struct.unpack_from(
            ">hiqqqhii", records, pos + 21)
        out.append(Batch(base_offset, base_offset + last_delta, count, max_ts,
                         bool(attributes & 0x08), bool(attributes & 0x20), bool(attributes & 0x10),
                         total))
        pos += total
    return out


class Client:
    """One connection to one broker; thread-safe (requests are serialized)."""

    def __init__(self, bootstrap, username=None, password=None, client_id="kmirror-bench",
                 timeout=60.0):
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.addr = (host, int(port))
        self.username = username
        self.password = password
        self.client_id = client_id
        self.timeout = timeout
        self.sock = None
        self.correlation = 0
        self.lock = threading.Lock()

    # -- transport -------------------------------------------------------------------------

    def _connect(self):
        self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.username is not None:
            r = self._roundtrip(API_SASL_HANDSHAKE, 1, _Writer().string("PLAIN").build())
            code = r.i16()
            if code != ERR_NONE:
                raise KafkaError(code, "SaslHandshake PLAIN")
            token = b"\0" + self.username.encode() + b"\0" + self.password.encode()
            r = self._roundtrip(API_SASL_AUTHENTICATE, 0, _Writer().bytes_(token).build())
            code = r.i16()
            message = r.string()
            if code != ERR_NONE:
                raise KafkaError(code, f"SaslAuthenticate: {message}")

    def _recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("broker closed the connection")
            got += k
        return bytes(buf)

    def _roundtrip(self, api_key, version, body):
        self.correlation += 1
        header = _Writer().i16(api_key).i16(version).i32(self.correlation).string(self.client_id).build()
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._recv_exact(4))[0]
        data = self._recv_exact(size)
        correlation = struct.unpack_from(">i", data, 0)[0]
        if correlation != self.correlation:
            raise ConnectionError(f"correlation id {correlation}, expected {self.correlation}")
        return _Reader(data, 4)

    def request(self, api_key, version, body):
        with self.lock:
            for attempt in (1, 2):
                try:
                    if self.sock is None:
                        self._connect()
                    return self._roundtrip(api_key, version, body)
                except (OSError, ConnectionError):
                    self.close_locked()
                    if attempt == 2:
                        raise

    def close_locked(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def close(self):
        with self.lock:
            self.close_locked()

    # -- metadata and offsets ---------------------------------------------------------------

    def topics(self, names=None):
        """{topic: partition count} for the given topics (None: all); unknown topics omitted."""
        w = _Writer().array(names, lambda w, n: w.string(n))
        r = self.request(API_METADATA, 1, w.build())
        r.array(lambda r: (r.i32(), r.string(), r.i32(), r.string()))  # brokers
        r.i32()  # controller

        def topic(r):
            code = r.i16()
            name = r.string()
            r.boolean()
            parts = r.array(lambda r: (r.i16(), r.i32(), r.i32(), r.array(lambda r: r.i32()),
                                       r.array(lambda r: r.i32())))
            return code, name, len(parts)

        return {name: n for code, name, n in r.array(topic) if code == ERR_NONE}

    def list_offsets(self, topic, partitions, timestamp=LATEST):
        """{partition: offset} — LATEST is the high watermark, EARLIEST the log start."""
        w = _Writer().i32(-1).array(
            [topic], lambda w, t: w.string(t).array(
                list(partitions), lambda w, p: w.i32(p).i64(timestamp)))
        r = self.request(API_LIST_OFFSETS, 1, w.build())
        out = {}

        def part(r):
            p, code, _ts, off = r.i32(), r.i16(), r.i64(), r.i64()
            if code != ERR_NONE:
                raise KafkaError(code, f"ListOffsets {topic}[{p}]")
            out[p] = off

        r.array(lambda r: (r.string(), r.array(part)))
        return out

    def wait_ready(self, topic, partitions, timeout=60.0):
        """Waits until every partition has a leader that answers ListOffsets (after creation)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.list_offsets(topic, partitions, LATEST)
            except KafkaError as e:
                if e.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def end_offsets(self, topic, partitions):
        return self.list_offsets(topic, partitions, LATEST)

    def start_offsets(self, topic, partitions):
        return self.list_offsets(topic, partitions, EARLIEST)

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name, partitions, configs=None, replication=1, timeout_ms=30000):
        """Creates a topic; returns False when it exists already."""
        configs = dict(configs or {})
        w = _Writer().array([name], lambda w, n: (
            w.string(n).i32(partitions).i16(replication).array([], None)
            .array(sorted(configs.items()), lambda w, kv: w.string(kv[0]).string(str(kv[1])))))
        w.i32(timeout_ms).boolean(False)
        r = self.request(API_CREATE_TOPICS, 2, w.build())
        r.i32()
        for _name, code, message in r.array(lambda r: (r.string(), r.i16(), r.string())):
            if code == ERR_TOPIC_ALREADY_EXISTS:
                return False
            if code != ERR_NONE:
                raise KafkaError(code, f"CreateTopics {name}: {message}")
        return True

    def delete_topics(self, names, timeout_ms=30000):
        """Deletes topics; unknown ones are ignored."""
        if not names:
            return
        w = _Writer().array(list(names), lambda w, n: w.string(n)).i32(timeout_ms)
        r = self.request(API_DELETE_TOPICS, 1, w.build())
        r.i32()
        for name, code in r.array(lambda r: (r.string(), r.i16())):
            if code not in (ERR_NONE, ERR_UNKNOWN_TOPIC_OR_PARTITION):
                raise KafkaError(code, f"DeleteTopics {name}")

    # -- fetching ---------------------------------------------------------------------------

    def fetch(self, topic, offsets, max_wait_ms=100, max_bytes=64 << 20,
              partition_max_bytes=16 << 20, read_committed=False):
        """One Fetch; returns {partition: (high_watermark, [Batch])}."""
        w = _Writer().i32(-1).i32(max_wait_ms).i32(1).i32(max_bytes).i8(1 if read_committed else 0)
        w.array([topic], lambda w, t: w.string(t).array(
            sorted(offsets.items()), lambda w, po: w.i32(po[0]).i64(po[1]).i32(partition_max_bytes)))
        r = self.request(API_FETCH, 4, w.build())
        r.i32()
        out = {}

        def part(r):
            p, code, hw, _lso = r.i32(), r.i16(), r.i64(), r.i64()
            r.array(lambda r: (r.i64(), r.i64()))
            records = r.bytes_()
            if code != ERR_NONE:
                raise KafkaError(code, f"Fetch {topic}[{p}]")
            out[p] = (hw, parse_batches(records) if records else [])

        r.array(lambda r: (r.string(), r.array(part)))
        return out

    def scan(self, topic, start, end, read_committed=False):
        """Yields (partition, Batch) for every batch overlapping [start[p], end[p]) per partition."""
        pos = {p: o for p, o in start.items() if o < end[p]}
        while pos:
            result = self.fetch(topic, pos, read_committed=read_committed)
            for p, (_hw, batches) in result.items():
                if p not in pos:
                    continue
                advanced = False
                for b in batches:
                    if b.last_offset < pos[p]:
                        continue
                    if b.base_offset >= end[p]:
                        pos[p] = end[p]
                        break
                    yield p, b
                    pos[p] = b.last_offset + 1
                    advanced = True
                if pos[p] >= end[p]:
                    del pos[p]
                elif not advanced and not batches:
                    # Nothing returned yet (e.g. an in-flight append): try again.
                    continue

    # -- consumer groups ----------------------------------------------------------------------

    def commit(self, group, topic, offsets):
        """A standalone commit (generation -1, no member), as an assign()-mode consumer does."""
        w = _Writer().string(group).i32(-1).string("").i64(-1)
        w.array([topic], lambda w, t: w.string(t).array(
            sorted(offsets.items()), lambda w, po: w.i32(po[0]).i64(po[1]).string("")))
        r = self.request(API_OFFSET_COMMIT, 2, w.build())

        def part(r):
            p, code = r.i32(), r.i16()
            if code != ERR_NONE:
                raise KafkaError(code, f"OffsetCommit {group} {topic}[{p}]")

        r.array(lambda r: (r.string(), r.array(part)))

    def committed(self, group, topic, partitions):
        """{partition: committed offset or -1}."""
        w = _Writer().string(group).array([topic], lambda w, t: w.string(t).array(
            list(partitions), lambda w, p: w.i32(p)))
        r = self.request(API_OFFSET_FETCH, 1, w.build())
        out = {}

        def part(r):
            p, off, _meta, code = r.i32(), r.i64(), r.string(), r.i16()
            if code != ERR_NONE:
                raise KafkaError(code, f"OffsetFetch {group} {topic}[{p}]")
            out[p] = off

        r.array(lambda r: (r.string(), r.array(part)))
        return out

    def delete_groups(self, groups):
        if not groups:
            return
        r = self.request(API_DELETE_GROUPS, 0, _Writer().array(list(groups), lambda w, g: w.string(g)).build())
        r.i32()
        r.array(lambda r: (r.string(), r.i16()))
