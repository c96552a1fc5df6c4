#!/usr/bin/python3
"""Writes the seed corpora in fuzz/corpus/<target>/ and the dictionary fuzz/byteps.dict from the
documented wire format.

Headers are struct-packed from docs/wire-format.md (48 bytes, little-endian), independently of
src/protocol, so a codec change that breaks the documented layout shows up as seeds that no longer
decode. Only two numbers are read from src/protocol/frame.h (kWireVersion, kFlagChecksum), so a
version bump alone needs nothing but a rerun. Deterministic: rerunning rewrites the same files (old seeds of a
target are removed first).

    /usr/bin/python3 fuzz/make_corpus.py
"""
import json
import os
import re
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, '..', 'src', 'protocol', 'frame.h')) as _f:
    _FRAME_H = _f.read()
VERSION = int(re.search(r'kWireVersion\s*=\s*(\d+)', _FRAME_H).group(1))
# Header bytes 18..19 = low 16 bits of the header's CRC-32C; the payload gets a CRC-32C trailer.
FLAG_CHECKSUM = int(re.search(r'kFlagChecksum\s*=\s*(0x[0-9a-fA-F]+|\d+)', _FRAME_H).group(1), 0)
MAGIC = 0x31535042
OP = dict(Register=1, RegisterReply=2, Barrier=3, BarrierRelease=4, Heartbeat=5, NodeFailed=6,
          Finish=7, Terminate=8, JobError=9, Hello=16, InitKey=17, PushPull=18, PushPullReply=19,
          Error=20, LocalReady=21, LocalDone=22, AuthChallenge=23, AuthResponse=24, Leave=32,
          TopRequest=34, TopReply=35)
# dtype code -> (element size, struct format of one element)
DTYPE = {0: (4, 'f'), 1: (8, 'd'), 2: (2, 'e'), 3: (1, 'B'), 4: (4, 'i'), 5: (1, 'b'), 6: (8, 'q'),
         7: (2, 'H')}
HEADER = struct.Struct('<IBBBBHIIHQQQI')
assert HEADER.size == 48


def crc32c(data):
    c = 0xffffffff
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82f63b78 if c & 1 else c >> 1
    return c ^ 0xffffffff


def header(op, dtype=0, flags=0, sender=0, rnd=0, key=0, req=0, payload_len=0, arg=0):
    h = HEADER.pack(MAGIC, VERSION, OP[op], dtype, 0, flags, sender, rnd, 0, key, req, payload_len, arg)
    if flags & FLAG_CHECKSUM:
        h = h[:18] + struct.pack('<H', crc32c(h) & 0xffff) + h[20:]
    return h


def frame(op, payload=b'', checksum=False, **kw):
    if checksum:
        kw['flags'] = kw.get('flags', 0) | FLAG_CHECKSUM
        return header(op, payload_len=len(payload), **kw) + payload + struct.pack('<I', crc32c(payload))
    return header(op, payload_len=len(payload), **kw) + payload


def key_init(name, nbytes, dtype, tensor_bytes=None, op=None, attrs=None):
    m = {'name': name, 'bytes': nbytes, 'dtype': dtype, 'tensor_bytes': nbytes if tensor_bytes is None else tensor_bytes}
    if op is not None:
        m['op'] = op
    if attrs is not None:
        m['attrs'] = attrs
    return json.dumps(m).encode()


def values(dtype, n, seed):
    size, fmt = DTYPE[dtype]
    if fmt in 'fde':
        vals = [float((seed * 7 + i) % 13) - 6.0 for i in range(n)]
    elif fmt == 'H':  # bfloat16: the high half of a float32
        vals = [struct.unpack('<I', struct.pack('<f', float(seed + i)))[0] >> 16 for i in range(n)]
    elif fmt == 'B':
        vals = [(seed * 31 + i) % 256 for i in range(n)]
    elif fmt == 'b':
        vals = [((seed * 31 + i) % 256) - 128 for i in range(n)]
    else:
        vals = [seed * 1000 - i for i in range(n)]
    return struct.pack('<%d%s' % (n, fmt), *vals)


# ---- fuzz_server: [config byte] then records [selector][frame] (see fuzz_server.cc) ----------

def rec(slot, op, payload=b'', reconnect=False, flush=False, **kw):
    sel = (slot & 3) | (4 if reconnect else 0) | (8 if flush else 0)
    return bytes([sel]) + frame(op, payload, **kw)


