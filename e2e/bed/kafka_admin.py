#!/usr/bin/env python3
"""A small Kafka wire-protocol client for the test bed's fault verbs (e2e/bed/faults.sh).

It shows what Kafka's own tools do not: every replica's log end offset (LEO) next to the
leader's high watermark (HW), through ListOffsets with the "debugging" replica id -2, which a
broker answers from its local log, leader or follower, up to its log end (isolation none).
It also changes partition leadership (reassignment, preferred and unclean elections), topic
configs, and writes plain records to one partition — each a single request, no JVM start.

  kafka_admin.py [--sasl USER:PASSWORD] BOOTSTRAP describe TOPIC [PARTITION]
  kafka_admin.py [--sasl ...] BOOTSTRAP offsets TOPIC PARTITION
  kafka_admin.py [--sasl ...] BOOTSTRAP produce TOPIC PARTITION PREFIX COUNT [ACKS]
  kafka_admin.py [--sasl ...] BOOTSTRAP reassign TOPIC PARTITION ID,ID,...
  kafka_admin.py [--sasl ...] BOOTSTRAP elect preferred|unclean TOPIC PARTITION
  kafka_admin.py [--sasl ...] BOOTSTRAP topic-configs TOPIC
  kafka_admin.py [--sasl ...] BOOTSTRAP set-config TOPIC NAME VALUE   (VALUE "-": delete)
  kafka_admin.py [--sasl ...] BOOTSTRAP allow PRINCIPAL topic|group|cluster NAME OP[,OP...]

Every command prints one JSON object. SASL is PLAIN over a plaintext connection (the bed's
destination listeners); without --sasl the connection is PLAINTEXT (the bed's source).
Protocol versions are those a Kafka 2.1+ client uses, which Kafka 4 still serves.
"""

import json
import socket
import struct
import sys
import time

TIMEOUT = 2.5

# API keys and the versions used.
PRODUCE, LIST_OFFSETS, METADATA = (0, 7), (2, 4), (3, 7)
SASL_HANDSHAKE, SASL_AUTHENTICATE = (17, 1), (36, 0)
DESCRIBE_CONFIGS, ELECT_LEADERS = (32, 1), (43, 1)
INCREMENTAL_ALTER_CONFIGS, ALTER_REASSIGNMENTS = (44, 0), (45, 0)
CREATE_ACLS = (30, 1)
FLEXIBLE = {ALTER_REASSIGNMENTS}

ERRORS = {
    0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT",
    9: "REPLICA_NOT_AVAILABLE", 19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST", 58: "SASL_AUTHENTICATION_FAILED", 74: "FENCED_LEADER_EPOCH",
    78: "OFFSET_NOT_AVAILABLE", 80: "PREFERRED_LEADER_NOT_AVAILABLE",
    83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED", 85: "NO_REASSIGNMENT_IN_PROGRESS",
}


def error_name(code):
    return ERRORS.get(code, "ERROR_%d" % code)


class KafkaError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# encoding


class Writer:
    def __init__(self):
        self.buf = bytearray()

    def int8(self, v):
        self.buf += struct.pack(">b", v)
        return self

    def int16(self, v):
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v):
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v):
        self.buf += struct.pack(">q", v)
        return self

    def uvarint(self, v):
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                self.buf.append(b | 0x80)
            else:
                self.buf.append(b)
                return self

    def varint(self, v):
        return self.uvarint((v << 1) ^ (v >> 63))

    def string(self, s):
        if s is None:
            return self.int16(-1)
        b = s.encode()
        self.int16(len(b))
        self.buf += b
        return self

    def compact_string(self, s):
        if s is None:
            return self.uvarint(0)
        b = s.encode()
        self.uvarint(len(b) + 1)
        self.buf += b
        return self

    def bytes(self, b):
        if b is None:
            return self.int32(-1)
        self.int32(len(b))
        self.buf += b
        return self

    def array(self, items, each):
        if items is None:
            return self.int32(-1)
        self.int32(len(items))
        for item in items:
            each(self, item)
        return self

    def compact_array(self, items, each):
        if items is None:
            return self.uvarint(0)
        self.uvarint(len(items) + 1)
        for item in items:
            each(self, item)
        return self

    def tags(self):
        return self.uvarint(0)


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def _take(self, fmt, size):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def int8(self):
        return self._take(">b", 1)

    def int16(self):
        return self._take(">h", 2)

    def int32(self):
        return self._take(">i", 4)

    def int64(self):
        return self._take(">q", 8)

    def boolean(self):
        return self.int8() != 0

    def uvarint(self):
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self):
        n = self.int16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def compact_string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes(self):
        n = self.int32()
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def array(self, each):
        n = self.int32()
        return [] if n < 0 else [each(self) for _ in range(n)]

    def compact_array(self, each):
        n = self.uvarint() - 1
        return [] if n < 0 else [each(self) for _ in range(n)]

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


