"""Hostile peers for the fault trials: a wrong secret, garbage (frames built with
tools/rawwire.py)."""

from __future__ import annotations

import hmac
import os
import random
import socket
import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.rawwire import (AUTH_CHALLENGE, AUTH_RESPONSE, HELLO, PUSH_PULL, REGISTER,  # noqa: E402
                           closed_within, frame, proof, read_frame)


def authenticate(sock: socket.socket, secret: bytes, timeout: float = 5.0) -> bool:
    """Runs the handshake as the connecting side; True when the peer's response proves *secret*
    (a wrong *secret* gives False here; the peer should then close the connection)."""
    sock.settimeout(timeout)
    own = os.urandom(32)
    opcode, _, peer_nonce = read_frame(sock)  # first: it tells the wire version to answer in
    if opcode != AUTH_CHALLENGE or len(peer_nonce) != 32:
        raise ConnectionError(f"expected AuthChallenge, got opcode {opcode} ({len(peer_nonce)} bytes)")
    sock.sendall(frame(AUTH_CHALLENGE, own))
    sock.sendall(frame(AUTH_RESPONSE, proof(secret, b"C", peer_nonce, own)))
    opcode, _, theirs = read_frame(sock)
    if opcode != AUTH_RESPONSE:
        raise ConnectionError(f"expected AuthResponse, got opcode {opcode}")
    return hmac.compare_digest(theirs, proof(secret, b"A", own, peer_nonce))


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
            except (ConnectionError, OSError) as err:
                return f"garbage: no AuthChallenge from the service ({err})"
            what, data = rng.choice(garbage_payloads(rng))
            s.sendall(data)
            closed = closed_within(s, timeout)
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
            closed = closed_within(s, timeout)
            return f"peer proof {'valid?!' if ok else 'rejected'}, " \
                   f"{'dropped' if closed is not None else 'NOT dropped'}"
    except OSError as err:
        return f"connect failed: {err}"