def config(num_workers, engine_threads=1):
    return bytes([(num_workers - 1) | (4 if engine_threads == 2 else 0)])


def hellos(n):
    return b''.join(rec(w, 'Hello', sender=w) for w in range(n))


def declare(n, key, name, nbytes, dtype, tensor_bytes=None):
    return b''.join(rec(w, 'InitKey', key_init(name, nbytes, dtype, tensor_bytes), sender=w, key=key)
                    for w in range(n))


def push_round(n, key, rnd, dtype, nbytes, flush=False, req_base=0):
    count = nbytes // DTYPE[dtype][0]
    return b''.join(rec(w, 'PushPull', values(dtype, count, w + rnd), flush=flush and w == 0, sender=w,
                        rnd=rnd, key=key, dtype=dtype, req=req_base + rnd * 10 + w) for w in range(n))


def server_seeds():
    s = {}
    key = 5 << 16
    s['float32_2workers_3rounds'] = (config(2) + hellos(2) + declare(2, key, 'fc.weight', 64, 0) +
                                     b''.join(push_round(2, key, r, 0, 64, flush=r == 2) for r in (1, 2, 3)))
    body = hellos(2)
    for i, dt in enumerate(sorted(DTYPE)):
        k = ((i + 1) << 16) + i
        nbytes = DTYPE[dt][0] * 8
        body += declare(2, k, 'tensor%d' % dt, nbytes, dt) + push_round(2, k, 1, dt, nbytes)
    s['every_dtype'] = config(2) + body
    # Two partitions of one tensor pushed interleaved, on two shards.
    body = hellos(2) + declare(2, key, 'emb', 32, 0, 64) + declare(2, key + 1, 'emb', 32, 0, 64)
    for r in (1, 2):
        body += push_round(2, key, r, 0, 32) + push_round(2, key + 1, r, 0, 32, flush=True)
    s['two_partitions_two_shards'] = config(2, 2) + body
    # Resends: before and after the round completes, and from a reconnected connection.
    body = hellos(2) + declare(2, key, 'w', 16, 0)
    body += rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=1, key=key, req=1)
    body += rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=1, key=key, req=2)
    body += rec(0, 'Hello', reconnect=True, sender=0)
    body += rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=1, key=key, req=3)
    body += rec(1, 'PushPull', values(0, 4, 2), sender=1, rnd=1, key=key, req=4, flush=True)
    body += rec(1, 'PushPull', values(0, 4, 2), sender=1, rnd=1, key=key, req=5)
    s['resend_and_reconnect'] = config(2) + body
    # Declaration mismatches: name, then size.
    s['mismatch_name'] = (config(2) + hellos(2) + rec(0, 'InitKey', key_init('a', 16, 0), sender=0, key=key) +
                          rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=1, key=key, req=1) +
                          rec(1, 'InitKey', key_init('b', 16, 0), sender=1, key=key) +
                          rec(1, 'PushPull', values(0, 4, 1), sender=1, rnd=1, key=key, req=2))
    s['mismatch_size'] = (config(2) + hellos(2) + rec(0, 'InitKey', key_init('a', 16, 0), sender=0, key=key) +
                          rec(1, 'InitKey', key_init('a', 8, 4, 8), sender=1, key=key))
    # Pushes the server must refuse: undeclared key, wrong round, wrong size, wrong dtype.
    body = hellos(2) + rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=1, key=key + 9, req=1)
    body += declare(2, key, 'w', 16, 0)
    body += rec(0, 'PushPull', values(0, 4, 1), sender=0, rnd=3, key=key, req=2)
    body += rec(0, 'PushPull', values(0, 2, 1), sender=0, rnd=1, key=key, req=3)
    body += rec(0, 'PushPull', values(4, 4, 1), sender=0, rnd=1, key=key, dtype=4, req=4)
    s['refused_pushes'] = config(2) + body
    # Protocol errors that close a connection: data before Hello, rank out of range, bad InitKey.
    s['push_before_hello'] = config(2) + rec(0, 'PushPull', values(0, 4, 1), rnd=1, key=key)
    s['rank_out_of_range'] = config(2) + rec(0, 'Hello', sender=7) + rec(1, 'Hello', sender=1)
    s['bad_initkey'] = (config(2) + hellos(2) + rec(0, 'InitKey', b'{"name": "x", "bytes": 6, "dtype": 0, '
                        b'"tensor_bytes": 6}', sender=0, key=key) + rec(1, 'InitKey', b'[1,2]', sender=1, key=key) +
                        rec(2, 'InitKey', b'{}', key=key))
    s['three_workers'] = (config(3) + hellos(3) + declare(3, key, 'w', 24, 1) +
                          b''.join(push_round(3, key, r, 1, 24, flush=True) for r in (1, 2)))
    s['one_worker'] = (config(1) + hellos(1) + declare(1, key, 'b', 12, 4) +
                       b''.join(push_round(1, key, r, 4, 12) for r in (1, 2, 3)))
    s['empty_tensor'] = config(2) + hellos(2) + declare(2, key, 'empty', 0, 0) + push_round(2, key, 1, 0, 0)
    # Uneven ends: worker 0 leaves after round 1; worker 1's round 2 (waiting, then a new one) fails.
    body = hellos(2) + declare(2, key, 'w', 16, 0) + push_round(2, key, 1, 0, 16, flush=True)
    body += rec(1, 'PushPull', values(0, 4, 2), sender=1, rnd=2, key=key, req=7)
    body += rec(0, 'Leave', sender=0, flush=True)
    body += rec(1, 'PushPull', values(0, 4, 3), sender=1, rnd=3, key=key, req=8)
    body += rec(0, 'Leave', sender=0)
    s['uneven_end'] = config(2) + body
    # join(): worker 1 joins after round 1; worker 0's round 2 completes with its zeros, a concat
    # round fails, worker 0 joins last; worker 1's own round 2 then maps onto the key's round 3.
    jkey, ckey = (9 << 16), (10 << 16)
    body = hellos(2) + declare(2, key, 'w', 16, 0)
    body += b''.join(rec(w, 'InitKey', key_init('__byteps.join', 4, 4, op='join'), sender=w, key=jkey) for w in (0, 1))
    body += rec(0, 'InitKey', key_init('g', 8, 0, op='concat'), sender=0, key=ckey)
    body += push_round(2, key, 1, 0, 16, flush=True)
    body += rec(1, 'PushPull', struct.pack('<i', 1), sender=1, rnd=1, key=jkey, dtype=4, req=20, flush=True)
    body += rec(0, 'PushPull', values(0, 4, 2), sender=0, rnd=2, key=key, req=21)
    body += rec(0, 'PushPull', values(0, 2, 2), sender=0, rnd=1, key=ckey, req=22, flush=True)
    body += rec(0, 'PushPull', struct.pack('<i', 0), sender=0, rnd=1, key=jkey, dtype=4, req=23, flush=True)
    body += rec(1, 'PushPull', values(0, 4, 3), sender=1, rnd=2, key=key, req=24)
    body += rec(0, 'PushPull', values(0, 4, 3), sender=0, rnd=3, key=key, req=25, flush=True)
    s['join'] = config(2, 2) + body
    # Compressed keys (flag 0x0004, docs/wire-format.md "Compressed payloads"): onebit with scaling
    # and topk k=2 of 16 float32 elements; worker 1's first onebit push is damaged (a count that is
    # not the key's), its resend is good; then a plain push to the compressed key and a compressed
    # one to a plain key, both refused.
    ckey1, ckey2, pkey = (11 << 16), (12 << 16), (13 << 16)
    compressed = 0x0004

    def onebit(w, rnd, count=16):
        signs = bytes(((w * 37 + rnd * 11 + i) * 73) & 0xff for i in range(2))
        return struct.pack('<BBBBIIf', 1, 2, 0, 1, count, 0, 0.5 + w + rnd) + signs

    def topk(w, rnd):
        return (struct.pack('<BBBBIIf', 1, 3, 0, 0, 16, 2, 0.0) + struct.pack('<2I', w, 9 + rnd) +
                struct.pack('<2f', 1.5 + w, -2.0 - rnd))

    body = hellos(2)
    body += b''.join(rec(w, 'InitKey', key_init('enc.w', 64, 0, attrs='compressor=onebit;scaling=true'), sender=w,
                         key=ckey1) for w in (0, 1))
    body += b''.join(rec(w, 'InitKey', key_init('enc.b', 64, 0, attrs='compressor=topk;k=2;ef=vanilla'), sender=w,
                         key=ckey2) for w in (0, 1))
    body += declare(2, pkey, 'plain', 64, 0)
    for r in (1, 2):
        body += rec(0, 'PushPull', onebit(0, r), sender=0, rnd=r, key=ckey1, flags=compressed, req=30 + r)
        if r == 1:
            body += rec(1, 'PushPull', onebit(1, r, count=15), sender=1, rnd=r, key=ckey1, flags=compressed, req=40)
        body += rec(1, 'PushPull', onebit(1, r), sender=1, rnd=r, key=ckey1, flags=compressed, req=40 + r,
                    flush=True)
        body += b''.join(rec(w, 'PushPull', topk(w, r), sender=w, rnd=r, key=ckey2, flags=compressed,
                             req=50 + 10 * w + r) for w in (0, 1))
    body += rec(0, 'PushPull', values(0, 16, 3), sender=0, rnd=3, key=ckey1, req=60)
    body += rec(1, 'PushPull', onebit(1, 1), sender=1, rnd=1, key=pkey, flags=compressed, req=61)
    s['compressed_keys'] = config(2, 2) + body
    # A compressed declaration the server refuses: a min.
    s['compressed_min'] = (config(2) + hellos(2) +
                           rec(0, 'InitKey', key_init('m', 64, 0, op='min', attrs='compressor=onebit'), sender=0,
                               key=ckey1) +
                           rec(0, 'PushPull', onebit(0, 1), sender=0, rnd=1, key=ckey1, flags=compressed, req=70))
    return s