# CRC-32C (Castagnoli), as record batches v2 carry it.
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def record_batch(values):
    """A record batch (magic 2, no compression, no producer id) holding `values` (bytes)."""
    now = int(time.time() * 1000)
    records = bytearray()
    for delta, value in enumerate(values):
        body = Writer().int8(0).varint(0).varint(delta).varint(-1).varint(len(value))
        body.buf += value
        body.uvarint(0)  # no headers
        records += Writer().varint(len(body.buf)).buf + body.buf
    after_crc = Writer().int16(0).int32(len(values) - 1).int64(now).int64(now)
    after_crc.int64(-1).int16(-1).int32(-1).int32(len(values))
    after_crc.buf += records
    crc = crc32c(after_crc.buf)
    head = Writer().int32(-1).int8(2)
    head.buf += struct.pack(">I", crc)
    batch = head.buf + after_crc.buf
    return Writer().int64(0).int32(len(batch)).buf + batch


# ---------------------------------------------------------------------------------------------
# connections


class Connection:
    def __init__(self, host, port, sasl=None):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.sock.settimeout(TIMEOUT)
        self.correlation = 0
        if sasl:
            user, password = sasl
            r = self.request(SASL_HANDSHAKE, Writer().string("PLAIN"))
            code = r.int16()
            if code:
                raise KafkaError("SASL handshake: %s" % error_name(code))
            token = b"\0" + user.encode() + b"\0" + password.encode()
            r = self.request(SASL_AUTHENTICATE, Writer().bytes(token))
            code, message = r.int16(), r.string()
            if code:
                raise KafkaError("SASL authentication: %s %s" % (error_name(code), message))

    def close(self):
        self.sock.close()

    def _read(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise KafkaError("connection closed")
            out += chunk
        return bytes(out)

    def request(self, api, body):
        key, version = api
        self.correlation += 1
        header = Writer().int16(key).int16(version).int32(self.correlation).string("kmirror-testbed")
        if api in FLEXIBLE:
            header.tags()
        payload = header.buf + body.buf
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._read(4))[0]
        r = Reader(self._read(size))
        if r.int32() != self.correlation:
            raise KafkaError("correlation id mismatch")
        if api in FLEXIBLE:
            r.tags()
        return r


class Cluster:
    """Connections to a cluster's brokers, found through the bootstrap list."""

    def __init__(self, bootstrap, sasl=None):
        self.bootstrap = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in bootstrap.split(","))]
        self.sasl = sasl
        self.conns = {}
        self.brokers = {}

    def _any(self):
        errors = []
        for host, port in self.bootstrap:
            try:
                return Connection(host, port, self.sasl)
            except (OSError, KafkaError) as e:
                errors.append("%s:%d %s" % (host, port, e))
        raise KafkaError("no broker reachable: " + "; ".join(errors))

    def broker(self, node_id):
        if node_id not in self.brokers:
            raise KafkaError("broker %d is not in the metadata (fenced or down)" % node_id)
        if node_id not in self.conns:
            host, port = self.brokers[node_id]
            self.conns[node_id] = Connection(host, port, self.sasl)
        return self.conns[node_id]

    def any_request(self, api, body):
        """A request to the first bootstrap broker that answers."""
        errors = []
        for host, port in self.bootstrap:
            try:
                conn = Connection(host, port, self.sasl)
                try:
                    return conn.request(api, body)
                finally:
                    conn.close()
            except (OSError, KafkaError) as e:
                errors.append("%s:%d %s" % (host, port, e))
        raise KafkaError("no broker answered: " + "; ".join(errors))

    def metadata(self, topic):
        body = Writer().array([topic], lambda w, t: w.string(t)).int8(0)
        r = self.any_request(METADATA, body)
        r.int32()
        for b in r.array(lambda r: (r.int32(), r.string(), r.int32(), r.string())):
            self.brokers[b[0]] = (b[1], b[2])
        r.string()
        controller = r.int32()

        def partition(r):
            return {
                "error": error_name(r.int16()), "partition": r.int32(), "leader": r.int32(),
                "leader_epoch": r.int32(), "replicas": r.array(Reader.int32),
                "isr": r.array(Reader.int32), "offline": r.array(Reader.int32),
            }

        def topic_entry(r):
            return {"error": error_name(r.int16()), "name": r.string(), "internal": r.boolean(),
                    "partitions": r.array(partition)}

        topics = r.array(topic_entry)
        t = next((t for t in topics if t["name"] == topic), None)
        if t is None or t["error"] != "NONE":
            raise KafkaError("topic %s: %s" % (topic, t["error"] if t else "not in metadata"))
        return controller, sorted(t["partitions"], key=lambda p: p["partition"])

    def partition(self, topic, partition):
        _, parts = self.metadata(topic)
        for p in parts:
            if p["partition"] == partition:
                return p
        raise KafkaError("%s has no partition %d" % (topic, partition))

    def list_offset(self, node_id, topic, partition, replica_id, isolation, timestamp):
        """(offset, error) of one ListOffsets query sent to broker `node_id`."""
        body = Writer().int32(replica_id).int8(isolation)
        body.array([topic], lambda w, t: w.string(t).array(
            [partition], lambda w, p: w.int32(p).int32(-1).int64(timestamp)))
        r = self.broker(node_id).request(LIST_OFFSETS, body)
        r.int32()
        result = None
        for _ in range(r.int32()):
            r.string()
            for _ in range(r.int32()):
                r.int32()
                code, _ts, offset, _epoch = r.int16(), r.int64(), r.int64(), r.int32()
                result = (offset if code == 0 else None, error_name(code))
        return result


