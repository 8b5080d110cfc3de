#!/usr/bin/env python3
"""Minimal Kafka wire-protocol probes for the test broker, with no dependencies.

    kafka_wire.py ping HOST:PORT [TIMEOUT_S]
        ApiVersions v0 and Metadata v0 round trips; exit 0 when both answer without error
        (prints the broker count and the number of API keys offered).
    kafka_wire.py create-topic HOST:PORT TOPIC [PARTITIONS] [REPLICATION] [key=value ...]
        CreateTopics v2; exit 0 when created or when it already exists (error 36).

Requests are the oldest forms that work (noida-db 0.2.3 closes the connection on CreateTopics v0/v1) from the Kafka protocol guide
(https://kafka.apache.org/protocol.html): size int32, api_key int16, api_version int16,
correlation_id int32, client_id string, then the body. Only what the scripts need.
"""

import socket
import struct
import sys
import time

CLIENT_ID = b"sluice-it"


def _string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">h", len(b)) + b


def _request(sock, api_key, version, corr, body):
    header = struct.pack(">hhi", api_key, version, corr) + _string(CLIENT_ID)
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size = struct.unpack(">i", _recv(sock, 4))[0]
    resp = _recv(sock, size)
    got = struct.unpack(">i", resp[:4])[0]
    if got != corr:
        raise RuntimeError(f"correlation id {got}, expected {corr}")
    return resp[4:]


def _recv(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("connection closed by the broker")
        buf += chunk
    return buf


def _connect(addr, timeout):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def ping(addr, timeout=2.0):
    with _connect(addr, timeout) as s:
        body = _request(s, 18, 0, 1, b"")  # ApiVersions v0
        err, n = struct.unpack(">hi", body[:6])
        if err != 0:
            raise RuntimeError(f"ApiVersions error {err}")
        body = _request(s, 3, 0, 2, struct.pack(">i", 0))  # Metadata v0, all topics
        brokers = struct.unpack(">i", body[:4])[0]
        if brokers < 1:
            raise RuntimeError("Metadata lists no broker")
    return brokers, n


def create_topic(addr, topic, partitions=1, replication=1, configs=(), timeout=10.0):
    body = struct.pack(">i", 1) + _string(topic) + struct.pack(">ih", partitions, replication)
    body += struct.pack(">i", 0)  # no manual assignments
    body += struct.pack(">i", len(configs))
    for kv in configs:
        k, v = kv.split("=", 1)
        body += _string(k) + _string(v)
    body += struct.pack(">i?", int(timeout * 1000), False)  # timeout, validate_only
    with _connect(addr, timeout) as s:
        resp = _request(s, 19, 2, 1, body)  # CreateTopics v2
    # v2 response: throttle_time_ms, [name, error_code, error_message (nullable)]
    n = struct.unpack(">i", resp[4:8])[0]
    off = 8
    for _ in range(n):
        ln = struct.unpack(">h", resp[off:off + 2])[0]
        name = resp[off + 2:off + 2 + ln].decode()
        off += 2 + ln
        err, mlen = struct.unpack(">hh", resp[off:off + 4])
        off += 4
        message = resp[off:off + mlen].decode() if mlen > 0 else ""
        off += max(mlen, 0)
        if name == topic and err not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise RuntimeError(f"CreateTopics {topic}: error {err} {message}".rstrip())
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "ping":
        deadline = float(argv[3]) if len(argv) > 3 else 0.0
        end = time.monotonic() + deadline
        while True:
            try:
                brokers, apis = ping(argv[2])
                print(f"brokers={brokers} api_keys={apis}")
                return 0
            except (OSError, RuntimeError, struct.error) as e:
                if time.monotonic() >= end:
                    print(f"kafka_wire.py: {argv[2]}: {e}", file=sys.stderr)
                    return 1
                time.sleep(0.1)
    if len(argv) >= 4 and argv[1] == "create-topic":
        partitions = int(argv[4]) if len(argv) > 4 else 1
        replication = int(argv[5]) if len(argv) > 5 else 1
        try:
            return create_topic(argv[2], argv[3], partitions, replication, argv[6:])
        except (OSError, RuntimeError, struct.error) as e:
            print(f"kafka_wire.py: {e}", file=sys.stderr)
            return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