# ---- fuzz_frame: single frames and bare control payloads ---------------------------------------

NODE = {'role': 'server', 'rank': 0, 'host': '10.0.0.2', 'port': 4242, 'pid': 77}


def control_payloads():
    return {
        'register': {'role': 'worker', 'requested_rank': -1, 'host': '10.0.0.1', 'port': 0, 'pid': 1234,
                     'num_workers': 2, 'num_servers': 1, 'job_secret_hash': ''},
        'register_reply': {'error': '', 'rank': 1, 'nodes': [dict(NODE, role='worker', port=0), NODE]},
        'register_refused': {'error': 'duplicate worker rank 1', 'rank': -1, 'nodes': []},
        'node_failed': {'node': NODE, 'reason': 'no heartbeat for 15 s'},
        'key_init': {'name': 'layer1.weight', 'bytes': 4096, 'dtype': 0, 'tensor_bytes': 1 << 20},
        'key_init_unicode': {'name': 'w\u00e9ight \u2603', 'bytes': 2, 'dtype': 2, 'tensor_bytes': 2},
    }


def frame_seeds():
    s = {}
    for name, obj in control_payloads().items():
        s['json_' + name] = json.dumps(obj).encode()
    s['frame_register'] = frame('Register', json.dumps(control_payloads()['register']).encode())
    s['frame_register_reply'] = frame('RegisterReply', json.dumps(control_payloads()['register_reply']).encode())
    s['frame_node_failed'] = frame('NodeFailed', json.dumps(control_payloads()['node_failed']).encode())
    s['frame_initkey'] = frame('InitKey', key_init('fc.bias', 40, 0), sender=1, key=(3 << 16) + 1)
    s['frame_localready'] = frame('LocalReady', key_init('fc.bias', 40, 0), sender=2, rnd=4, key=3)
    s['frame_pushpull'] = frame('PushPull', values(0, 4, 1), sender=1, rnd=2, key=(3 << 16), req=99)
    s['frame_error'] = frame('Error', b'tensor w: declaration mismatch', req=7)
    s['frame_job_error'] = frame('JobError', b'rendezvous timed out: missing worker 1')
    s['frame_barrier_all'] = frame('Barrier', flags=1, key=2)
    s['frame_terminate_failure'] = frame('Terminate', arg=1)
    s['frame_hello_local'] = frame('Hello', sender=3, arg=4321)
    s['frame_pushpull_checksum'] = frame('PushPull', values(0, 4, 2), checksum=True, sender=1, rnd=3, key=7, req=5)
    s['frame_auth_challenge'] = frame('AuthChallenge', bytes(range(32)))
    s['frame_auth_response_checksum'] = frame('AuthResponse', bytes(range(32, 64)), checksum=True)
    s['frame_heartbeat_summary'] = frame('Heartbeat', json.dumps(
        {'role': 'worker', 't': 1.5, 'c': {'pushed_bytes_total': {'0': 4096}}, 'h': {}, 'w': {}}).encode())
    s['frame_top_reply'] = frame('TopReply', json.dumps(
        {'job': '00ff00ff00ff00ff', 'num_workers': 1, 'num_servers': 1, 'started': True, 'uptime_s': 2.0,
         'placement': '', 'nodes': [{'node': {'role': 'worker', 'rank': 0, 'host': '10.0.0.1', 'port': 0, 'pid': 7},
                                     'heard_s': 0.5, 'finished': False, 'away': False, 'summary': '{}',
                                     'previous': ''}]}).encode(), req=3)
    for op in ('BarrierRelease', 'Heartbeat', 'Finish', 'PushPullReply', 'LocalDone', 'TopRequest'):
        s['header_' + op] = header(op, key=1, req=2, rnd=3, sender=4)
    return s