# ---------------------------------------------------------------------------------------------
# commands


def cmd_describe(cluster, topic, partition=None):
    controller, parts = cluster.metadata(topic)
    if partition is not None:
        parts = [p for p in parts if p["partition"] == int(partition)]
    return {"topic": topic, "controller": controller, "partitions": parts}


def cmd_offsets(cluster, topic, partition):
    partition = int(partition)
    p = cluster.partition(topic, partition)
    out = {"topic": topic, "partition": partition, "leader": p["leader"],
           "leader_epoch": p["leader_epoch"], "replicas": p["replicas"], "isr": p["isr"],
           "hw": None, "lso": None, "log_start": None, "leo": {}, "errors": {}}
    if p["leader"] >= 0:
        try:
            out["hw"], e1 = cluster.list_offset(p["leader"], topic, partition, -1, 0, -1)
            out["lso"], e2 = cluster.list_offset(p["leader"], topic, partition, -1, 1, -1)
            out["log_start"], e3 = cluster.list_offset(p["leader"], topic, partition, -1, 0, -2)
            for name, e in (("hw", e1), ("lso", e2), ("log_start", e3)):
                if e != "NONE":
                    out["errors"][name] = e
        except (OSError, KafkaError) as e:
            out["errors"]["leader"] = str(e)
    for replica in p["replicas"]:
        try:
            offset, e = cluster.list_offset(replica, topic, partition, -2, 0, -1)
            out["leo"][str(replica)] = offset
            if e != "NONE":
                out["errors"]["leo-%d" % replica] = e
        except (OSError, KafkaError) as e:
            out["leo"][str(replica)] = None
            out["errors"]["leo-%d" % replica] = str(e) or type(e).__name__
    return out


def cmd_produce(cluster, topic, partition, prefix, count, acks="1"):
    partition, count = int(partition), int(count)
    p = cluster.partition(topic, partition)
    if p["leader"] < 0:
        raise KafkaError("%s-%d has no leader" % (topic, partition))
    values = [("%s-%d" % (prefix, i)).encode() for i in range(count)]
    batch = bytes(record_batch(values))
    body = Writer().string(None).int16(int(acks)).int32(30000)
    body.array([topic], lambda w, t: w.string(t).array(
        [partition], lambda w, i: w.int32(i).bytes(batch)))
    r = cluster.broker(p["leader"]).request(PRODUCE, body)
    base, code = None, -1
    for _ in range(r.int32()):
        r.string()
        for _ in range(r.int32()):
            r.int32()
            code, base = r.int16(), r.int64()
            r.int64()
            r.int64()
    if code != 0:
        raise KafkaError("produce to %s-%d: %s" % (topic, partition, error_name(code)))
    return {"topic": topic, "partition": partition, "leader": p["leader"], "first_offset": base,
            "end_offset": base + count, "values": ["%s-%d" % (prefix, i) for i in range(count)]}


