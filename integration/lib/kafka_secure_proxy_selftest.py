#!/usr/bin/env python3
"""End-to-end self-test of kafka_secure_proxy.py in front of noida-db, with librdkafka.

    python3 integration/lib/kafka_secure_proxy_selftest.py [--keep]

Starts noida-db on a free loopback port with a temporary data dir, makes throwaway TLS material with
tls.sh, and starts four proxies in front of the broker: plaintext, TLS, SASL over plaintext and SASL
over TLS. Then runs the cases: unit checks of the SCRAM server and the ApiVersions rebuild, raw
wire checks of the address rewriting and of the SASL rules, and librdkafka (confluent-kafka)
transactional round trips and refusals for each security protocol and mechanism. Prints one line
per case, `ok   NAME: detail` or `FAIL NAME: reason`; exits 1 when a case failed, 2 when the setup
failed. Stops everything it started; the temporary directory (logs) is kept on failure or --keep.

Needs noida-db (<repo>/.work/tools/bin/noida-db or on PATH: integration/lib/broker.sh install),
openssl, and `pip install confluent-kafka` (its wheels bundle librdkafka with SSL and SASL SCRAM).
"""

import base64
import logging
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import kafka_secure_proxy as proxy  # noqa: E402
import kafka_wire  # noqa: E402

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
# alice may use every mechanism, bob only SCRAM-SHA-512: enough to see that users and mechanisms
# are checked together.
USERS_FILE = """\
# MECHANISM     USER   PASSWORD
PLAIN           alice  alice-secret
SCRAM-SHA-256   alice  alice-secret
SCRAM-SHA-512   alice  alice-secret
SCRAM-SHA-512   bob    bob-secret
"""
COMMITTED_FIRST, ABORTED, COMMITTED_SECOND = 60, 20, 40


class CaseFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CaseFailed(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Processes


class Services:
    """noida-db and the proxies, started from one temporary directory."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []
        self.broker_port = None
        self.ports = {}  # proxy name -> port

    def _spawn(self, name, argv):
        out = open(os.path.join(self.workdir, f"{name}.log"), "wb")
        # A session of its own: a Ctrl-C meant for this script must not reach the servers first.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        out.close()
        self.procs.append((name, proc))
        return proc

    def start_broker(self):
        binary = os.path.join(REPO, ".work", "tools", "bin", "noida-db")
        if not os.access(binary, os.X_OK):
            binary = shutil.which("noida-db")
        if not binary:
            raise RuntimeError("noida-db not found: run integration/lib/broker.sh install")
        self.broker_port = free_port()
        self._spawn("broker", [binary, "start", "--only", "kafka", "--kafka-port", str(self.broker_port),
                               "--data-dir", os.path.join(self.workdir, "broker-data")])
        deadline = time.monotonic() + 10
        while True:
            try:
                kafka_wire.ping(self.broker_addr)
                return
            except (OSError, RuntimeError, struct.error):
                if time.monotonic() > deadline:
                    raise RuntimeError("noida-db did not answer within 10 s; see broker.log")
                time.sleep(0.1)

    @property
    def broker_addr(self):
        return f"127.0.0.1:{self.broker_port}"

    def start_proxy(self, name, *options):
        ready = os.path.join(self.workdir, f"proxy-{name}.ready")
        proc = self._spawn(f"proxy-{name}", [sys.executable, os.path.join(HERE, "kafka_secure_proxy.py"),
                                             "--listen-port", "0", "--upstream", self.broker_addr,
                                             "--ready-file", ready, *options])
        deadline = time.monotonic() + 30  # PBKDF2 of the SCRAM users takes a moment
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"proxy {name} did not start; see proxy-{name}.log")
            time.sleep(0.05)
        with open(ready, encoding="utf-8") as f:
            self.ports[name] = int(f.read().strip().split("=", 1)[1])

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------------------------
# A raw Kafka wire client (requests built by hand, as in kafka_wire.py)


class Wire:
    def __init__(self, port, ca=None, timeout=10):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if ca:
            sock = ssl.create_default_context(cafile=ca).wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock

    def close(self):
        self.sock.close()

    def send_raw(self, payload):
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send(self, api_key, version, correlation_id, body, flexible=False):
        header = struct.pack(">hhi", api_key, version, correlation_id) + struct.pack(">h", 8) + b"selftest"
        if flexible:
            header += b"\x00"  # request header v2: empty tagged fields
        self.send_raw(header + body)

    def recv(self):
        """The next frame's payload, or None when the other side closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        payload = self._recv_exactly(struct.unpack(">i", head)[0])
        if payload is None:
            raise CaseFailed("connection closed inside a frame")
        return payload

    def _recv_exactly(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            buf += chunk
        return buf

    def request(self, api_key, version, correlation_id, body, flexible=False):
        self.send(api_key, version, correlation_id, body, flexible)
        payload = self.recv()
        check(payload is not None, f"api_key={api_key} v{version}: connection closed")
        return payload


# Request bodies asking for every topic (Metadata) or the coordinator of group "g" (FindCoordinator).
METADATA_REQUESTS = {
    0: (b"\x00\x00\x00\x00", False),                       # topics: empty array = all (v0)
    1: (b"\xff\xff\xff\xff", False),                       # topics: null = all
    4: (b"\xff\xff\xff\xff\x00", False),                   # + allow_auto_topic_creation
    8: (b"\xff\xff\xff\xff\x00\x00\x00", False),           # + include cluster/topic authorized ops
    9: (b"\x00\x00\x00\x00\x00", True),                    # compact null topics, 3 booleans, tags
    12: (b"\x00\x00\x00\x00", True),                       # compact null topics, 2 booleans, tags
}
FIND_COORDINATOR_REQUESTS = {
    0: (b"\x00\x01g", False),                              # key
    1: (b"\x00\x01g\x00", False),                          # key, key_type (0 = group)
    2: (b"\x00\x01g\x00", False),
    3: (b"\x02g\x00\x00", True),                           # compact key, key_type, tags
    4: (b"\x00\x02\x02g\x00", True),                       # key_type, compact [keys], tags
}


def compare_rewritten(services, proxy_port, api_key, requests):
    """Each response through the proxy must be the broker's own, byte for byte, except for its
    address: 127.0.0.1:<broker port> -> 127.0.0.1:<proxy port>."""
    old = b"127.0.0.1" + struct.pack(">i", services.broker_port)
    new = b"127.0.0.1" + struct.pack(">i", proxy_port)
    direct, proxied = Wire(services.broker_port), Wire(proxy_port)
    try:
        for version, (body, flexible) in requests.items():
            want = direct.request(api_key, version, 7, body, flexible)
            got = proxied.request(api_key, version, 7, body, flexible)
            check(old in want, f"v{version}: the broker's answer has no 127.0.0.1:{services.broker_port}")
            check(got == want.replace(old, new),
                  f"v{version}: proxied response differs beyond the address:\n{want!r}\n{got!r}")
    finally:
        direct.close()
        proxied.close()
    return f"v{', v'.join(map(str, requests))} identical to the broker's but for the port"


def parse_api_versions(payload, version):
    r = proxy.Reader(payload)
    r.int32()
    flexible = version >= 3
    check(r.int16() == 0, "ApiVersions error")
    out = {}
    for _ in range(r.array_length(flexible)):
        key, lo, hi = r.int16(), r.int16(), r.int16()
        if flexible:
            r.skip_tagged_fields()
        out[key] = (lo, hi)
    return out


def sasl_handshake(wire, mechanism, version=1, correlation_id=1):
    payload = wire.request(17, version, correlation_id, proxy.encode_string(mechanism, False))
    r = proxy.Reader(payload)
    r.int32()
    error = r.int16()
    mechanisms = [r.string(False) for _ in range(r.array_length(False))]
    return error, mechanisms


def plain_token(user, password):
    return b"\x00" + user.encode() + b"\x00" + password.encode()


# ---------------------------------------------------------------------------------------------
# Cases without librdkafka


def case_scram_rfc7677(_services, _tls):
    # RFC 7677 section 3 example (SCRAM-SHA-256), with its fixed salt and server nonce.
    credential = proxy.ScramCredential.derive("sha256", "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = proxy.ScramServer("SCRAM-SHA-256", {"user": credential},
                               server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    check(first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
          f"server-first {first!r}")
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    check(final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", f"server-final {final!r}")
    check(server.complete and server.user == "user", "exchange not complete")

    bad = proxy.ScramServer("SCRAM-SHA-256", {"user": credential}, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    bad.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    try:
        bad.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=AHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        raise CaseFailed("a wrong proof was accepted")
    except proxy.AuthenticationFailed:
        pass
    return "server-first and server-final match the RFC example; a wrong proof is refused"


def case_api_versions_rebuild(_services, _tls):
    # Synthetic responses: Produce 0-9, SaslAuthenticate 0-5 (more than the proxy implements), no
    # SaslHandshake; v0 layout and v3 (flexible) layout with a tagged field after the array.
    payloads = {
        0: struct.pack(">ihi", 5, 0, 2) + struct.pack(">hhh", 0, 0, 9) + struct.pack(">hhh", 36, 0, 5),
        3: struct.pack(">ih", 5, 0) + b"\x03" + struct.pack(">hhh", 0, 0, 9) + b"\x00"
           + struct.pack(">hhh", 36, 0, 5) + b"\x00" + struct.pack(">i", 0) + b"\x01\x00\x01\x07",
    }
    for version, payload in payloads.items():
        rebuilt = proxy.rewrite_response(18, version, payload, 1, sasl=True)
        got = parse_api_versions(rebuilt, version)
        check(got == {0: (0, 9), 17: (0, 1), 36: (0, 2)}, f"v{version}: {got}")
        if version == 3:
            check(rebuilt.endswith(struct.pack(">i", 0) + b"\x01\x00\x01\x07"), "v3: lost the tail")
        check(proxy.rewrite_response(18, version, rebuilt, 1, sasl=True) == rebuilt,
              f"v{version}: a correct response was rebuilt")
    return "adds SaslHandshake 0-1, clamps SaslAuthenticate 5 -> 2 (v0 and v3 layouts)"


def case_rewrite_metadata(services, _tls):
    return compare_rewritten(services, services.ports["plain"], 3, METADATA_REQUESTS)


def case_rewrite_find_coordinator(services, _tls):
    return compare_rewritten(services, services.ports["plain"], 10, FIND_COORDINATOR_REQUESTS)


def case_api_versions_sasl(services, _tls):
    found = {}
    for version, body, flexible in ((0, b"", False), (3, b"\x09selftest\x041.0\x00", True)):
        wire = Wire(services.ports["sasl"])
        try:
            got = parse_api_versions(wire.request(18, version, 1, body, flexible), version)
        finally:
            wire.close()
        check(got.get(17) == (0, 1) and got.get(36) == (0, 2), f"v{version}: 17={got.get(17)} 36={got.get(36)}")
        found[version] = got
    return f"v0 and v3 advertise SaslHandshake 0-1, SaslAuthenticate 0-2 ({len(found[3])} api keys)"


def case_sasl_required(services, _tls):
    wire = Wire(services.ports["sasl"])
    try:
        wire.send(3, 0, 1, b"\x00\x00\x00\x00")
        check(wire.recv() is None, "Metadata before authentication was answered")
    finally:
        wire.close()
    return "Metadata before SaslHandshake: connection closed, no answer"


def case_sasl_wrong_password_wire(services, _tls):
    wire = Wire(services.ports["sasl"])
    try:
        error, mechanisms = sasl_handshake(wire, "PLAIN")
        check(error == 0 and mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
              f"handshake: error {error}, mechanisms {mechanisms}")
        token = plain_token("alice", "wrong")
        payload = wire.request(36, 1, 2, struct.pack(">i", len(token)) + token)
        r = proxy.Reader(payload)
        check(r.int32() == 2, "correlation id")
        error, message, auth_bytes, lifetime = r.int16(), r.string(False), r.bytes(False), r.int64()
        check(error == 58 and message, f"SaslAuthenticate answered error {error}, message {message!r}")
        check(auth_bytes == b"" and lifetime == 0 and not r.rest(), "SaslAuthenticate v1 layout")
        check(wire.recv() is None, "connection left open after the failure")
    finally:
        wire.close()

    wire = Wire(services.ports["sasl"])
    try:
        error, _ = sasl_handshake(wire, "SCRAM-SHA-1")
        check(error == 33, f"unknown mechanism: error {error}, expected 33")
        check(wire.recv() is None, "connection left open after an unknown mechanism")
    finally:
        wire.close()
    return f"error 58 {message!r}, then closed; unknown mechanism: error 33, then closed"


def case_sasl_handshake_v0(services, _tls):
    # KIP-43: after SaslHandshake v0 the SASL tokens travel as bare size-prefixed frames.
    wire = Wire(services.ports["sasl"])
    try:
        error, _ = sasl_handshake(wire, "PLAIN", version=0)
        check(error == 0, f"handshake v0: error {error}")
        wire.send_raw(plain_token("alice", PASSWORDS["alice"]))
        check(wire.recv() == b"", "PLAIN over raw frames: expected an empty token back")
        payload = wire.request(3, 0, 3, b"\x00\x00\x00\x00")
        check(b"127.0.0.1" + struct.pack(">i", services.ports["sasl"]) in payload,
              "Metadata after authentication does not name the proxy")
    finally:
        wire.close()
    return "PLAIN with raw tokens, then Metadata answered"


# ---------------------------------------------------------------------------------------------
# librdkafka cases


class ClientLog(logging.Handler):
    """librdkafka's own log (debug=broker), to see which addresses it really connected to."""

    def __init__(self, name):
        super().__init__(logging.DEBUG)
        self.lines = []
        self.logger = logging.getLogger(f"selftest.{name}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.handlers[:] = [self]

    def emit(self, record):
        self.lines.append(record.getMessage())

    def connected_ports(self):
        return {int(p) for line in self.lines for p in re.findall(r"Connected to ipv4#127\.0\.0\.1:(\d+)", line)}


def client_config(security, log, debug=False):
    conf = dict(security)
    conf["socket.timeout.ms"] = 10000
    conf["logger"] = log.logger  # librdkafka's log in the case's result, not on stderr
    if debug:
        conf["debug"] = "broker"
    return conf


def transactional_round_trip(services, name, port, security):
    from confluent_kafka import Consumer, KafkaError, Producer

    topic = f"proxy-{name}-{uuid.uuid4().hex[:8]}"
    kafka_wire.create_topic(services.broker_addr, topic, 3)
    log = ClientLog(name)
    conf = client_config({"bootstrap.servers": f"127.0.0.1:{port}", **security}, log, debug=True)
    errors = []
    producer = Producer({**conf, "transactional.id": f"selftest-{topic}",
                         "error_cb": lambda e: errors.append(e)})
    producer.init_transactions(30)
    expected = set()

    def transaction(prefix, first, count, commit):
        producer.begin_transaction()
        for i in range(first, first + count):
            value = f"{prefix}-{i}".encode()
            producer.produce(topic, key=str(i).encode(), value=value)
            if commit:
                expected.add(value)
        producer.flush(30)  # the records are in the log before the commit or abort marker
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    # Committed, aborted, committed: a read_committed reader must skip the aborted records in the
    # middle of the log, not merely stop before them.
    transaction("committed", 0, COMMITTED_FIRST, True)
    transaction("aborted", 0, ABORTED, False)
    transaction("committed", COMMITTED_FIRST, COMMITTED_SECOND, True)
    producer.flush(10)

    consumer = Consumer({**conf, "group.id": f"selftest-{topic}", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "error_cb": lambda e: errors.append(e)})
    got = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        quiet_until = None
        # Read until all committed records are in, then 3 s more: aborted records would show then.
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise CaseFailed(f"consumer error: {msg.error()}")
                continue
            got.append(msg.value())
            if len(got) >= len(expected) and quiet_until is None:
                quiet_until = time.monotonic() + 3
    finally:
        consumer.close()
    check(len(got) == len(set(got)), "a record was read twice")
    check(set(got) == expected,
          f"read {len(got)} records: {len(expected - set(got))} committed missing, "
          f"{len(set(got) - expected)} unexpected (e.g. {sorted(set(got) - expected)[:3]})")
    fatal = [e for e in errors if e.fatal()]
    check(not fatal, f"fatal client errors: {fatal}")
    ports = log.connected_ports()
    check(ports == {port}, f"librdkafka connected to ports {sorted(ports)}, expected only the proxy's {port}")
    return (f"{len(expected)} committed records read back with read_committed, {ABORTED} aborted "
            f"ones skipped; every connection via the proxy")


def expect_refusal(name, port, security, want_codes, want_text, timeout=15):
    """Connects a producer that must be refused: a client error with one of want_codes must come
    within `timeout` seconds, want_text must be in it or in librdkafka's log, and metadata must
    stay out of reach."""
    from confluent_kafka import KafkaException, Producer

    log = ClientLog(name)
    errors = []
    producer = Producer({**client_config({"bootstrap.servers": f"127.0.0.1:{port}", **security}, log),
                         "error_cb": lambda e: errors.append(e)})
    start = time.monotonic()
    match = None
    while match is None and time.monotonic() - start < timeout:
        producer.poll(0.2)
        match = next((e for e in errors if e.code() in want_codes), None)
    elapsed = time.monotonic() - start
    check(match is not None, f"no {'/'.join(map(str, want_codes))} error within {timeout} s; "
                             f"errors: {[e.str() for e in errors]}")
    evidence = next((text for text in [e.str() for e in errors] + log.lines if want_text in text), None)
    check(evidence is not None, f"{want_text!r} neither in the client errors nor in its log")
    try:
        producer.list_topics(timeout=2)
        raise CaseFailed("metadata was served to a refused client")
    except KafkaException:
        pass
    if evidence != match.str():
        evidence = f"{match.str()}; log: {evidence}"
    return f"{match.name()} after {elapsed:.1f} s: {evidence}"


def sasl(protocol, mechanism, user="alice", password=None):
    return {"security.protocol": protocol, "sasl.mechanisms": mechanism, "sasl.username": user,
            "sasl.password": PASSWORDS[user] if password is None else password}


def build_cases():
    from confluent_kafka import KafkaError

    def round_trip(name, proxy_name, security):
        def run(services, tls):
            sec = dict(security)
            if sec["security.protocol"].endswith("SSL"):
                sec["ssl.ca.location"] = os.path.join(tls, "ca.pem")
            return transactional_round_trip(services, name, services.ports[proxy_name], sec)
        return name, run

    def refusal(name, proxy_name, security, codes, text, ca="ca.pem"):
        def run(services, tls):
            sec = dict(security)
            if sec.get("security.protocol", "PLAINTEXT").endswith("SSL"):
                sec["ssl.ca.location"] = os.path.join(tls, ca)
            return expect_refusal(name, services.ports[proxy_name], sec, codes, text)
        return name, run

    auth_failed = "Authentication failed"
    return [
        ("scram-rfc7677", case_scram_rfc7677),
        ("apiversions-rebuild", case_api_versions_rebuild),
        ("rewrite-metadata", case_rewrite_metadata),
        ("rewrite-find-coordinator", case_rewrite_find_coordinator),
        ("apiversions-sasl", case_api_versions_sasl),
        ("sasl-required", case_sasl_required),
        ("sasl-wrong-password-wire", case_sasl_wrong_password_wire),
        ("sasl-handshake-v0", case_sasl_handshake_v0),
        round_trip("ssl", "tls", {"security.protocol": "SSL"}),
        round_trip("sasl-plaintext-plain", "sasl", sasl("SASL_PLAINTEXT", "PLAIN")),
        round_trip("sasl-plaintext-scram-sha-256", "sasl", sasl("SASL_PLAINTEXT", "SCRAM-SHA-256")),
        round_trip("sasl-ssl-scram-sha-512", "sasl-tls", sasl("SASL_SSL", "SCRAM-SHA-512", user="bob")),
        refusal("wrong-password-plain", "sasl", sasl("SASL_PLAINTEXT", "PLAIN", password="nope"),
                {KafkaError._AUTHENTICATION}, auth_failed),
        refusal("wrong-password-scram-sha-256", "sasl",
                sasl("SASL_PLAINTEXT", "SCRAM-SHA-256", password="nope"), {KafkaError._AUTHENTICATION},
                auth_failed),
        # bob has a SCRAM-SHA-512 credential only.
        refusal("wrong-mechanism-for-user", "sasl-tls", sasl("SASL_SSL", "SCRAM-SHA-256", user="bob"),
                {KafkaError._AUTHENTICATION}, auth_failed),
        # librdkafka reports the closed connection in its log only; error_cb gets "all brokers down".
        refusal("plaintext-client-to-tls", "tls", {"security.protocol": "PLAINTEXT"},
                {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT}, "in state APIVERSION_QUERY"),
        refusal("tls-client-wrong-ca", "tls", {"security.protocol": "SSL"}, {KafkaError._SSL},
                "certificate verify failed", ca="other-ca.pem"),
    ]


# ---------------------------------------------------------------------------------------------


def main(argv):
    keep = "--keep" in argv
    workdir = tempfile.mkdtemp(prefix="kafka-secure-proxy-selftest-")
    services = Services(workdir)
    try:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            print("setup failed: confluent-kafka is missing (pip install confluent-kafka)")
            return 2
        try:
            tls = os.path.join(workdir, "tls")
            subprocess.run(["bash", os.path.join(HERE, "tls.sh"), "certs", tls], check=True,
                           stdout=subprocess.DEVNULL)
            users = os.path.join(workdir, "users.txt")
            with open(users, "w", encoding="utf-8") as f:
                f.write(USERS_FILE)
            cert = ["--tls-cert", os.path.join(tls, "server.pem"), "--tls-key", os.path.join(tls, "server.key")]
            services.start_broker()
            services.start_proxy("plain")
            services.start_proxy("tls", *cert)
            services.start_proxy("sasl", "--sasl-users", users)
            services.start_proxy("sasl-tls", "--sasl-users", users, *cert)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
            print(f"setup failed: {e}")
            keep = True
            return 2
        failed = 0
        for name, run in build_cases():
            start = time.monotonic()
            try:
                detail = run(services, tls)
                print(f"ok   {name}: {detail} ({time.monotonic() - start:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - any exception fails the case, not the run
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        keep = keep or failed > 0
        return 1 if failed else 0
    finally:
        services.stop()
        if keep:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
