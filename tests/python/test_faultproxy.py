"""tools.faultproxy against real loopback sockets: every fault does what it says.

The upstream is a small recording server (:class:`Recorder`): it keeps what each accepted
connection sent and can send to it, so each direction is checked byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import REPO  # conftest puts tools/ on sys.path
from tools.faultproxy import FaultProxy, send_command

PYTHON = "/usr/bin/python3"
IO_TIMEOUT = 5.0


class Conn:
    """One connection accepted by the recorder: ``data`` grows as bytes arrive; ``eof`` /
    ``error`` say how its input ended."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = bytearray()
        self.eof = False
        self.error: OSError | None = None
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                part = self.sock.recv(1 << 16)
            except OSError as err:
                with self.changed:
                    self.error = err
                    self.changed.notify_all()
                return
            with self.changed:
                if not part:
                    self.eof = True
                else:
                    self.data += part
                self.changed.notify_all()
            if not part:
                return

    def wait(self, predicate, timeout: float = IO_TIMEOUT) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout)

    def wait_bytes(self, n: int, timeout: float = IO_TIMEOUT) -> bytes:
        assert self.wait(lambda c: len(c.data) >= n or c.eof or c.error, timeout), \
            f"only {len(self.data)} of {n} bytes arrived"
        return bytes(self.data)


class Recorder:
    """A TCP server on 127.0.0.1 recording every connection (``conns``, in accept order)."""

    def __init__(self, echo: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.echo = echo
        self.conns: list[Conn] = []
        self.accepted = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            if self.echo:
                threading.Thread(target=self._echo, args=(sock,), daemon=True).start()
                continue
            with self.accepted:
                self.conns.append(Conn(sock))
                self.accepted.notify_all()

    @staticmethod
    def _echo(sock: socket.socket) -> None:
        with sock:
            try:
                while part := sock.recv(1 << 16):
                    sock.sendall(part)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def conn(self, count: int = 1) -> Conn:
        """The ``count``-th connection accepted (waits for it)."""
        with self.accepted:
            assert self.accepted.wait_for(lambda: len(self.conns) >= count, IO_TIMEOUT), "no connection arrived"
            return self.conns[count - 1]

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.sock.close()


@pytest.fixture
def recorder():
    r = Recorder()
    yield r
    r.close()


@pytest.fixture
def proxy(recorder):
    with FaultProxy(upstream=recorder.address, seed=7) as p:
        yield p


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        part = sock.recv(n - len(out))
        if not part:
            break
        out += part
    return bytes(out)


def recv_until_eof(sock: socket.socket) -> bytes:
    out = bytearray()
    while part := sock.recv(1 << 16):
        out += part
    return bytes(out)


def settle(client: socket.socket, recorder: Recorder, payload: bytes = b"hello", count: int = 1) -> Conn:
    """Sends ``payload`` and waits until the upstream (its ``count``-th connection) has it, so
    later sends are new chunks."""
    client.sendall(payload)
    conn = recorder.conn(count)
    assert conn.wait_bytes(len(payload)) == payload
    return conn


def diff_positions(a: bytes, b: bytes) -> list[int]:
    assert len(a) == len(b)
    return [i for i, (x, y) in enumerate(zip(a, b)) if x != y]


# --------------------------------------------------------------------------------------------


def test_forwards_both_ways_intact_and_in_order():
    payload = os.urandom(8 << 20)
    echo = Recorder(echo=True)
    with FaultProxy(upstream=echo.address) as p, connect(p.port) as c:
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(recv_exactly(c, len(payload))))
        reader.start()
        for i in range(0, len(payload), 100_003):  # odd sizes: chunks do not line up with sends
            c.sendall(payload[i:i + 100_003])
        reader.join(30)
        assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
        c.shutdown(socket.SHUT_WR)
        assert c.recv(1) == b""  # the FIN travelled up, the echo's FIN came back down
        stats = p.stats()
        assert stats["bytes_up"] == stats["bytes_down"] == len(payload)
        assert stats["accepted"] == 1 and stats["faults"] == 0
    echo.close()


