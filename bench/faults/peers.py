"""Hostile peers for the fault trials: frames built by hand, the authentication handshake in
Python, garbage.

Frame header (docs/wire-format.md): 48 bytes, little-endian: magic "BPS1", version, opcode,
dtype, reserved, flags, sender, round, pad, key, request id, payload length, arg.

Authentication (when BYTEPS_JOB_SECRET is set): each side first sends AuthChallenge (opcode 23,
a 32-byte random nonce) and answers the other's with AuthResponse (opcode 24) =
HMAC-SHA256(secret, b"byteps-auth-v1" + role + peer_nonce + own_nonce), role b"C" for the
connecting side, b"A" for the accepting side.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import socket
import struct
import time
from typing import Optional

HEADER = "<IBBBBHIIHQQQI"
HEADER_BYTES = struct.calcsize(HEADER)  # 48
MAGIC = 0x31535042
REGISTER, HELLO, PUSH_PULL = 1, 16, 18
AUTH_CHALLENGE, AUTH_RESPONSE = 23, 24
AUTH_LABEL = b"byteps-auth-v1"
assert HEADER_BYTES == 48


# The wire version of the build under test, learnt from the first frame a service sends.
_wire = {"version": 1}


def frame(opcode: int, payload: bytes = b"", *, version: Optional[int] = None, magic: int = MAGIC,
          payload_len: Optional[int] = None, sender: int = 0, key: int = 0, arg: int = 0) -> bytes:
    """One frame; *version* defaults to the version the service spoke (see :func:`first_frame`)."""
    version = _wire["version"] if version is None else version
    header = struct.pack(HEADER, magic, version, opcode, 0, 0, 0, sender, 0, 0, key, 0,
                         len(payload) if payload_len is None else payload_len, arg)
    return header + payload


def auth_response(secret: bytes, role: bytes, peer_nonce: bytes, own_nonce: bytes) -> bytes:
    return hmac.new(secret, AUTH_LABEL + role + peer_nonce + own_nonce, hashlib.sha256).digest()


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """(opcode, payload) of the next frame (its version becomes the one :func:`frame` uses)."""
    fields = struct.unpack(HEADER, read_exactly(sock, HEADER_BYTES))
    if fields[0] == MAGIC:
        _wire["version"] = fields[1]
    if fields[11] > 1 << 20:
        raise ConnectionError(f"peer announced {fields[11]} bytes")
    return fields[2], read_exactly(sock, fields[11])


def wait_closed(sock: socket.socket, timeout: float) -> Optional[float]:
    """Reads and discards until the peer closes; seconds it took, or None at *timeout*."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except socket.timeout:
            return None
        except OSError:  # reset
            return time.monotonic() - start


def authenticate(sock: socket.socket, secret: bytes, timeout: float = 5.0) -> bool:
    """Runs the handshake as the connecting side; True when the peer's response proves *secret*
    (a wrong *secret* gives False here; the peer should then close the connection)."""
    sock.settimeout(timeout)
    own = os.urandom(32)
    opcode, peer_nonce = read_frame(sock)  # first: it tells the wire version to answer in
    if opcode != AUTH_CHALLENGE or len(peer_nonce) != 32:
        raise ConnectionError(f"expected AuthChallenge, got opcode {opcode} ({len(peer_nonce)} bytes)")
    sock.sendall(frame(AUTH_CHALLENGE, own))
    sock.sendall(frame(AUTH_RESPONSE, auth_response(secret, b"C", peer_nonce, own)))
    opcode, proof = read_frame(sock)
    if opcode != AUTH_RESPONSE:
        raise ConnectionError(f"expected AuthResponse, got opcode {opcode}")
    return hmac.compare_digest(proof, auth_response(secret, b"A", own, peer_nonce))


def garbage_payloads(rng: random.Random) -> list[tuple[str, bytes]]:
    """(what, bytes) pairs a garbage peer sends."""
    return [
        ("random bytes", bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 47, 48, 4096])))),
        ("http", b"GET / HTTP/1.0\r\n\r\n"),
        ("wrong magic", frame(HELLO, magic=0xDEADBEEF)),
        ("wrong version", frame(HELLO, version=7)),
        ("unknown opcode", frame(200)),
        ("1 TB payload", frame(PUSH_PULL, payload_len=1 << 40)),
        ("truncated", frame(AUTH_CHALLENGE, b"x" * 10, payload_len=32)),
        ("hello before auth", frame(HELLO)),
        ("register before auth", frame(REGISTER, b'{"role": "worker"}')),
    ]


def garbage_peer(port: int, rng: random.Random, timeout: float = 3.0) -> str:
    """Connects to 127.0.0.1:port, sends one garbage message, waits (briefly) to be dropped."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            try:
                read_frame(s)  # the service's AuthChallenge: learn its wire version
            except (ConnectionError, OSError):
                pass
            what, data = rng.choice(garbage_payloads(rng))
            s.sendall(data)
            closed = wait_closed(s, timeout)
        return f"{what}: {'dropped' if closed is not None else 'not dropped'}"
    except OSError as err:
        return f"garbage: {err}"


def wrong_secret_peer(port: int, timeout: float = 3.0) -> str:
    """Connects to 127.0.0.1:port and authenticates with a wrong secret."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            try:
                ok = authenticate(s, b"not the job's secret", timeout)
            except (ConnectionError, OSError) as err:
                return f"refused during the handshake ({err})"
            closed = wait_closed(s, timeout)
            return f"peer proof {'valid?!' if ok else 'rejected'}, " \
                   f"{'dropped' if closed is not None else 'NOT dropped'}"
    except OSError as err:
        return f"connect failed: {err}"
