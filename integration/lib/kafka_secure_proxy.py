#!/usr/bin/env python3
"""A TLS and SASL front for a plaintext Kafka-protocol broker, for tests (standard library only).

The test broker (noida-db) speaks plaintext only and checks no SASL credentials. This proxy listens on
127.0.0.1, terminates TLS and/or authenticates clients with SASL itself, and forwards every other
request in order over one plaintext upstream connection per client connection. So librdkafka clients
(the publisher, confluent-kafka in tests) can run with security.protocol SSL, SASL_PLAINTEXT or
SASL_SSL and sasl.mechanisms PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, transactions included.

Usage:
    kafka_secure_proxy.py --listen-port N --upstream HOST:PORT [--tls-cert PEM --tls-key PEM]
                          [--sasl-users FILE] [--ready-file FILE] [--verbose]

    --listen-port 0 picks a free port. Once listening it prints one line PORT=<n> on stdout and, with
    --ready-file, writes the same line to that file (atomically). Logs go to stderr (--verbose: one
    line per request). SIGTERM or SIGINT stop it. Without --tls-cert the listener is plaintext;
    without --sasl-users no authentication is asked for.

SASL users file (--sasl-users): one credential per line, `MECHANISM USER PASSWORD`, separated by
whitespace (so no field can contain whitespace); MECHANISM is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
Blank lines and lines starting with # are ignored. A user who may use several mechanisms has one line
per mechanism. Only the mechanisms that appear in the file are enabled (offered in SaslHandshake).
    PLAIN          alice  alice-secret
    SCRAM-SHA-256  alice  alice-secret
    SCRAM-SHA-512  bob    bob-secret

What the proxy changes in the byte stream (everything else passes through untouched):
- Metadata (api key 3) and FindCoordinator (10) responses: every broker and coordinator address
  becomes 127.0.0.1:<listen port>, because noida-db advertises its own port and the client's later
  connections must come back through the proxy. The other bytes of the response are kept.
- With SASL: until a connection has authenticated, only ApiVersions (18), SaslHandshake (17) and
  SaslAuthenticate (36) are accepted; any other request closes the connection, as a Kafka broker
  does. SaslHandshake and SaslAuthenticate are always answered by the proxy (noida-db would accept
  any PLAIN password), and ApiVersions responses advertise the versions the proxy implements for
  them (17: v0-1, 36: v0-2). A failed authentication is answered with error 58
  (SASL_AUTHENTICATION_FAILED) and a message, then the connection is closed. The session lifetime
  is 0 (no KIP-368 re-authentication); SaslHandshake or SaslAuthenticate on an authenticated
  connection gets ILLEGAL_SASL_STATE (34), as from a broker without connections.max.reauth.ms.
  SaslHandshake v0 (raw SASL tokens without Kafka framing, KIP-43) is supported too.

Not supported: client certificates (mutual TLS), GSSAPI and OAUTHBEARER, SCRAM channel binding,
extensions and delegation tokens, SASLprep (passwords are used as their UTF-8 bytes, as in Kafka).

References: Kafka protocol guide https://kafka.apache.org/protocol.html and the message schemas in
apache/kafka clients/src/main/resources/common/message/*.json; KIP-43 and KIP-152 (SASL handshake
and SaslAuthenticate), KIP-84 (SCRAM), KIP-482 (flexible versions, tagged fields), KIP-511
(ApiVersions response header); RFC 4616 (PLAIN), RFC 5802 and RFC 7677 (SCRAM).
"""

import argparse
import asyncio
import base64
import hashlib
import hmac
import logging
import os
import secrets
import signal
import socket
import ssl
import struct
import sys
from dataclasses import dataclass

log = logging.getLogger("kafka_secure_proxy")

PRODUCE = 0
METADATA = 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
API_VERSIONS = 18
SASL_AUTHENTICATE = 36

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

# First flexible version (compact strings and arrays, tagged fields) of the APIs whose bodies the
# proxy reads; it never needs to parse any other API.
FLEXIBLE_SINCE = {
    PRODUCE: 9,
    METADATA: 9,
    FIND_COORDINATOR: 3,
    API_VERSIONS: 3,
    SASL_AUTHENTICATE: 2,
    # SaslHandshake has no flexible version.
}

# The versions of the SASL APIs the proxy answers itself, advertised in ApiVersions.
SASL_API_VERSIONS = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}

