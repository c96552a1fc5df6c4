"""The gradient codecs (src/compress/, through byteps._core's codec_compress / codec_decompress)
against NumPy reference implementations of our own: the payload's bytes exactly for the
deterministic codecs and for the random ones (whose draws are a pure function of seed, key and
round, reimplemented here), the decoded tensors, the server's decompress-and-add, every float
dtype a codec takes, and odd sizes (1, 7, 4097 elements)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from conftest import missing_core

pytestmark = pytest.mark.skipif(bool(missing_core()), reason=missing_core() or "")

from byteps import _core  # noqa: E402

FLOAT32, FLOAT64, FLOAT16, BFLOAT16 = 0, 1, 2, 7
SIZES = (1, 7, 4097)
HEADER = struct.Struct("<BBBBIIf")  # version, codec, value type, flags, count, param, scale
M64 = (1 << 64) - 1


def splitmix64(x):
    """SplitMix64's finaliser on a uint64 array (or a Python int)."""
    if isinstance(x, int):
        x = (x + 0x9E3779B97F4A7C15) & M64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
        return x ^ (x >> 31)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def stream_base(seed: int, key: int, rnd: int) -> int:
    return splitmix64(splitmix64(splitmix64(seed) ^ key) ^ rnd)


def draws(seed: int, key: int, rnd: int, count: int) -> np.ndarray:
    base = stream_base(seed, key, rnd)
    with np.errstate(over="ignore"):
        return splitmix64(np.uint64(base) + np.arange(count, dtype=np.uint64))


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def make_input(n: int, dtype: int, seed: int = 0):
    """(what is passed to the codec, its float32 view as the codec sees it)."""
    rng = np.random.default_rng(seed + n)
    x = rng.standard_normal(n).astype(np.float32)
    x += np.sign(x) * np.arange(n, dtype=np.float32) * 1e-4  # distinct magnitudes: top-k has no ties
    if dtype == FLOAT64:
        return x.astype(np.float64), x.astype(np.float64).astype(np.float32)
    if dtype == FLOAT16:
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    if dtype == BFLOAT16:
        b = to_bf16_bits(x)
        return b, from_bf16_bits(b)
    return x, x


def compress(params: str, dtype: int, data: np.ndarray, key: int = 3, rnd: int = 5) -> bytes:
    return _core.codec_compress(params, "ref", dtype, data, data.size, key, rnd)


def decoded(params: str, dtype: int, payload: bytes, n: int) -> np.ndarray:
    """The payload decoded as float32 (through a float32 accumulator of zeros: the server's path)."""
    acc = np.zeros(n, np.float32)
    return np.frombuffer(_core.codec_decompress(params, "ref", dtype, payload, n, 4, acc), np.float32)


def split(payload: bytes):
    return HEADER.unpack_from(payload), payload[HEADER.size:]


def resolve_k(k: float, n: int) -> int:
    return max(1, int(np.floor(k * n))) if k < 1 else min(int(k), n)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", (FLOAT32, FLOAT64, FLOAT16, BFLOAT16))
@pytest.mark.parametrize("scaling", (True, False))
def test_onebit_is_the_packed_signs_and_the_mean_magnitude(n, dtype, scaling):
    data, x = make_input(n, dtype)
    params = f"compressor=onebit;scaling={'true' if scaling else 'false'}"
    payload = compress(params, dtype, data)
    (version, codec, vtype, flags, count, param, scale), body = split(payload)
    assert (version, codec, count, flags) == (1, 2, n, 1 if scaling else 0)
    assert body == np.packbits(x < 0, bitorder="little").tobytes()
    want_scale = np.mean(np.abs(x.astype(np.float64))) if scaling else 1.0
    assert scale == pytest.approx(want_scale, rel=1e-5)
    np.testing.assert_array_equal(decoded(params, dtype, payload, n), np.where(x < 0, -scale, scale).astype(np.float32))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", (FLOAT32, FLOAT64, FLOAT16))