def cmd_reassign(cluster, topic, partition, replicas):
    ids = [int(x) for x in replicas.split(",")]
    body = Writer().int32(30000)
    body.compact_array([topic], lambda w, t: w.compact_string(t).compact_array(
        [int(partition)], lambda w, p: w.int32(p).compact_array(ids, Writer.int32).tags()).tags())
    body.tags()
    r = cluster.any_request(ALTER_REASSIGNMENTS, body)
    r.int32()
    code, message = r.int16(), r.compact_string()
    if code:
        raise KafkaError("reassignment: %s %s" % (error_name(code), message or ""))

    def part(r):
        out = (r.int32(), r.int16(), r.compact_string())
        r.tags()
        return out

    def topic_entry(r):
        name = r.compact_string()
        parts = r.compact_array(part)
        r.tags()
        return name, parts

    for _name, parts in r.compact_array(topic_entry):
        for _p, code, message in parts:
            if code:
                raise KafkaError("reassignment: %s %s" % (error_name(code), message or ""))
    return {"topic": topic, "partition": int(partition), "replicas": ids}


def cmd_elect(cluster, kind, topic, partition):
    election = {"preferred": 0, "unclean": 1}[kind]
    body = Writer().int8(election)
    body.array([topic], lambda w, t: w.string(t).array([int(partition)], Writer.int32))
    body.int32(30000)
    r = cluster.any_request(ELECT_LEADERS, body)
    r.int32()
    top = r.int16()
    result = "NONE" if top == 0 else error_name(top)
    for _ in range(r.int32()):
        r.string()
        for _ in range(r.int32()):
            r.int32()
            code, message = r.int16(), r.string()
            if code:
                result = error_name(code) + (": " + message if message else "")
    return {"topic": topic, "partition": int(partition), "election": kind, "result": result}


def cmd_topic_configs(cluster, topic):
    body = Writer().array([topic], lambda w, t: w.int8(2).string(t).array(None, None)).int8(0)
    r = cluster.any_request(DESCRIBE_CONFIGS, body)
    r.int32()
    dynamic = {}
    for _ in range(r.int32()):
        code, message = r.int16(), r.string()
        if code:
            raise KafkaError("describe configs: %s %s" % (error_name(code), message or ""))
        r.int8()
        r.string()
        for _ in range(r.int32()):
            name, value, _ro, source, _sens = r.string(), r.string(), r.boolean(), r.int8(), r.boolean()
            r.array(lambda r: (r.string(), r.string(), r.int8()))
            if source == 1:  # DYNAMIC_TOPIC_CONFIG
                dynamic[name] = value
    return {"topic": topic, "dynamic": dynamic}


def cmd_set_config(cluster, topic, name, value):
    op, val = (1, None) if value == "-" else (0, value)
    body = Writer().array([topic], lambda w, t: w.int8(2).string(t).array(
        [name], lambda w, n: w.string(n).int8(op).string(val))).int8(0)
    r = cluster.any_request(INCREMENTAL_ALTER_CONFIGS, body)
    r.int32()
    for _ in range(r.int32()):
        code, message = r.int16(), r.string()
        r.int8()
        r.string()
        if code:
            raise KafkaError("alter config: %s %s" % (error_name(code), message or ""))
    return {"topic": topic, "config": name, "value": val}


ACL_RESOURCES = {"topic": 2, "group": 3, "cluster": 4}
ACL_OPERATIONS = {
    "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8,
    "clusteraction": 9, "describeconfigs": 10, "alterconfigs": 11, "idempotentwrite": 12,
}


def cmd_allow(cluster, principal, resource, name, operations):
    """ALLOW ACLs (literal pattern, any host) for `principal` on one resource."""
    ops = [ACL_OPERATIONS[o.strip().lower()] for o in operations.split(",")]
    rtype = ACL_RESOURCES[resource]

    def creation(w, op):
        w.int8(rtype).string(name).int8(3).string(principal).string("*").int8(op).int8(3)

    r = cluster.any_request(CREATE_ACLS, Writer().array(ops, creation))
    r.int32()
    for _ in range(r.int32()):
        code, message = r.int16(), r.string()
        if code:
            raise KafkaError("create ACL: %s %s" % (error_name(code), message or ""))
    return {"principal": principal, "resource": resource, "name": name,
            "operations": operations.split(",")}


COMMANDS = {
    "describe": cmd_describe, "offsets": cmd_offsets, "produce": cmd_produce,
    "reassign": cmd_reassign, "elect": cmd_elect, "topic-configs": cmd_topic_configs,
    "set-config": cmd_set_config, "allow": cmd_allow,
}


def main(argv):
    sasl = None
    if len(argv) > 1 and argv[0] == "--sasl":
        user, _, password = argv[1].partition(":")
        sasl, argv = (user, password), argv[2:]
    if len(argv) < 2 or argv[1] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    cluster = Cluster(argv[0], sasl)
    try:
        out = COMMANDS[argv[1]](cluster, *argv[2:])
    except (OSError, KafkaError, TypeError, KeyError) as e:
        print(json.dumps({"error": str(e) or type(e).__name__}))
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