ADVERTISED_HOST = "127.0.0.1"
# Kafka's socket.request.max.bytes default; before authentication Kafka allows far less
# (sasl.server.max.receive.size), so an unauthenticated client cannot make the proxy buffer much.
MAX_FRAME = 100 * 1024 * 1024
MAX_FRAME_BEFORE_AUTH = 512 * 1024

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's minimum and librdkafka's expectation; also what `kafka-configs --add-config SCRAM-...` uses.
SCRAM_ITERATIONS = 4096


def is_flexible(api_key, version):
    since = FLEXIBLE_SINCE.get(api_key)
    return since is not None and version >= since


def response_header_has_tags(api_key, version):
    # Response header v1 (correlation id + tagged fields) goes with flexible versions, except for
    # ApiVersions, whose response header stays v0 so that a client can always read it (KIP-511).
    return api_key != API_VERSIONS and is_flexible(api_key, version)


# ---------------------------------------------------------------------------------------------
# Primitive types


class ProtocolError(Exception):
    """Bytes that are not the message they should be."""


class Reader:
    """A checked big-endian cursor over one frame; every read past the end raises ProtocolError."""

    def __init__(self, data, pos=0):
        self.data = data
        self.pos = pos

    def take(self, n):
        if n < 0 or n > len(self.data) - self.pos:
            raise ProtocolError(f"truncated: {n} bytes wanted at offset {self.pos} of {len(self.data)}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _unpack(self, fmt, size):
        return struct.unpack(fmt, self.take(size))[0]

    def int8(self):
        return self._unpack(">b", 1)

    def int16(self):
        return self._unpack(">h", 2)

    def int32(self):
        return self._unpack(">i", 4)

    def int64(self):
        return self._unpack(">q", 8)

    def uvarint(self):
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ProtocolError("unsigned varint longer than 5 bytes")

    def _length(self, flexible, wide):
        # Non-flexible: INT16 (strings) or INT32 (bytes, arrays) with -1 for null; flexible:
        # UVARINT of length + 1 with 0 for null. Returns -1 for null.
        if flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self, flexible):
        """STRING / NULLABLE_STRING, or their COMPACT_ forms when flexible; None for null."""
        n = self._length(flexible, wide=False)
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"string is not UTF-8: {e}") from None

    def bytes(self, flexible):
        """BYTES / NULLABLE_BYTES, or their COMPACT_ forms when flexible; None for null."""
        n = self._length(flexible, wide=True)
        return None if n < 0 else self.take(n)

    def array_length(self, flexible):
        """ARRAY or COMPACT_ARRAY element count; -1 for a null array."""
        return self._length(flexible, wide=True)

    def skip_tagged_fields(self):
        # TAG_BUFFER: UVARINT count, then per field UVARINT tag, UVARINT size, size bytes.
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def rest(self):
        return self.data[self.pos:]


def encode_uvarint(value):
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_length(n, flexible, wide):
    if flexible:
        return encode_uvarint(n + 1)
    return struct.pack(">i" if wide else ">h", n)


def encode_string(s, flexible):
    if s is None:
        return encode_length(-1, flexible, wide=False)
    b = s.encode("utf-8")
    return encode_length(len(b), flexible, wide=False) + b


def encode_bytes(b, flexible):
    if b is None:
        return encode_length(-1, flexible, wide=True)
    return encode_length(len(b), flexible, wide=True) + b


def encode_array_length(n, flexible):
    return encode_length(n, flexible, wide=True)


EMPTY_TAGS = b"\x00"


def frame(payload):
    """A frame on the wire: INT32 size, then the payload."""
    return struct.pack(">i", len(payload)) + payload


def response_frame(api_key, version, correlation_id, body):
    header = struct.pack(">i", correlation_id)
    if response_header_has_tags(api_key, version):
        header += EMPTY_TAGS
    return frame(header + body)


# ---------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int


def parse_request_header(payload):
    """Request header v1/v2; returns the header and a Reader at the start of the body.

    api_key INT16, api_version INT16, correlation_id INT32, client_id NULLABLE_STRING (never
    compact, even in header v2), then (v2, flexible requests) TAG_BUFFER. Whether the request is
    flexible is only known for the APIs in FLEXIBLE_SINCE, so the body offset is only right for
    those, which are the only bodies the proxy reads.
    """
    r = Reader(payload)
    header = RequestHeader(r.int16(), r.int16(), r.int32())
    r.string(flexible=False)
    if is_flexible(header.api_key, header.api_version):
        r.skip_tagged_fields()
    return header, r