# ---- fuzz_stream: [config byte] then the peer's bytes (see fuzz_stream.cc) ---------------------
# config: 1 checksum, 2 secret, 4 accepting side, 8 (with a secret) the harness authenticates first.
# Per frame: request_id % 4 picks the handler's buffer (0 transport, 1 handler, 2 discard,
# 3 refuse); flags 0x100 echo, 0x200 close from OnFrame.
ECHO, CLOSE = 0x100, 0x200


def stream_seeds():
    s = {}

    def mixed(checksum):
        out = b''
        for i in range(8):  # every buffer mode except refuse, with and without echo
            out += frame('PushPull', values(0, i + 1, i), checksum=checksum, flags=ECHO if i % 2 else 0,
                         rnd=i, key=i, req=(0, 1, 2)[i % 3])
        return out

    s['plain_mixed_modes_echo'] = bytes([0]) + mixed(False)
    s['plain_refuse_second'] = bytes([0]) + frame('Hello') + frame('InitKey', key_init('x', 4, 0), req=3) + frame('Heartbeat')
    s['plain_close_from_handler'] = bytes([0]) + frame('Hello', flags=CLOSE) + frame('Heartbeat')
    s['plain_truncated_payload'] = bytes([0]) + frame('PushPull', values(0, 16, 1), req=1)[:100]
    s['plain_bad_magic_after_frame'] = bytes([0]) + frame('Hello') + b'XXXX' + frame('Hello')[4:]
    s['plain_checksummed_frames'] = bytes([0]) + frame('Hello', checksum=True) + frame('PushPull', values(0, 3, 1), checksum=True, req=1, flags=ECHO)
    s['checksum_mixed_modes_echo'] = bytes([1]) + mixed(True)
    s['checksum_missing'] = bytes([1]) + frame('Hello', checksum=True) + frame('Hello')
    s['checksum_bad_trailer'] = bytes([1]) + frame('PushPull', values(0, 2, 1), checksum=True)[:-1] + b'\x00'
    s['secret_data_before_auth'] = bytes([2]) + frame('Hello')
    s['secret_challenge_bad_proof'] = bytes([2]) + frame('AuthChallenge', bytes(range(32))) + frame('AuthResponse', bytes(32))
    s['secret_response_first'] = bytes([6]) + frame('AuthResponse', bytes(32))
    s['secret_accepted_double_challenge'] = bytes([6]) + frame('AuthChallenge', bytes(32)) + frame('AuthChallenge', bytes(32))
    s['secret_checksum_challenge'] = bytes([3]) + frame('AuthChallenge', bytes(range(32)), checksum=True)
    s['authed_mixed_modes_echo'] = bytes([10]) + mixed(False)
    s['authed_accepted_checksum'] = bytes([15]) + mixed(True)
    s['authed_second_challenge'] = bytes([10]) + frame('Hello') + frame('AuthChallenge', bytes(32))
    # A 36 KiB payload takes the direct-receive path (>= 32 KiB straight into the destination).
    # scripts/fuzz.sh runs this target with -max_len=40000 so mutants of it keep that path.
    s['plain_large_direct'] = bytes([0]) + frame('PushPull', values(3, 36 * 1024, 5), dtype=3, req=1, flags=ECHO) + frame('Hello')
    s['checksum_large_direct'] = bytes([1]) + frame('PushPull', values(3, 34 * 1024, 6), checksum=True, dtype=3, req=0)
    return s