def test_half_close_is_passed_on(proxy, recorder):
    with connect(proxy.port) as c:
        conn = settle(c, recorder, b"request")
        c.shutdown(socket.SHUT_WR)
        assert conn.wait(lambda x: x.eof), "the client's FIN did not reach the upstream"
        conn.sock.sendall(b"late reply")  # the other direction still works
        conn.sock.shutdown(socket.SHUT_WR)
        assert recv_until_eof(c) == b"late reply"
    deadline = time.monotonic() + IO_TIMEOUT
    while proxy.stats()["active"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.stats()["active"] == 0


@pytest.mark.parametrize("direction", ["up", "down"])
def test_corrupt_changes_exactly_one_byte(proxy, recorder, direction):
    data = bytes(range(256)) * 8
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        proxy.corrupt_next(direction)
        if direction == "up":
            c.sendall(data)
            got = conn.wait_bytes(5 + len(data))[5:]
        else:
            conn.sock.sendall(data)
            got = recv_exactly(c, len(data))
        [i] = diff_positions(got, data)
        assert got[i] == data[i] ^ 0xFF
        # only the next chunk: the one after arrives intact
        if direction == "up":
            c.sendall(data)
            assert conn.wait_bytes(5 + 2 * len(data))[5 + len(data):] == data
        else:
            conn.sock.sendall(data)
            assert recv_exactly(c, len(data)) == data
    assert proxy.stats()["by_fault"]["corrupt"] == 1


def test_corrupt_at_offset_both_directions_and_count(proxy, recorder):
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        proxy.corrupt_next("both", count=2, offset=3)
        for _ in range(2):
            before = len(conn.data)
            c.sendall(b"\x00" * 10)
            assert conn.wait_bytes(before + 10)[before:] == b"\x00\x00\x00\xff" + b"\x00" * 6
            conn.sock.sendall(b"\x00" * 10)
            assert recv_exactly(c, 10) == b"\x00\x00\x00\xff" + b"\x00" * 6
        c.sendall(b"\x00" * 4)
        assert conn.wait_bytes(before + 14)[-4:] == b"\x00" * 4
        proxy.corrupt_next("up", offset=1000)  # past the end: the last byte
        c.sendall(b"\x00" * 4)
        assert conn.wait_bytes(before + 18)[-4:] == b"\x00\x00\x00\xff"
    assert proxy.stats()["by_fault"]["corrupt"] == 5


@pytest.mark.parametrize("direction", ["up", "down"])
def test_duplicate_doubles_one_chunk(proxy, recorder, direction):
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        proxy.duplicate_next(direction)
        if direction == "up":
            c.sendall(b"B" * 100)
            assert conn.wait(lambda x: len(x.data) >= 205)
            c.sendall(b"C" * 10)
            assert conn.wait_bytes(215) == b"hello" + b"B" * 200 + b"C" * 10
        else:
            conn.sock.sendall(b"B" * 100)
            assert recv_exactly(c, 200) == b"B" * 200
            conn.sock.sendall(b"C" * 10)
            assert recv_exactly(c, 10) == b"C" * 10
        time.sleep(0.1)
        assert len(conn.data) == (215 if direction == "up" else 5)
    assert proxy.stats()["by_fault"]["duplicate"] == 1


def test_reset_all_gives_econnreset_both_sides_and_new_connections_work(proxy, recorder):
    clients = [connect(proxy.port) for _ in range(3)]
    for i, c in enumerate(clients):
        c.sendall(b"x")
    recorder.conn(count=3)
    assert proxy.stats()["active"] == 3
    assert proxy.reset_all() == 3
    for c in clients:
        with pytest.raises(ConnectionResetError):
            c.recv(10)
        c.close()
    for conn in recorder.conns:
        assert conn.wait(lambda x: x.error is not None or x.eof)
        assert isinstance(conn.error, ConnectionResetError), (conn.error, conn.eof)
    stats = proxy.stats()
    assert stats["active"] == 0 and stats["by_fault"]["reset"] == 3
    with connect(proxy.port) as c:
        c.sendall(b"again")
        assert recorder.conn(count=4).wait_bytes(5) == b"again"


def test_cut_all_closes_with_fin(proxy, recorder):
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        assert proxy.cut_all() == 1
        assert c.recv(10) == b""  # EOF, not an error
        assert conn.wait(lambda x: x.eof or x.error is not None)
        assert conn.eof and conn.error is None
    assert proxy.stats()["by_fault"]["cut"] == 1


def test_truncate_forwards_half_then_closes(proxy, recorder):
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        proxy.truncate_next("up")
        c.sendall(bytes(range(100)))
        assert conn.wait(lambda x: x.eof or x.error is not None)
        assert bytes(conn.data) == b"hello" + bytes(range(50)) and conn.eof
        assert c.recv(10) == b""
    with connect(proxy.port) as c:  # the next connection is whole again
        conn = settle(c, recorder, b"whole", count=2)
        proxy.truncate_next("down")
        conn.sock.sendall(b"0123456789")
        assert recv_until_eof(c) == b"01234"
        assert conn.wait(lambda x: x.eof or x.error is not None)
    assert proxy.stats()["by_fault"]["truncate"] == 2


def test_pause_holds_then_delivers(proxy, recorder):
    with connect(proxy.port) as c:
        conn = settle(c, recorder)
        proxy.pause(1.0)
        start = time.monotonic()
        c.sendall(b"up-while-paused")
        conn.sock.sendall(b"down-while-paused")
        time.sleep(0.5)
        assert bytes(conn.data) == b"hello"  # nothing forwarded yet
        assert conn.wait_bytes(20) == b"hello" + b"up-while-paused"
        assert recv_exactly(c, 17) == b"down-while-paused"
        assert 0.9 <= time.monotonic() - start < 3
        assert proxy.stats()["active"] == 1  # the connection stayed open
        proxy.pause(10)
        proxy.pause(0)  # ends a pause
        c.sendall(b"!")
        assert conn.wait_bytes(21)[-1:] == b"!"


def test_delay_holds_each_chunk_in_both_directions():
    echo = Recorder(echo=True)
    with FaultProxy(upstream=echo.address) as p, connect(p.port) as c:
        c.sendall(b"warm")
        assert recv_exactly(c, 4) == b"warm"
        p.set_delay(0.3)
        start = time.monotonic()
        c.sendall(b"ping")
        assert recv_exactly(c, 4) == b"ping"
        assert 0.6 <= time.monotonic() - start < 2  # held once each way
        p.set_delay(0)
        start = time.monotonic()
        c.sendall(b"pong")
        assert recv_exactly(c, 4) == b"pong"
        assert time.monotonic() - start < 0.3
    echo.close()


def test_delay_is_latency_not_a_rate_limit():
    # Chunks are held concurrently: 4 MiB through a 0.2 s delay takes about 0.2 s each way,
    # not 0.2 s per chunk.
    echo = Recorder(echo=True)
    payload = os.urandom(4 << 20)
    with FaultProxy(upstream=echo.address) as p, connect(p.port) as c:
        p.set_delay(0.2)
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(recv_exactly(c, len(payload))))
        start = time.monotonic()
        reader.start()
        c.sendall(payload)
        reader.join(20)
        assert bytes(got) == payload
        assert time.monotonic() - start < 5
    echo.close()