def produce_expects_response(version, body):
    """False for a Produce request with acks=0, which the broker never answers.

    Produce request: (v3+) transactional_id NULLABLE_STRING (compact from v9), acks INT16, ...
    """
    if version >= 3:
        body.string(is_flexible(PRODUCE, version))
    return body.int16() != 0


# ---------------------------------------------------------------------------------------------
# Responses the proxy rewrites


def rewrite_metadata(version, r, port):
    """Points every broker of a Metadata response at the proxy.

    Metadata response (api key 3), up to the broker list:
      (v3+)  throttle_time_ms INT32
      brokers ARRAY (COMPACT_ARRAY from v9) of
             node_id INT32
             host    STRING (COMPACT_STRING from v9)
             port    INT32
             rack    NULLABLE_STRING (v1+; COMPACT_NULLABLE_STRING from v9)
             (v9+)   TAG_BUFFER
    followed by cluster_id (v2+), controller_id (v1+), topics, ... which are copied unchanged.
    """
    flexible = is_flexible(METADATA, version)
    out = []
    start = r.pos
    if version >= 3:
        r.int32()
    out.append(r.data[start:r.pos])
    count = r.array_length(flexible)
    out.append(encode_array_length(count, flexible))
    for _ in range(max(count, 0)):
        node_id = r.int32()
        r.string(flexible)
        r.int32()
        tail = r.pos
        if version >= 1:
            r.string(flexible)
        if flexible:
            r.skip_tagged_fields()
        out.append(struct.pack(">i", node_id) + encode_string(ADVERTISED_HOST, flexible)
                   + struct.pack(">i", port) + r.data[tail:r.pos])
    out.append(r.rest())
    return b"".join(out)


def rewrite_find_coordinator(version, r, port):
    """Points the coordinator(s) of a FindCoordinator response at the proxy.

    FindCoordinator response (api key 10):
      v0    error_code INT16, node_id INT32, host STRING, port INT32
      v1-2  throttle_time_ms INT32, error_code INT16, error_message NULLABLE_STRING,
            node_id INT32, host STRING, port INT32
      v3    as v1-2 with COMPACT_ strings, then TAG_BUFFER
      v4+   throttle_time_ms INT32, coordinators COMPACT_ARRAY of
              key COMPACT_STRING, node_id INT32, host COMPACT_STRING, port INT32,
              error_code INT16, error_message COMPACT_NULLABLE_STRING, TAG_BUFFER
            then TAG_BUFFER
    A coordinator with an error (node_id -1, host "", port -1) is left as it is.
    Returns None when nothing changes.
    """
    flexible = is_flexible(FIND_COORDINATOR, version)
    start = r.pos
    if version < 4:
        if version >= 1:
            r.int32()
        error_code = r.int16()
        if version >= 1:
            r.string(flexible)
        r.int32()
        if error_code != 0:
            return None
        head = r.data[start:r.pos]
        r.string(flexible)
        r.int32()
        return head + encode_string(ADVERTISED_HOST, flexible) + struct.pack(">i", port) + r.rest()

    r.int32()
    out = [r.data[start:r.pos]]
    count = r.array_length(flexible)
    out.append(encode_array_length(count, flexible))
    for _ in range(max(count, 0)):
        entry = r.pos
        r.string(flexible)
        r.int32()
        head = r.data[entry:r.pos]
        r.string(flexible)
        r.int32()
        tail = r.pos
        error_code = r.int16()
        r.string(flexible)
        r.skip_tagged_fields()
        if error_code != 0:
            out.append(r.data[entry:r.pos])
        else:
            out.append(head + encode_string(ADVERTISED_HOST, flexible) + struct.pack(">i", port)
                       + r.data[tail:r.pos])
    out.append(r.rest())
    return b"".join(out)