def ucx_header_seeds():
    # The UCX backend's message header: u64 connection id, u64 token, u32 flags (1 = payload
    # CRC-32C present), u32 crc, then the 48-byte frame header (docs/wire-format.md).
    def am(conn_id, token, flags, crc, hdr):
        return struct.pack('<QQII', conn_id, token, flags, crc) + hdr
    return {
        'seed_push': am(1, 0x1234567890abcdef, 0, 0, header('PushPull', key=5, rnd=1, payload_len=4 << 20)),
        'seed_checksummed': am(2, 7, 1, 0xdeadbeef, header('PushPullReply', flags=FLAG_CHECKSUM, key=9,
                                                            payload_len=4096)),
        'seed_hello': am(3, 0, 0, 0, header('Hello', payload_len=30)),
        'seed_zero': am(0, 0, 0, 0, header('Heartbeat')),
    }


def codec_seeds():
    """fuzz_codec: [selector][payload]; payloads as docs/wire-format.md "Compressed payloads" lays
    them out (16-byte header: version, codec id, value type, flags, count, param, scale)."""
    def payload(codec, count, body, vtype=0, flags=0, param=0, scale=0.0):
        return struct.pack('<BBBBIIf', 1, codec, vtype, flags, count, param, scale) + body
    return {
        'cast_fp16': b'\x00' + payload(1, 4, struct.pack('<4e', 1.0, -2.0, 0.5, 65504.0), vtype=1),
        'cast_bf16': b'\x01' + payload(1, 2, struct.pack('<2H', 0x3f80, 0xc000), vtype=2),
        'onebit_scaled': b'\x02' + payload(2, 7, bytes([0x2a]), flags=1, scale=1.25),
        'onebit': b'\x03' + payload(2, 9, bytes([0x81, 0x01]), scale=1.0),
        'topk': b'\x04' + payload(3, 8, struct.pack('<If', 5, 3.0), param=1),
        'topk_count_mismatch': b'\x0c' + payload(3, 8, struct.pack('<If', 5, 3.0), param=1),
        'randomk': b'\x05' + payload(4, 8, struct.pack('<If', 2, 8.0), flags=1, param=1),
        'dithering': b'\x06' + payload(5, 4, bytes([0xa4, 0x10]), param=4, scale=1.0),
        'dithering_natural_l2': b'\x07' + payload(5, 4, bytes([0xa3, 0x10]), flags=3, param=3, scale=2.0),
        'dithering_fp16': b'\x16' + payload(5, 3, bytes([0xa4, 0x00]), param=4, scale=0.5),
    }


