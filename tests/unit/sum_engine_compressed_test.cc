// Compressed keys on a summation shard (sum_engine_compressed.cc): each push is a codec payload
// decoded onto a float32 sum; the round's sum is compressed once (through the server's error
// feedback when ef=vanilla) and every reply carries that payload with kFlagCompressed. The
// expected replies are computed here with the codec API alone: decode each push, sum in float32,
// compress with a float32 codec (and an ErrorFeedback kept across rounds).
#include <fmt/format.h>

#include <optional>

#include "compress/codec.h"
#include "compress/error_feedback.h"
#include "compress/params.h"
#include "protocol/frame.h"
#include "tests/unit/sum_engine_fixture.h"

namespace byteps::server {
namespace {

using namespace test;  // NOLINT: the fixture and its helpers

const DataType kF32 = DataType::kFloat32;
const DataType kF16 = DataType::kFloat16;

KeyInit Decl(const std::string& name, DataType dt, size_t count, const std::string& attrs,
             const std::string& op = protocol::kOpSum) {
  const size_t bytes = count * DataTypeSize(dt);
  return KeyInit{name, bytes, static_cast<int>(dt), bytes, op, attrs};
}

compress::Params ParamsOf(const std::string& attrs) {
  auto p = compress::ParamsFromAttrs(protocol::ParseAttrs(attrs), "g");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.value();
}

std::unique_ptr<compress::Codec> CodecOf(const std::string& attrs, DataType dt) {
  auto c = compress::MakeCodec(ParamsOf(attrs), dt, "g");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Worker w's gradient of round r: distinct, signed, not too regular (topk picks by magnitude).
std::vector<double> Grad(int w, size_t n, uint32_t r) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25 * static_cast<double>((i * 7 + w * 3 + r * 5) % 17) - 2.0 + 0.01 * w;
  return v;
}

class SumEngineCompressedTest : public SumEngineTest {
 protected:
  void PushPayload(uint64_t key, uint32_t round, int worker, const std::vector<uint8_t>& bytes, DataType dt,
                   bool compressed = true, uint64_t request_id = 0) {
    PushTask t;
    t.key = key;
    t.round = round;
    t.worker = worker;
    t.request_id = request_id != 0 ? request_id : 1000 * round + worker;
    t.dtype = static_cast<uint8_t>(dt);
    t.conn = conns_[worker];
    t.data = pool_.Get(bytes.size()).value();
    if (!bytes.empty()) std::memcpy(t.data.get(), bytes.data(), bytes.size());
    t.bytes = bytes.size();
    t.compressed = compressed;
    engine_->Post(std::move(t));
  }
  // Worker w's compressed push of round r, as its compress stage would make it.
  static std::vector<uint8_t> Payload(compress::Codec& c, DataType dt, size_t n, uint64_t key, uint32_t round, int w) {
    const std::vector<uint8_t> tensor = testing::Encode(dt, Grad(w, n, round));
    std::vector<uint8_t> out(c.MaxCompressedBytes(n));
    auto len = c.Compress(tensor.data(), n, key, round, out.data(), out.size());
    EXPECT_TRUE(len.ok()) << len.status().ToString();
    out.resize(len.ok() ? len.value() : 0);
    return out;
  }
  SentFrame Reply(int w) {
    SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
    EXPECT_TRUE(f.header.flags & protocol::kFlagCompressed) << "worker " << w;
    EXPECT_EQ(f.header.payload_len, f.payload.size());
    return f;
  }
};

struct Case {
  std::string attrs;
  DataType dtype;
  int workers;
};

class CompressedRounds : public SumEngineCompressedTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CompressedRounds, EveryReplyIsTheServersCompressionOfTheDecodedSum) {
  const Case& c = GetParam();
  const size_t n = 37;
  const uint64_t key = 5;
  Start(c.workers);
  Init(key, c.dtype, n, "g", protocol::kOpSum, c.attrs);
  std::vector<std::unique_ptr<compress::Codec>> worker_codecs;
  for (int w = 0; w < c.workers; ++w) worker_codecs.push_back(CodecOf(c.attrs, c.dtype));
  auto server = CodecOf(c.attrs, kF32);
  const compress::Params params = ParamsOf(c.attrs);
  std::optional<compress::ErrorFeedback> ef;
  if (params.error_feedback) ef.emplace(n);
  for (uint32_t round = 1; round <= 3; ++round) {
    std::vector<float> sum(n, 0.0f);
    std::vector<uint8_t> first;
    for (int w = 0; w < c.workers; ++w) {
      auto p = Payload(*worker_codecs[w], c.dtype, n, key, round, w);
      ASSERT_TRUE(server->DecompressAdd(p.data(), p.size(), n, sum.data()).ok());
      PushPayload(key, round, w, p, c.dtype);
      if (w == 0) first = p;
    }
    std::vector<uint8_t> want(server->MaxCompressedBytes(n));
    auto len = ef ? ef->Compress(*server, sum.data(), n, key, round, want.data(), want.size())
                  : server->Compress(sum.data(), n, key, round, want.data(), want.size());
    ASSERT_TRUE(len.ok()) << len.status().ToString();
    want.resize(len.value());
    for (int w = 0; w < c.workers; ++w) {
      SentFrame f = Reply(w);
      EXPECT_EQ(f.header.round, round);
      EXPECT_EQ(f.payload, Bytes(want)) << c.attrs << " round " << round << " worker " << w;
    }
    // A resend after completion is not counted again and gets the same payload.
    PushPayload(key, round, 0, first, c.dtype);
    EXPECT_EQ(Reply(0).payload, Bytes(want)) << "the resend of round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CompressedRounds,
    ::testing::Values(Case{"compressor=onebit;scaling=true", kF32, 2}, Case{"compressor=onebit;scaling=true", kF16, 3},
                      Case{"compressor=onebit;scaling=true;ef=vanilla", kF32, 3},
                      Case{"compressor=topk;k=0.25", kF32, 3}, Case{"compressor=topk;k=0.25;ef=vanilla", kF16, 2},
                      Case{"compressor=randomk;k=0.25;seed=3", kF32, 2},
                      Case{"compressor=randomk;k=0.25;seed=3;ef=vanilla", kF16, 3},
                      Case{"compressor=dithering;k=8", kF32, 3}, Case{"compressor=dithering;k=8", kF16, 2},
                      Case{"cast=fp16", kF32, 2}, Case{"cast=fp16", kF16, 3}));

TEST_F(SumEngineCompressedTest, TheServersErrorFeedbackResidualReturnsInTheNextRound) {
  // topk keeping one element: round 1's sum {3, 2} sends 3 and keeps {0, 2}; round 2's sum
  // {0.5, 1} plus that residual sends 3 at index 1 (without error feedback it would send 1).
  const size_t n = 2;
  const std::string attrs = "compressor=topk;k=1;ef=vanilla";
  Start(2);
  Init(8, kF32, n, "g", protocol::kOpSum, attrs);
  auto codec = CodecOf(attrs, kF32);
  const auto push = [&](uint32_t round, int w, const std::vector<float>& x) {
    std::vector<uint8_t> out(codec->MaxCompressedBytes(n));
    auto len = codec->Compress(x.data(), n, 8, round, out.data(), out.size());
    ASSERT_TRUE(len.ok());
    out.resize(len.value());
    PushPayload(8, round, w, out, kF32);
  };
  const auto decoded = [&](const SentFrame& f) {
    std::vector<float> got(n, -1.0f);
    EXPECT_TRUE(codec->Decompress(reinterpret_cast<const uint8_t*>(f.payload.data()), f.payload.size(), n,
                                  got.data()).ok());
    return got;
  };
  push(1, 0, {3, 0});
  push(1, 1, {0, 2});
  EXPECT_EQ(decoded(Reply(0)), (std::vector<float>{3, 0}));
  EXPECT_EQ(decoded(Reply(1)), (std::vector<float>{3, 0}));
  push(2, 0, {0.5f, 0});
  push(2, 1, {0, 1});
  EXPECT_EQ(decoded(Reply(0)), (std::vector<float>{0, 3}));
  EXPECT_EQ(decoded(Reply(1)), (std::vector<float>{0, 3}));
}

TEST_F(SumEngineCompressedTest, ADamagedPushIsANamedErrorAndAGoodResendCompletesTheRound) {
  const size_t n = 16;
  const std::string attrs = "compressor=onebit;scaling=true";
  Start(2);
  Init(3, kF32, n, "g", protocol::kOpSum, attrs);
  auto codec = CodecOf(attrs, kF32);
  auto p0 = Payload(*codec, kF32, n, 3, 1, 0);
  auto p1 = Payload(*codec, kF32, n, 3, 1, 1);
  PushPayload(3, 1, 0, p0, kF32);
  auto damaged = p1;
  damaged.resize(damaged.size() - 1);  // a truncated body
  PushPayload(3, 1, 1, damaged, kF32);
  Status st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kProtocol) << st.ToString();
  EXPECT_TRUE(Has(st.message(), "tensor 'g'") && Has(st.message(), "key 3") && Has(st.message(), "round 1") &&
              Has(st.message(), "worker 1"))
      << st.message();
  auto garbled = p1;
  garbled[0] ^= 0xff;  // not a payload header
  PushPayload(3, 1, 1, garbled, kF32);
  EXPECT_EQ(NextError(conns_[1]).code(), StatusCode::kProtocol);
  Drain();
  EXPECT_FALSE(conns_[0]->NextSent(std::chrono::milliseconds(0))) << "the round must still wait for worker 1";
  PushPayload(3, 1, 1, p1, kF32);
  std::vector<float> sum(n, 0.0f);
  ASSERT_TRUE(codec->DecompressAdd(p0.data(), p0.size(), n, sum.data()).ok());
  ASSERT_TRUE(codec->DecompressAdd(p1.data(), p1.size(), n, sum.data()).ok());
  std::vector<uint8_t> want(codec->MaxCompressedBytes(n));
  want.resize(codec->Compress(sum.data(), n, 3, 1, want.data(), want.size()).value());
  EXPECT_EQ(Reply(0).payload, Bytes(want));
  EXPECT_EQ(Reply(1).payload, Bytes(want));
}

TEST_F(SumEngineCompressedTest, ASumTheCodecCannotCompressFailsThatRoundOnly) {
  // Dithering cannot quantise inf: two pushes of 3e38 sum past float32's range. That round fails
  // for every worker, naming the tensor, key and round; the next round is fine.
  const size_t n = 4;
  const std::string attrs = "compressor=dithering;k=4";
  Start(2);
  Init(6, kF32, n, "huge", protocol::kOpSum, attrs);
  auto codec = CodecOf(attrs, kF32);
  const auto push = [&](uint32_t round, float v) {
    std::vector<float> x(n, v);
    std::vector<uint8_t> out(codec->MaxCompressedBytes(n));
    auto len = codec->Compress(x.data(), n, 6, round, out.data(), out.size());
    ASSERT_TRUE(len.ok()) << len.status().ToString();
    out.resize(len.value());
    for (int w = 0; w < 2; ++w) PushPayload(6, round, w, out, kF32);
  };
  push(1, 3e38f);
  for (int w = 0; w < 2; ++w) {
    Status st = NextError(conns_[w]);
    EXPECT_TRUE(Has(st.message(), "tensor 'huge' (key 6) round 1: compressing the round's sum")) << st.message();
  }
  push(2, 1.0f);
  for (int w = 0; w < 2; ++w) EXPECT_EQ(Reply(w).header.round, 2u);
}

TEST_F(SumEngineCompressedTest, AJoinedWorkerAddsNothingToACompressedSum) {
  const size_t n = 8;
  const std::string attrs = "cast=fp16";
  constexpr uint64_t kJoin = 900;
  Start(2);
  Init(kJoin, DataType::kInt32, 1, "__byteps.join", protocol::kOpJoin);
  Init(2, kF32, n, "g", protocol::kOpSum, attrs);
  auto codec = CodecOf(attrs, kF32);
  for (int w = 0; w < 2; ++w) PushPayload(2, 1, w, Payload(*codec, kF32, n, 2, 1, w), kF32);
  for (int w = 0; w < 2; ++w) (void)Reply(w);
  Push(kJoin, 1, 1, testing::Encode(DataType::kInt32, {1}), DataType::kInt32);  // worker 1 joins
  auto p0 = Payload(*codec, kF32, n, 2, 2, 0);
  PushPayload(2, 2, 0, p0, kF32);
  std::vector<float> sum(n, 0.0f);
  ASSERT_TRUE(codec->DecompressAdd(p0.data(), p0.size(), n, sum.data()).ok());
  std::vector<uint8_t> want(codec->MaxCompressedBytes(n));
  want.resize(codec->Compress(sum.data(), n, 2, 2, want.data(), want.size()).value());
  EXPECT_EQ(Reply(0).payload, Bytes(want));
}

TEST_F(SumEngineCompressedTest, APushWhoseFlagDisagreesWithTheKeyIsANamedError) {
  const size_t n = 8;
  Start(2);
  Init(1, kF32, n, "c", protocol::kOpSum, "compressor=onebit");
  Init(2, kF32, n, "plain");
  PushPayload(1, 1, 0, testing::Encode(kF32, Values(0, n, 1)), kF32, /*compressed=*/false);
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(st.message(), "tensor 'c' (key 1): worker 0 pushed round 1 uncompressed")) << st.message();
  auto codec = CodecOf("compressor=onebit", kF32);
  PushPayload(2, 1, 1, Payload(*codec, kF32, n, 2, 1, 1), kF32, /*compressed=*/true);
  st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(st.message(), "tensor 'plain' (key 2): worker 1 pushed round 1 compressed, but the key was "
                                "declared without compression"))
      << st.message();
  // A compressed payload larger than the codec writes.
  std::vector<uint8_t> big(codec->MaxCompressedBytes(n) + 1, 0);
  PushPayload(1, 1, 1, big, kF32);
  st = NextError(conns_[1]);
  EXPECT_TRUE(Has(st.message(), "worker 1 pushed a compressed payload of")) << st.message();
  // None of them counted: both keys still complete their first round with good pushes.
  for (int w = 0; w < 2; ++w) PushPayload(1, 1, w, Payload(*codec, kF32, n, 1, 1, w), kF32);
  for (int w = 0; w < 2; ++w) (void)Reply(w);
  for (int w = 0; w < 2; ++w) Push(2, 1, w, testing::Encode(kF32, Values(w, n, 1)), kF32);
  for (int w = 0; w < 2; ++w) {
    SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
    EXPECT_FALSE(f.header.flags & protocol::kFlagCompressed);
    EXPECT_EQ(f.payload, Bytes(testing::Encode(kF32, Sum(2, n, 1))));
  }
}