def advertise_sasl_versions(version, r):
    """Makes an ApiVersions response list SaslHandshake and SaslAuthenticate with the versions the
    proxy implements (adding or correcting the entries); None when it already does.

    ApiVersions response (api key 18; response header v0 in every version, KIP-511):
      error_code INT16
      api_keys   ARRAY (COMPACT_ARRAY from v3) of
                   api_key INT16, min_version INT16, max_version INT16, (v3+) TAG_BUFFER
      (v1+)      throttle_time_ms INT32
      (v3+)      TAG_BUFFER (supported and finalized features are tagged fields)
    A response with an error (35 UNSUPPORTED_VERSION to a too-new request) has a v0 body whatever
    the version asked for, so it is passed on unchanged.
    """
    flexible = is_flexible(API_VERSIONS, version)
    error_code = r.int16()
    if error_code != 0:
        return None
    entries = []
    for _ in range(max(r.array_length(flexible), 0)):
        api_key, min_version, max_version = r.int16(), r.int16(), r.int16()
        tags = r.pos
        if flexible:
            r.skip_tagged_fields()
        entries.append([api_key, min_version, max_version, r.data[tags:r.pos]])
    rest = r.rest()

    changed = False
    seen = set()
    for entry in entries:
        wanted = SASL_API_VERSIONS.get(entry[0])
        if wanted is not None:
            seen.add(entry[0])
            if tuple(entry[1:3]) != wanted:
                entry[1:3] = wanted
                changed = True
    for api_key, (min_version, max_version) in SASL_API_VERSIONS.items():
        if api_key not in seen:
            entries.append([api_key, min_version, max_version, EMPTY_TAGS if flexible else b""])
            changed = True
    if not changed:
        return None
    out = [struct.pack(">h", error_code), encode_array_length(len(entries), flexible)]
    out += [struct.pack(">hhh", k, lo, hi) + tags for k, lo, hi, tags in entries]
    out.append(rest)
    return b"".join(out)


def rewrite_response(api_key, version, payload, port, sasl):
    """The response payload the client gets for a forwarded request (the same bytes when nothing
    needs to change). Raises ProtocolError when a response that must be rewritten does not parse."""
    if api_key not in (METADATA, FIND_COORDINATOR) and not (sasl and api_key == API_VERSIONS):
        return payload
    r = Reader(payload)
    r.int32()  # correlation id
    if response_header_has_tags(api_key, version):
        r.skip_tagged_fields()
    header = payload[:r.pos]
    if api_key == METADATA:
        body = rewrite_metadata(version, r, port)
    elif api_key == FIND_COORDINATOR:
        body = rewrite_find_coordinator(version, r, port)
    else:
        body = advertise_sasl_versions(version, r)
    return payload if body is None else header + body


# ---------------------------------------------------------------------------------------------
# SASL mechanisms (server side)


class AuthenticationFailed(Exception):
    """Wrong credentials or a malformed exchange; str() is the message sent to the client."""