@pytest.mark.parametrize("k,cast", ((0.01, ""), (0.5, ""), (3, ""), (0.01, "fp16"), (0.25, "bf16")))
def test_topk_keeps_the_largest_magnitudes_in_index_order(n, dtype, k, cast):
    data, x = make_input(n, dtype)
    params = f"compressor=topk;k={k}" + (f";cast={cast}" if cast else "")
    payload = compress(params, dtype, data)
    (_, codec, vtype, _, count, param, _), body = split(payload)
    kk = resolve_k(k, n)
    assert (codec, count, param) == (3, n, kk)
    idx = np.sort(np.argsort(-np.abs(x), kind="stable")[:kk])
    assert np.frombuffer(body[:4 * kk], np.uint32).tolist() == idx.tolist()
    vals = x[idx]
    if cast == "fp16":
        assert body[4 * kk:] == vals.astype(np.float16).tobytes()
        vals = vals.astype(np.float16).astype(np.float32)
    elif cast == "bf16":
        assert body[4 * kk:] == to_bf16_bits(vals).tobytes()
        vals = from_bf16_bits(to_bf16_bits(vals))
    else:
        assert body[4 * kk:] == vals.tobytes()
    want = np.zeros(n, np.float32)
    want[idx] = vals
    np.testing.assert_array_equal(decoded(params, dtype, payload, n), want)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("k", (0.01, 0.3, 5))
@pytest.mark.parametrize("seed", (0, 12345))
def test_randomk_draws_the_streams_indices_and_scales_to_be_unbiased(n, k, seed):
    data, x = make_input(n, FLOAT32)
    params = f"compressor=randomk;k={k};seed={seed}"
    payload = compress(params, FLOAT32, data, key=7, rnd=2)
    (_, codec, _, flags, count, param, _), body = split(payload)
    kk = resolve_k(k, n)
    assert (codec, count, param, flags) == (4, n, kk, 1)
    idx = [(int(b) * n) >> 64 for b in draws(seed, 7, 2, kk)]
    assert np.frombuffer(body[:4 * kk], np.uint32).tolist() == idx
    scale = np.float32(n / kk)
    vals = x[idx] * scale
    assert body[4 * kk:] == vals.astype(np.float32).tobytes()
    want = np.zeros(n, np.float32)
    np.add.at(want, idx, vals)
    np.testing.assert_allclose(decoded(params, FLOAT32, payload, n), want, rtol=1e-6)
    # Another round draws other indices (for a part large enough to tell).
    if n > 100:
        other = split(compress(params, FLOAT32, data, key=7, rnd=3))[1]
        assert other[:4 * kk] != body[:4 * kk]