def test_refuse_resets_new_connections_only(proxy, recorder):
    with connect(proxy.port) as old:
        conn = settle(old, recorder)
        proxy.refuse(True)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):  # accepted, then reset
            with connect(proxy.port) as c:  # (the RST may already fail the connect)
                c.recv(10) or c.sendall(b"x")
        old.sendall(b"still")
        assert conn.wait_bytes(10)[5:] == b"still"
        proxy.refuse(False)
        with connect(proxy.port) as c:
            c.sendall(b"back")
            assert recorder.conn(count=2).wait_bytes(4) == b"back"
    stats = proxy.stats()
    assert stats["refused"] == 1 and stats["accepted"] == 2


def test_upstream_down_resets_the_client():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    with FaultProxy(upstream=("127.0.0.1", port)) as p:
        with pytest.raises(ConnectionResetError):  # at connect or at the first recv
            with connect(p.port) as c:
                c.recv(10)
        assert p.stats()["active"] == 0


def test_bad_arguments():
    with FaultProxy(upstream=("127.0.0.1", 9)) as p:
        with pytest.raises(ValueError, match="direction"):
            p.corrupt_next("sideways")
        with pytest.raises(ValueError, match="count"):
            p.duplicate_next("up", 0)
        with pytest.raises(ValueError):
            p.set_delay(-1)
    with pytest.raises(RuntimeError, match="closed"):
        p.stats()
    p.close()  # idempotent