@dataclass(frozen=True)
class ScramCredential:
    """What a Kafka broker stores for a SCRAM user (never the password itself)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, hash_name, password, salt, iterations=SCRAM_ITERATIONS):
        # RFC 5802 section 3: SaltedPassword = Hi(password, salt, i) (PBKDF2 with HMAC),
        # ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey),
        # ServerKey = HMAC(SaltedPassword, "Server Key").
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        return cls(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                   hmac.digest(salted, b"Server Key", hash_name))


class UserStore:
    """The credentials of the --sasl-users file, per mechanism."""

    def __init__(self):
        self.plain = {}  # user -> password bytes
        self.scram = {mechanism: {} for mechanism in SCRAM_HASHES}  # mechanism -> user -> credential

    @property
    def mechanisms(self):
        enabled = {"PLAIN": bool(self.plain), **{m: bool(users) for m, users in self.scram.items()}}
        return [m for m in MECHANISMS if enabled[m]]

    @classmethod
    def load(cls, path):
        store = cls()
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                if not fields or fields[0].startswith("#"):
                    continue
                if len(fields) != 3 or fields[0] not in MECHANISMS:
                    raise ValueError(f"{path}:{lineno}: expected `MECHANISM USER PASSWORD` with "
                                     f"MECHANISM one of {', '.join(MECHANISMS)}")
                store.add(*fields)
        if not store.mechanisms:
            raise ValueError(f"{path}: no credentials")
        return store

    def add(self, mechanism, user, password):
        if mechanism == "PLAIN":
            self.plain[user] = password.encode("utf-8")
        else:
            # A fresh random salt per user, as `kafka-configs --add-config SCRAM-...` does.
            self.scram[mechanism][user] = ScramCredential.derive(
                SCRAM_HASHES[mechanism], password, secrets.token_bytes(16))

    def authenticator(self, mechanism):
        if mechanism == "PLAIN":
            return PlainServer(self.plain)
        return ScramServer(mechanism, self.scram[mechanism])


class PlainServer:
    """RFC 4616: one client message `authzid NUL authcid NUL passwd`, an empty answer."""

    FAILED = "Authentication failed: Invalid username or password"  # Kafka's PlainSaslServer text

    def __init__(self, passwords):
        self.passwords = passwords
        self.complete = False
        self.user = None

    def evaluate(self, token):
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                       f"{len(parts)}")
        authzid, authcid, password = parts
        try:
            user = authcid.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.FAILED) from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        # Kafka accepts an authorization id only when it names the authenticated user.
        if authzid and authzid != authcid:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username")
        self.user = user
        expected = self.passwords.get(user)
        if expected is None or not hmac.compare_digest(password, expected):
            raise AuthenticationFailed(self.FAILED)
        self.complete = True
        return b""


class ScramServer:
    """RFC 5802 / RFC 7677 server: client-first -> server-first, client-final -> server-final.

    client-first:  gs2-header client-first-bare, gs2-header = "n," or "y," then "a=authzid" or
                   nothing, then ","; client-first-bare = "n=username,r=client-nonce[,ext...]"
    server-first:  "r=client-nonce+server-nonce,s=base64(salt),i=iterations"
    client-final:  "c=base64(gs2-header),r=nonce[,ext...],p=base64(ClientProof)"
    server-final:  "v=base64(ServerSignature)"
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof.
    """

    def __init__(self, mechanism, credentials, server_nonce=None):
        self.mechanism = mechanism
        self.hash_name = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        # Fixed only to replay the RFC example; otherwise fresh, printable and without ",".
        self.server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.complete = False
        self.user = None
        self._state = self._client_first
        # Set by the client-first message, used to check the client-final one.
        self._credential = self._gs2_header = self._nonce = None
        self._client_first_bare = self._server_first = None
        self.failed_message = ("Authentication failed during authentication due to invalid "
                               f"credentials with SASL mechanism {mechanism}")  # Kafka's text

    def evaluate(self, token):
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"Invalid {self.mechanism} message: not UTF-8") from None
        return self._state(text).encode("utf-8")

    @staticmethod
    def _attributes(text):
        attrs = []
        for item in text.split(","):
            if len(item) < 2 or item[1] != "=":
                raise AuthenticationFailed(f"Invalid SCRAM attribute {item!r}")
            attrs.append((item[0], item[2:]))
        return attrs

    @staticmethod
    def _saslname(name):
        # RFC 5802 section 5.1: "," is sent as "=2C" and "=" as "=3D"; any other "=" is invalid.
        if name.replace("=2C", "").replace("=3D", "").count("="):
            raise AuthenticationFailed("Invalid SCRAM username encoding")
        return name.replace("=2C", ",").replace("=3D", "=")

    def _client_first(self, text):
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        cbind, authzid, bare = parts
        if cbind not in ("n", "y"):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        if authzid and not authzid.startswith("a="):
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        attrs = self._attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        user = self._saslname(attrs[0][1])
        if authzid and self._saslname(authzid[2:]) != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username")
        credential = self.credentials.get(user)
        if credential is None:
            raise AuthenticationFailed(self.failed_message)
        self.user = user
        self._credential = credential
        self._gs2_header = f"{cbind},{authzid},"
        self._nonce = attrs[1][1] + self.server_nonce
        self._client_first_bare = bare
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = self._client_final
        return self._server_first

    def _client_final(self, text):
        cut = text.rfind(",p=")
        if cut < 0:
            raise AuthenticationFailed("Invalid SCRAM client-final message: no proof")
        without_proof, proof_b64 = text[:cut], text[cut + 3:]
        attrs = self._attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise AuthenticationFailed("Invalid SCRAM client-final message")
        if attrs[0][1] != base64.b64encode(self._gs2_header.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client-final message: channel binding "
                                       "does not match the client-first message")
        if attrs[1][1] != self._nonce:
            raise AuthenticationFailed("Invalid SCRAM client-final message: nonce mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client proof encoding") from None
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self.hash_name)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed(self.failed_message)
        # ClientProof = ClientKey XOR ClientSignature, so XOR recovers the client key; the proof
        # is right when its hash is the StoredKey.
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(),
                                   credential.stored_key):
            raise AuthenticationFailed(self.failed_message)
        server_signature = hmac.digest(credential.server_key, auth_message, self.hash_name)
        self.complete = True
        self._state = self._done
        return "v=" + base64.b64encode(server_signature).decode()

    def _done(self, text):
        raise AuthenticationFailed("SCRAM exchange already complete")


# ---------------------------------------------------------------------------------------------
# One client connection


@dataclass(frozen=True)
class Forwarded:
    """A request sent upstream whose response is the next upstream frame in turn."""

    header: RequestHeader


@dataclass(frozen=True)
class Local:
    """A response the proxy made itself, already framed; close_after ends the connection."""

    frame: bytes
    close_after: bool = False


class SaslSession:
    """The SASL state of one connection: handshake, then one or more authenticate rounds."""

    def __init__(self, users, label):
        self.users = users
        self.label = label
        self.mechanism = None
        self.authenticator = None
        self.raw_tokens = False  # after SaslHandshake v0 tokens come as bare frames (KIP-43)
        self.authenticated = False

    def handshake(self, header, body):
        """SaslHandshake request v0-1: mechanism STRING.
        SaslHandshake response v0-1: error_code INT16, mechanisms ARRAY of STRING."""
        mechanism = body.string(flexible=False)
        if self.authenticated or self.mechanism is not None:
            error_code, close = ILLEGAL_SASL_STATE, not self.authenticated
            log.warning("%s: unexpected SaslHandshake (%s)", self.label,
                        "already authenticated" if self.authenticated else "second handshake")
        elif mechanism not in self.users.mechanisms:
            error_code, close = UNSUPPORTED_SASL_MECHANISM, True
            log.warning("%s: SASL mechanism %r is not enabled", self.label, mechanism)
        else:
            error_code, close = 0, False
            self.mechanism = mechanism
            self.authenticator = self.users.authenticator(mechanism)
            self.raw_tokens = header.api_version == 0
        mechanisms = self.users.mechanisms
        body = struct.pack(">hi", error_code, len(mechanisms))
        body += b"".join(encode_string(m, flexible=False) for m in mechanisms)
        return Local(response_frame(SASL_HANDSHAKE, header.api_version, header.correlation_id, body),
                     close)

    def authenticate(self, header, body):
        """SaslAuthenticate request: auth_bytes BYTES (v2+: COMPACT_BYTES, then TAG_BUFFER).
        SaslAuthenticate response: error_code INT16, error_message NULLABLE_STRING,
        auth_bytes BYTES, (v1+) session_lifetime_ms INT64; v2+ compact forms and a TAG_BUFFER."""
        flexible = is_flexible(SASL_AUTHENTICATE, header.api_version)
        token = body.bytes(flexible) or b""
        close = False
        challenge = b""
        if self.authenticated:
            error_code, message = ILLEGAL_SASL_STATE, "SaslAuthenticate after successful authentication"
        elif self.authenticator is None:
            error_code, message, close = ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake", True
        else:
            try:
                challenge = self._evaluate(token)
                error_code, message = 0, None
            except AuthenticationFailed as e:
                error_code, message, close = SASL_AUTHENTICATION_FAILED, str(e), True
        if error_code and error_code != SASL_AUTHENTICATION_FAILED:
            log.warning("%s: %s", self.label, message)
        out = struct.pack(">h", error_code) + encode_string(message, flexible)
        out += encode_bytes(challenge, flexible)
        if header.api_version >= 1:
            out += struct.pack(">q", 0)  # session_lifetime_ms: no re-authentication
        if flexible:
            out += EMPTY_TAGS
        return Local(response_frame(SASL_AUTHENTICATE, header.api_version, header.correlation_id, out),
                     close)

    def raw_token(self, token):
        """After SaslHandshake v0 the token and its answer are bare frames, and a failure can only
        be told by closing the connection."""
        try:
            return Local(frame(self._evaluate(token)))
        except AuthenticationFailed:
            return Local(b"", close_after=True)

    def _evaluate(self, token):
        try:
            challenge = self.authenticator.evaluate(token)
        except AuthenticationFailed as e:
            log.warning("%s: SASL %s authentication failed (user %r): %s", self.label,
                        self.mechanism, self.authenticator.user, e)
            raise
        if self.authenticator.complete:
            self.authenticated = True
            self.raw_tokens = False
            log.info("%s: authenticated user %r with %s", self.label, self.authenticator.user,
                     self.mechanism)
        return challenge


class ProxyConnection:
    """One client connection and its own upstream connection.

    Two tasks: one reads client requests and either forwards them upstream or answers them
    locally; the other writes the responses to the client strictly in request order (Kafka clients
    rely on it), reading the upstream response when the next one in turn is a forwarded request.
    """

    CLOSE_NOW = "close now"
    CLOSE_AFTER_RESPONSES = "close after the queued responses"

    def __init__(self, proxy, reader, writer, label):
        self.proxy = proxy
        self.client_reader = reader
        self.client_writer = writer
        self.label = label
        self.sasl = SaslSession(proxy.users, label) if proxy.users else None
        self.in_order = asyncio.Queue()
        self.upstream_reader = None
        self.upstream_writer = None

    async def run(self):
        try:
            self.upstream_reader, self.upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.proxy.upstream), timeout=10)
        except (OSError, asyncio.TimeoutError) as e:
            log.warning("%s: cannot connect upstream to %s:%d: %s", self.label, *self.proxy.upstream, e)
            await self._close(self.client_writer)
            return
        requests = asyncio.create_task(self._pump_requests())
        responses = asyncio.create_task(self._pump_responses())
        try:
            done, _ = await asyncio.wait({requests, responses}, return_when=asyncio.FIRST_COMPLETED)
            if requests in done and not requests.cancelled() and requests.exception() is None \
                    and requests.result() == self.CLOSE_AFTER_RESPONSES:
                await asyncio.wait({responses}, timeout=10)
            for task in (requests, responses):
                if task.done() and not task.cancelled() and task.exception() is not None:
                    self._log_failure(task.exception())
        finally:
            for task in (requests, responses):
                task.cancel()
            await asyncio.gather(requests, responses, return_exceptions=True)
            await self._close(self.upstream_writer)
            await self._close(self.client_writer)
            log.debug("%s: closed", self.label)

    def _log_failure(self, exc):
        if isinstance(exc, ProtocolError):
            log.warning("%s: closing: %s", self.label, exc)
        elif isinstance(exc, (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError)):
            log.debug("%s: connection ended: %r", self.label, exc)
        else:
            log.error("%s: closing after an unexpected error", self.label, exc_info=exc)

    @staticmethod
    async def _close(writer):
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass

    async def _pump_requests(self):
        while True:
            authenticating = self.sasl is not None and not self.sasl.authenticated
            payload = await read_frame(self.client_reader,
                                       MAX_FRAME_BEFORE_AUTH if authenticating else MAX_FRAME)
            if payload is None:
                return self.CLOSE_NOW
            if self.sasl is not None and self.sasl.raw_tokens:
                local = self.sasl.raw_token(payload)
                self.in_order.put_nowait(local)
                if local.close_after:
                    return self.CLOSE_AFTER_RESPONSES
                continue

            header, body = parse_request_header(payload)
            if self.proxy.verbose:
                log.info("%s: request api_key=%d v%d correlation_id=%d", self.label,
                         header.api_key, header.api_version, header.correlation_id)
            if self.sasl is not None:
                local = None
                if header.api_key == SASL_HANDSHAKE:
                    self._check_version(header, 1)
                    local = self.sasl.handshake(header, body)
                elif header.api_key == SASL_AUTHENTICATE:
                    self._check_version(header, 2)
                    local = self.sasl.authenticate(header, body)
                elif not self.sasl.authenticated and header.api_key != API_VERSIONS:
                    log.warning("%s: closing: request api_key=%d before SASL authentication",
                                self.label, header.api_key)
                    return self.CLOSE_NOW
                if local is not None:
                    self.in_order.put_nowait(local)
                    if local.close_after:
                        return self.CLOSE_AFTER_RESPONSES
                    continue

            if header.api_key != PRODUCE or produce_expects_response(header.api_version, body):
                self.in_order.put_nowait(Forwarded(header))
            self.upstream_writer.write(frame(payload))
            await self.upstream_writer.drain()

    def _check_version(self, header, max_version):
        # The proxy advertises these maximum versions, so a newer request is a broken client.
        if header.api_version > max_version:
            raise ProtocolError(f"api_key={header.api_key} v{header.api_version} is not supported "
                                f"(max v{max_version})")

    async def _pump_responses(self):
        while True:
            item = await self.in_order.get()
            if isinstance(item, Local):
                self.client_writer.write(item.frame)
                await self.client_writer.drain()
                if item.close_after:
                    return
                continue
            payload = await read_frame(self.upstream_reader, MAX_FRAME)
            if payload is None:
                raise ProtocolError("the upstream broker closed the connection")
            header = item.header
            correlation_id = Reader(payload).int32()
            if correlation_id != header.correlation_id:
                raise ProtocolError(f"upstream answered correlation id {correlation_id}, expected "
                                    f"{header.correlation_id} (api_key={header.api_key})")
            try:
                payload = rewrite_response(header.api_key, header.api_version, payload,
                                           self.proxy.listen_port, self.sasl is not None)
            except ProtocolError as e:
                # Passing the broker's own address on would let the client bypass the proxy.
                raise ProtocolError(f"cannot rewrite api_key={header.api_key} "
                                    f"v{header.api_version} response: {e}") from None
            self.client_writer.write(frame(payload))
            await self.client_writer.drain()


async def read_frame(reader, limit):
    """The payload of the next INT32-size-prefixed frame; None on a clean end of stream."""
    try:
        size_bytes = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ProtocolError("connection closed inside a frame header") from None
        return None
    size = struct.unpack(">i", size_bytes)[0]
    if size < 0 or size > limit:
        raise ProtocolError(f"frame size {size} outside 0..{limit}")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError(f"connection closed inside a {size}-byte frame") from None


# ---------------------------------------------------------------------------------------------
# Server


class Proxy:
    def __init__(self, upstream, users, tls, verbose):
        self.upstream = upstream
        self.users = users
        self.tls = tls
        self.verbose = verbose
        self.listen_port = None
        self._connections = 0

    async def handle(self, reader, writer):
        self._connections += 1
        peer = writer.get_extra_info("peername")
        label = f"conn {self._connections} from {peer[0]}:{peer[1]}" if peer else \
            f"conn {self._connections}"
        log.debug("%s: accepted", label)
        if self.tls is not None:
            # TLS is started here rather than by the server so that a failed handshake (such as a
            # plaintext client on the TLS port) is logged, not silently dropped by asyncio.
            try:
                await writer.start_tls(self.tls, ssl_handshake_timeout=10)
            except (OSError, asyncio.TimeoutError) as e:
                log.warning("%s: TLS handshake failed: %s", label, e)
                writer.transport.abort()
                return
        await ProxyConnection(self, reader, writer, label).run()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen-port", type=int, required=True, help="port on 127.0.0.1; 0 for any free one")
    p.add_argument("--upstream", required=True, metavar="HOST:PORT", help="the plaintext broker")
    p.add_argument("--tls-cert", metavar="PEM", help="server certificate chain (enables TLS)")
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    p.add_argument("--sasl-users", metavar="FILE", help="`MECHANISM USER PASSWORD` lines (enables SASL)")
    p.add_argument("--ready-file", metavar="FILE", help="where to write PORT=<n> once listening")
    p.add_argument("--verbose", action="store_true", help="log every request")
    args = p.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    host, sep, port = args.upstream.rpartition(":")
    if not sep or not host or not port.isdigit():
        p.error("--upstream must be HOST:PORT")
    args.upstream = (host, int(port))
    return args


def write_ready_file(path, line):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(line + "\n")
    os.replace(tmp, path)


async def serve(args, users, tls):
    proxy = Proxy(args.upstream, users, tls, args.verbose)
    # Bind first so that the port to advertise is known before the first connection arrives.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.listen_port))
    proxy.listen_port = sock.getsockname()[1]
    server = await asyncio.start_server(proxy.handle, sock=sock)

    line = f"PORT={proxy.listen_port}"
    print(line, flush=True)
    if args.ready_file:
        write_ready_file(args.ready_file, line)
    log.info("listening on 127.0.0.1:%d (%s, %s), forwarding to %s:%d", proxy.listen_port,
             "TLS" if tls else "plaintext",
             f"SASL {', '.join(users.mechanisms)}" if users else "no SASL", *args.upstream)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    log.info("stopping")


def main(argv):
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="kafka_secure_proxy: %(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        users = UserStore.load(args.sasl_users) if args.sasl_users else None
        tls = None
        if args.tls_cert:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.minimum_version = ssl.TLSVersion.TLSv1_2
            tls.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ValueError, ssl.SSLError) as e:
        log.error("%s", e)
        return 2
    try:
        asyncio.run(serve(args, users, tls))
    except OSError as e:
        log.error("cannot listen on 127.0.0.1:%d: %s", args.listen_port, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