def write(target, seeds):
    d = os.path.join(HERE, 'corpus', target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)
    print('%-12s %3d seeds, %d bytes' % (target, len(seeds), sum(map(len, seeds.values()))))


JSON_FIELDS = ('role', 'requested_rank', 'host', 'port', 'pid', 'num_workers', 'num_servers',
               'job_secret_hash', 'rejoin', 'error', 'rank', 'nodes', 'node', 'reason', 'name', 'bytes',
               'dtype', 'tensor_bytes', 'worker', 'server')


def write_dict():
    def esc(b):
        return ''.join(chr(c) if 32 <= c < 127 and chr(c) not in '"\\' else '\\x%02x' % c for c in b)
    lines = ['# libFuzzer dictionary for the byteps targets, written by fuzz/make_corpus.py: header',
             '# prefixes (magic, version, opcode) and the JSON field names of the control payloads.']
    for name, code in sorted(OP.items(), key=lambda kv: kv[1]):
        lines.append('hdr_%s="%s"' % (name, esc(struct.pack('<IBB', MAGIC, VERSION, code))))
    lines += ['f_%s="\\"%s\\""' % (f, f) for f in JSON_FIELDS]
    lines += ['v_u64_max="18446744073709551615"', 'v_i64_min="-9223372036854775808"',
              'v_i32_over="2147483648"', 'v_true="true"', 'v_surrogates="\\"\\\\ud83d\\\\ude00\\""']
    with open(os.path.join(HERE, 'byteps.dict'), 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    write_dict()
    write('fuzz_frame', frame_seeds())
    write('fuzz_server', server_seeds())
    write('fuzz_stream', stream_seeds())
    write('fuzz_ucx_header', ucx_header_seeds())
    write('fuzz_codec', codec_seeds())