def test_throughput_at_least_100_mb_per_s():
    # One direction into a sink that counts bytes.  Loopback on a shared 2-core machine: the
    # bound is what the issue asks for; measured figures are printed (pytest -s).
    total = 256 << 20
    sink = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def drain():
        s, _ = sink.accept()
        with s:
            while part := s.recv(1 << 20):
                received[0] += len(part)

    t = threading.Thread(target=drain)
    t.start()
    block = os.urandom(1 << 20)
    with FaultProxy(upstream=sink.getsockname()) as p, connect(p.port) as c:
        start = time.monotonic()
        for _ in range(total >> 20):
            c.sendall(block)
        c.shutdown(socket.SHUT_WR)
        t.join(60)
        elapsed = time.monotonic() - start
    sink.close()
    assert received[0] == total
    rate = total / elapsed / 1e6
    print(f"faultproxy throughput: {rate:.0f} MB/s ({total >> 20} MiB in {elapsed:.2f}s)")
    assert rate >= 100, f"{rate:.0f} MB/s"


# --------------------------------------------------------------------------------------------
# CLI and control socket


def test_cli_with_control_socket(tmp_path, recorder):
    control = str(tmp_path / "ctl.sock")
    host, port = recorder.address
    proc = subprocess.Popen([PYTHON, "-m", "tools.faultproxy", "--listen", "127.0.0.1:0",
                             "--upstream", f"{host}:{port}", "--control", control],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("faultproxy listening on 127.0.0.1:"), (line, proc.stderr.read())
        proxy_port = int(line.split()[3].rsplit(":", 1)[1])
        with connect(proxy_port) as c:
            conn = settle(c, recorder)
            assert send_command(control, "corrupt up 1 0") == "ok"
            c.sendall(b"\x00\x00")
            assert conn.wait_bytes(7)[5:] == b"\xff\x00"
            assert send_command(control, "duplicate down 1") == "ok"
            conn.sock.sendall(b"dd")
            assert recv_exactly(c, 4) == b"dddd"
            assert send_command(control, "delay 0.2") == "ok"
            assert send_command(control, "delay 0") == "ok"
            assert send_command(control, "pause 0") == "ok"
            assert send_command(control, "truncate up") == "ok"
            assert send_command(control, "refuse off") == "ok"
            stats = json.loads(send_command(control, "stats"))
            assert stats["active"] == 1 and stats["by_fault"]["corrupt"] == 1
            assert stats["by_fault"]["duplicate"] == 1
            with pytest.raises(RuntimeError, match="bad command"):
                send_command(control, "explode now")
            assert send_command(control, "reset") == "ok 1"
            with pytest.raises(ConnectionResetError):
                c.recv(10)
        assert send_command(control, "cut") == "ok 0"
        out = subprocess.run([PYTHON, "-m", "tools.faultproxy", "send", control, "stats"], cwd=REPO,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and json.loads(out.stdout)["by_fault"]["reset"] == 1
        assert send_command(control, "close") == "ok"
        assert proc.wait(10) == 0
        assert not os.path.exists(control)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