def dithering_levels(x: np.ndarray, s: int, natural: bool, seed: int, key: int, rnd: int):
    """The reference quantiser (max normalisation): the levels and the norm."""
    norm = np.float32(np.max(np.abs(x)))
    top = np.float32(2 ** (s - 1) if natural else s)
    inv = np.float32(np.float64(top) / np.float64(norm))
    a = np.minimum(np.abs(x) * inv, top).astype(np.float32)
    u = (draws(seed, key, rnd, x.size) >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    if not natural:
        fl = np.floor(a)
        return (fl + (u < a - fl)).astype(np.uint32), norm
    e = (a.view(np.uint32) >> 23).astype(np.int64) - 127
    f = (((np.maximum(e, 0) + 127).astype(np.uint32)) << 23).view(np.float32)
    big = e.astype(np.uint32) + 1 + (u < (a - f) / f)
    return np.where(a < 1, (u < a).astype(np.uint32), big).astype(np.uint32), norm


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("s,natural", ((4, False), (2, True), (100, False), (5, True)))
def test_dithering_quantises_with_the_streams_draws(n, s, natural):
    data, x = make_input(n, FLOAT32)
    params = f"compressor=dithering;k={s};seed=9" + (";partition=natural" if natural else "")
    payload = compress(params, FLOAT32, data, key=11, rnd=4)
    (_, codec, _, flags, count, param, scale), body = split(payload)
    levels, norm = dithering_levels(x, s, natural, 9, 11, 4)
    assert (codec, count, param, flags, scale) == (5, n, s, 1 if natural else 0, norm)
    need = int(s).bit_length() + 1
    w = 2 if need <= 2 else 4 if need <= 4 else 8 if need <= 8 else 16
    codes = levels | (np.where(x < 0, 1, 0).astype(np.uint32) << (w - 1))
    if w == 16:
        assert body == codes.astype(np.uint16).tobytes()
    else:
        per = 8 // w
        padded = np.zeros(-(-n // per) * per, np.uint32)
        padded[:n] = codes
        packed = np.zeros(padded.size // per, np.uint32)
        for j in range(per):
            packed |= padded[j::per] << (j * w)
        assert body == packed.astype(np.uint8).tobytes()
    q = np.where(levels == 0, 0, 2.0 ** (levels.astype(np.float64) - 1)) if natural else levels
    top = 2 ** (s - 1) if natural else s
    want = (np.where(x < 0, -1, 1) * q * (np.float64(norm) / top)).astype(np.float32)
    np.testing.assert_allclose(decoded(params, FLOAT32, payload, n), want, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cast", ("fp16", "bf16"))
def test_casts_round_to_nearest_and_decode_to_the_dtype(n, cast):
    data, x = make_input(n, FLOAT32)
    payload = compress(f"cast={cast}", FLOAT32, data)
    (_, codec, vtype, _, count, _, _), body = split(payload)
    assert (codec, count) == (1, n)
    want_bits = x.astype(np.float16).tobytes() if cast == "fp16" else to_bf16_bits(x).tobytes()
    assert body == want_bits
    out = np.frombuffer(_core.codec_decompress(f"cast={cast}", "ref", FLOAT32, payload, n, 4), np.float32)
    back = x.astype(np.float16).astype(np.float32) if cast == "fp16" else from_bf16_bits(to_bf16_bits(x))
    np.testing.assert_array_equal(out, back)


def test_the_servers_decompress_and_add_sums_several_workers_payloads():
    n = 4097
    acc = np.zeros(n, np.float32)
    want = np.zeros(n, np.float32)
    params = "compressor=topk;k=0.05"
    for worker in range(3):
        data, x = make_input(n, FLOAT32, seed=worker * 1000)
        payload = compress(params, FLOAT32, data)
        acc = np.frombuffer(_core.codec_decompress(params, "ref", FLOAT32, payload, n, 4, acc), np.float32).copy()
        want += decoded(params, FLOAT32, payload, n)
    np.testing.assert_allclose(acc, want, rtol=1e-6)


def test_bad_parameters_and_damaged_payloads_are_named_errors():
    data, _ = make_input(7, FLOAT32)
    with pytest.raises(ValueError, match="tensor 'ref'.*'compressor'='zip'"):
        compress("compressor=zip", FLOAT32, data)
    with pytest.raises(ValueError, match="tensor 'ref'"):
        _core.codec_compress("compressor=onebit", "ref", 4, np.arange(7, dtype=np.int32), 7)  # int32
    payload = compress("compressor=topk;k=2", FLOAT32, data)
    damaged = bytearray(payload)
    damaged[HEADER.size:HEADER.size + 4] = struct.pack("<I", 99)  # an index past the 7 elements
    with pytest.raises(_core.BytePSError, match="compressed payload of tensor 'ref'.*out of range"):
        decoded("compressor=topk;k=2", FLOAT32, bytes(damaged), 7)
    with pytest.raises(_core.BytePSError, match="tensor 'ref'"):
        decoded("compressor=topk;k=2", FLOAT32, payload[:10], 7)  # shorter than its header
