"""Hand-built byteps frames, for hostile-peer tests and fault trials that must speak (or break)
the wire protocol without the core.

Frame header (docs/wire-format.md): 48 bytes, little-endian: magic "BPS1", version, opcode,
dtype, reserved, flags, sender, round, pad, key, request id, payload length, arg.

Authentication (when BYTEPS_JOB_SECRET is set): each side first sends AuthChallenge (a 32-byte
random nonce) and answers the other's with AuthResponse = HMAC-SHA256(secret, b"byteps-auth-v1"
+ role + peer_nonce + own_nonce), role b"C" for the connecting side, b"A" for the accepting one.

The wire version is learnt from the first frame a service sends (:func:`read_frame`), so that a
malformed frame is refused for what is wrong with it, not for an outdated version.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import time
from typing import Optional

HEADER = struct.Struct("<IBBBBHIIHQQQI")
assert HEADER.size == 48
MAGIC = 0x31535042
REGISTER, HELLO, PUSH_PULL = 1, 16, 18
AUTH_CHALLENGE, AUTH_RESPONSE = 23, 24
AUTH_LABEL = b"byteps-auth-v1"
NONCE_BYTES = 32

_learned: dict[str, Optional[int]] = {"version": None}


def wire_version() -> Optional[int]:
    """The version the services spoke in the last frame read; None before any."""
    return _learned["version"]


def frame(opcode: int, payload: bytes = b"", *, version: Optional[int] = None, magic: int = MAGIC,
          payload_len: Optional[int] = None, sender: int = 0, key: int = 0, arg: int = 0) -> bytes:
    """One frame; *version* defaults to the learnt one (read a frame from a service first)."""
    version = _learned["version"] if version is None else version
    if version is None:
        raise RuntimeError("the wire version is not known yet: read a service's first frame first")
    header = HEADER.pack(magic, version, opcode, 0, 0, 0, sender, 0, 0, key, 0,
                         len(payload) if payload_len is None else payload_len, arg)
    return header + payload


def proof(secret: bytes, role: bytes, peer_nonce: bytes, own_nonce: bytes) -> bytes:
    """The AuthResponse payload *role* (b"C" or b"A") sends."""
    return hmac.new(secret, AUTH_LABEL + role + peer_nonce + own_nonce, hashlib.sha256).digest()


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_frame(sock: socket.socket, max_payload: int = 1 << 20) -> tuple[int, int, bytes]:
    """(opcode, version, payload) of the next frame; its version becomes the learnt one."""
    fields = HEADER.unpack(read_exactly(sock, HEADER.size))
    if fields[0] != MAGIC:
        raise ConnectionError(f"bad magic {fields[0]:#x} from the peer")
    if fields[11] > max_payload:
        raise ConnectionError(f"the peer announced {fields[11]} bytes")
    _learned["version"] = fields[1]
    return fields[2], fields[1], read_exactly(sock, fields[11])


def closed_within(sock: socket.socket, timeout: float) -> Optional[float]:
    """Discards what the peer sends until it closes (or resets); seconds it took, None at *timeout*."""
    start = time.monotonic()
    while True:
        left = start + timeout - time.monotonic()
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