TEST_F(SumEngineCompressedTest, DifferingCompressionAttributesAreAMismatchNamingTheAttribute) {
  Start(2);
  Init(4, 0, Decl("g", kF32, 8, "compressor=topk;k=0.25"));
  Init(4, 1, Decl("g", kF32, 8, "compressor=topk;k=0.5"));
  Status st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_TRUE(Has(st.message(), "k is 0.25 on worker 0 but 0.5 on worker 1")) << st.message();
}

TEST_F(SumEngineCompressedTest, CompressionOfAnythingButASumIsANamedError) {
  Start(1);
  Init(1, 0, Decl("gathered", kF32, 8, "compressor=onebit", protocol::kOpConcat));
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(st.message(), "compression of tensor 'gathered' (key 1): a concat cannot be compressed"))
      << st.message();
  Init(2, 0, Decl("smallest", kF32, 8, "compressor=topk;k=0.5", protocol::kOpMin));
  st = NextError(conns_[0]);
  EXPECT_TRUE(Has(st.message(), "compression of tensor 'smallest' (key 2): a min cannot be compressed"))
      << st.message();
  Init(3, 0, Decl("ints", DataType::kInt32, 8, "compressor=onebit"));
  st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(st.message(), "'ints'") && Has(st.message(), "key 3")) << st.message();
  Init(4, 0, Decl("bad", kF32, 8, "compressor=topk"));  // k missing
  st = NextError(conns_[0]);
  EXPECT_TRUE(Has(st.message(), "'bad'") && Has(st.message(), "key 4")) << st.message();
  // The key stays failed: its pushes get the declaration's error.
  PushPayload(2, 1, 0, std::vector<uint8_t>(32, 0), kF32);
  EXPECT_TRUE(Has(NextError(conns_[0]).message(), "a min cannot be compressed"));
}

}  // namespace
}  // namespace byteps::server
