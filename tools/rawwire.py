"""Hand-built byteps frames, for hostile-peer tests and fault trials that must speak (or break)
the wire protocol without the core.

Frame header (docs/wire-format.md): 48 bytes, little-endian: magic "BPS1", version, opcode,
dtype, reserved, flags, sender, round, pad, key, request id, payload length, arg.

Authentication (when BYTEPS_JOB_SECRET is set): each side first sends AuthChallenge (a 32-byte
random nonce) and answers the other's with AuthResponse = HMAC-SHA256(secret, b"byteps-auth-v1"
+ role + peer_nonce + own_nonce), role b"C" for the connecting side, b"A" for the accepting one.

The wire version is learnt from the first frame a service sends (:func:`read_frame`), so that a
malformed frame is refused for what is wrong with it, not for an outdated version.  Where no
service speaks first (no secret: nothing is sent before the connecting side's first frame), it
is the version this checkout's core speaks (``kWireVersion`` in src/protocol/frame.h).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import socket
import struct
import time
from pathlib import Path
from typing import Optional

HEADER = struct.Struct("<IBBBBHIIHQQQI")
assert HEADER.size == 48
MAGIC = 0x31535042
REGISTER, REGISTER_REPLY, NODE_FAILED, FINISH, TERMINATE = 1, 2, 6, 7, 8
HELLO, INIT_KEY, PUSH_PULL = 16, 17, 18
AUTH_CHALLENGE, AUTH_RESPONSE = 23, 24
AUTH_LABEL = b"byteps-auth-v1"
NONCE_BYTES = 32
_FRAME_H = Path(__file__).resolve().parents[1] / "src" / "protocol" / "frame.h"

_learned: dict[str, Optional[int]] = {"version": None}


def wire_version() -> Optional[int]:
    """The version the services spoke in the last frame read; None before any."""
    return _learned["version"]


def checkout_version() -> int:
    """The wire version this checkout's core speaks (``kWireVersion`` in src/protocol/frame.h)."""
    m = re.search(r"kWireVersion\s*=\s*(\d+)", _FRAME_H.read_text())
    if not m:
        raise RuntimeError(f"no kWireVersion in {_FRAME_H}")
    return int(m.group(1))


def frame(opcode: int, payload: bytes = b"", *, version: Optional[int] = None, magic: int = MAGIC,
          payload_len: Optional[int] = None, sender: int = 0, key: int = 0, arg: int = 0) -> bytes:
    """One frame; *version* defaults to the learnt one, else to :func:`checkout_version`."""
    if version is None:
        version = _learned["version"] if _learned["version"] is not None else checkout_version()
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


def _read(sock: socket.socket, max_payload: int) -> tuple[tuple, bytes]:
    fields = HEADER.unpack(read_exactly(sock, HEADER.size))
    if fields[0] != MAGIC:
        raise ConnectionError(f"bad magic {fields[0]:#x} from the peer")
    if fields[11] > max_payload:
        raise ConnectionError(f"the peer announced {fields[11]} bytes")
    _learned["version"] = fields[1]
    return fields, read_exactly(sock, fields[11])


def read_frame(sock: socket.socket, max_payload: int = 1 << 20) -> tuple[int, int, bytes]:
    """(opcode, version, payload) of the next frame; its version becomes the learnt one."""
    fields, payload = _read(sock, max_payload)
    return fields[2], fields[1], payload


def read_frame_arg(sock: socket.socket, max_payload: int = 1 << 20) -> tuple[int, int, bytes]:
    """(opcode, arg, payload) of the next frame (e.g. Terminate's clean/failure flag)."""
    fields, payload = _read(sock, max_payload)
    return fields[2], fields[12], payload


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
