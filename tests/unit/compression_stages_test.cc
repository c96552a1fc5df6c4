// The worker's compression: the compress and decompress stages (on their codec thread) against the
// codecs used by hand, the push-pull stage with compressed partitions, and the engine's
// normalisation of a request's compression attributes. Completions are waited for with deadlines.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <numeric>
#include <vector>

#include "common/half.h"
#include "compress/codec.h"
#include "compress/error_feedback.h"
#include "compress/momentum.h"
#include "protocol/control.h"
#include "protocol/frame.h"
#include "protocol/key_layout.h"
#include "worker/engine.h"
#include "worker/stages/codec_thread.h"
#include "worker/stages/codec_stages.h"
#include "worker/stages/part_codecs.h"
#include "worker/stages/push_pull_stage.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using protocol::Header;
using protocol::Opcode;
using testing::MakeOp;
using testing::MakePlan;
using testing::RecordingSink;

compress::Params MustParams(const std::string& attrs) {
  auto p = compress::ParseParams(protocol::ParseAttrs(attrs), "t");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : compress::Params{};
}

std::vector<uint8_t> Payload(const pipeline::PartitionTask& t) { return {t.src, t.src + t.push_len}; }

class CompressionStagesTest : public ::testing::Test {
 protected:
  // An operation of `parts` partitions of `n` float32 (or `dtype`) elements, compressed with `attrs`.
  std::shared_ptr<pipeline::Operation> Op(const std::string& attrs, const void* in, void* out, size_t parts,
                                          size_t n, DataType dtype = DataType::kFloat32, bool average = false,
                                          uint32_t declared_key = 5) {
    plans.push_back(MakePlan("grad", declared_key, parts, n * DataTypeSize(dtype), dtype));
    auto op = MakeOp(*plans.back(), pipeline, in, out, 0, average);
    op->request.compression = std::make_shared<const compress::Params>(MustParams(attrs));
    ops.push_back(op);  // alive to the end: the sink records completions by task address
    return op;
  }
  Status Compress(pipeline::PartitionTask* t, uint32_t round) {
    t->round = round;
    compress.Start(t);
    return sink.WaitFor(t);
  }

  RecordingSink sink;
  RecordingSink decoded;  // the decompress stage's completions
  std::atomic<double> lr{0};
  stages::CodecThread codec;
  stages::PartCodecs codecs{&lr, /*size=*/2};
  stages::CompressStage compress{&sink, &codec, &codecs};
  stages::DecompressStage decompress{&decoded, &codec, &codecs};
  pipeline::Pipeline pipeline{{&compress, &decompress}};
  std::vector<std::unique_ptr<planning::TensorPlan>> plans;
  std::vector<std::shared_ptr<pipeline::Operation>> ops;
};

TEST_F(CompressionStagesTest, CompressWritesWhatTheCodecWritesAndCarriesTheResidualAcrossRounds) {
  const std::string attrs = "compressor=topk;k=2;ef=vanilla";
  std::vector<float> g1 = {0.5f, -3, 1, 0.25f, 2, -0.75f, 0.1f, 4};
  std::vector<float> g2 = {1, 1, -1, 2, 0.5f, -2, 3, 0.2f};
  std::vector<float> out(8);
  auto codec_ref = compress::MakeCodec(MustParams(attrs), DataType::kFloat32, "grad");
  ASSERT_TRUE(codec_ref.ok());
  compress::ErrorFeedback ef_ref(8);
  std::vector<uint8_t> want(codec_ref.value()->MaxCompressedBytes(8));
  for (uint32_t round = 1; round <= 2; ++round) {
    // The engine's learning rate halves: the residual carried into round 2 is scaled by 0.1 / 0.05.
    const double step_lr = round == 1 ? 0.1 : 0.05;
    lr = step_lr;
    const std::vector<float> before = round == 1 ? g1 : g2;
    std::vector<float> in = before;
    auto op = Op(attrs, in.data(), out.data(), 1, 8);
    pipeline::PartitionTask* t = &op->parts[0];
    ASSERT_TRUE(Compress(t, round).ok());
    ef_ref.SetLearningRate(step_lr);
    auto n = ef_ref.Compress(*codec_ref.value(), before.data(), 8, t->key, round, want.data(), want.size());
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(Payload(*t), std::vector<uint8_t>(want.begin(), want.begin() + *n)) << "round " << round;
    EXPECT_TRUE(t->wire.compressed);
    EXPECT_NE(t->wire.reply, nullptr);
    EXPECT_GE(t->wire.reply_cap, *n);
    EXPECT_EQ(in, before);  // the user's input is never modified
    ASSERT_NE(codecs.error_feedback(t->key), nullptr);
    EXPECT_EQ(codecs.error_feedback(t->key)->residual(), ef_ref.residual());
  }
  // The residual is not zero: what topk dropped in round 1 went into round 2.
  EXPECT_NE(ef_ref.residual(), std::vector<float>(8, 0.f));
}

TEST_F(CompressionStagesTest, MomentumRewritesACopyBeforeTheCodec) {
  const std::string attrs = "compressor=onebit;scaling=true;momentum=nesterov;mu=0.9";
  auto codec_ref = compress::MakeCodec(MustParams(attrs), DataType::kFloat32, "grad");
  ASSERT_TRUE(codec_ref.ok());
  compress::NesterovMomentum m_ref(6, 0.9);
  std::vector<float> out(6);
  for (uint32_t round = 1; round <= 3; ++round) {
    std::vector<float> in = {1, -2, 0.5f, -0.25f, 3, -1};
    for (float& x : in) x *= static_cast<float>(round % 2 ? 1 : -0.5);
    const std::vector<float> before = in;
    auto op = Op(attrs, in.data(), out.data(), 1, 6);
    ASSERT_TRUE(Compress(&op->parts[0], round).ok());
    std::vector<float> g = before;
    m_ref.Apply(g.data(), 6);
    std::vector<uint8_t> want(codec_ref.value()->MaxCompressedBytes(6));
    auto n = codec_ref.value()->Compress(g.data(), 6, op->parts[0].key, round, want.data(), want.size());
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(Payload(op->parts[0]), std::vector<uint8_t>(want.begin(), want.begin() + *n)) << "round " << round;
    EXPECT_EQ(in, before);
    EXPECT_EQ(codecs.momentum(op->parts[0].key)->momentum(), m_ref.momentum());
  }
}

TEST_F(CompressionStagesTest, AFloat16TensorWithErrorFeedbackCompressesItsFloat32Values) {
  const std::string attrs = "compressor=randomk;k=3;ef=vanilla;seed=7";
  std::vector<uint16_t> in(8);
  std::vector<float> as_f32(8);
  for (size_t i = 0; i < 8; ++i) {
    in[i] = FloatToHalf(static_cast<float>(i) - 3.5f);
    as_f32[i] = HalfToFloat(in[i]);
  }
  std::vector<uint16_t> out(8);
  auto op = Op(attrs, in.data(), out.data(), 1, 8, DataType::kFloat16);
  ASSERT_TRUE(Compress(&op->parts[0], 1).ok());
  auto codec_ref = compress::MakeCodec(MustParams(attrs), DataType::kFloat32, "grad");
  compress::ErrorFeedback ef_ref(8);
  std::vector<uint8_t> want(codec_ref.value()->MaxCompressedBytes(8));
  auto n = ef_ref.Compress(*codec_ref.value(), as_f32.data(), 8, op->parts[0].key, 1, want.data(), want.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Payload(op->parts[0]), std::vector<uint8_t>(want.begin(), want.begin() + *n));
}

TEST_F(CompressionStagesTest, DecompressDecodesTheReplyIntoTheOutputAndAverages) {
  const std::string attrs = "cast=fp16";
  std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8}, out(8, 0.f);
  auto op = Op(attrs, in.data(), out.data(), 2, 4, DataType::kFloat32, /*average=*/true);
  for (pipeline::PartitionTask& t : op->parts) ASSERT_TRUE(Compress(&t, 1).ok());
  // The "server's" reply: the sum of two workers' values, compressed alike.
  auto codec_ref = compress::MakeCodec(MustParams(attrs), DataType::kFloat32, "grad");
  for (size_t i = 0; i < 2; ++i) {
    pipeline::PartitionTask* t = &op->parts[i];
    std::vector<float> sum(4);
    for (size_t j = 0; j < 4; ++j) sum[j] = 2 * in[i * 4 + j];
    auto n = codec_ref.value()->Compress(sum.data(), 4, t->key, 1, t->wire.reply, t->wire.reply_cap);
    ASSERT_TRUE(n.ok());
    t->wire.reply_len = *n;
    decompress.Start(t);
    ASSERT_TRUE(decoded.WaitFor(t).ok());
  }
  EXPECT_EQ(out, in);  // (2 x in) / 2 workers
  EXPECT_EQ(op->parts[1].src, op->parts[1].dst);
}

TEST_F(CompressionStagesTest, ADamagedReplyIsANamedProtocolError) {
  std::vector<float> in(8, 1.f), out(8, 0.f);
  auto op = Op("compressor=topk;k=2", in.data(), out.data(), 1, 8);
  pipeline::PartitionTask* t = &op->parts[0];
  ASSERT_TRUE(Compress(t, 1).ok());
  std::memset(t->wire.reply, 0xab, 16);
  t->wire.reply_len = 16;
  decompress.Start(t);
  Status st = decoded.WaitFor(t);
  EXPECT_EQ(st.code(), StatusCode::kProtocol) << st.ToString();
  EXPECT_NE(st.message().find("'grad'"), std::string::npos) << st.message();
  EXPECT_EQ(out, std::vector<float>(8, 0.f));  // untouched
}

TEST_F(CompressionStagesTest, RetiringAGenerationFreesItsKeysStateOnceTheirRoundsAreDecoded) {
  const std::string attrs = "compressor=topk;k=2;ef=vanilla";
  std::vector<float> in(8, 1.f), out(8);
  auto kept = Op(attrs, in.data(), out.data(), 1, 8, DataType::kFloat32, false, protocol::MakeDeclaredKey(0, 5));
  auto flying = Op(attrs, in.data(), out.data(), 1, 8, DataType::kFloat32, false, protocol::MakeDeclaredKey(1, 5));
  auto done = Op(attrs, in.data(), out.data(), 1, 8, DataType::kFloat32, false, protocol::MakeDeclaredKey(1, 6));
  auto codec_ref = compress::MakeCodec(MustParams(attrs), DataType::kFloat32, "grad");
  ASSERT_TRUE(codec_ref.ok());
  const auto decode = [&](pipeline::PartitionTask* t) {
    auto n = codec_ref.value()->Compress(in.data(), 8, t->key, 1, t->wire.reply, t->wire.reply_cap);
    ASSERT_TRUE(n.ok());
    t->wire.reply_len = *n;
    decompress.Start(t);
    ASSERT_TRUE(decoded.WaitFor(t).ok());
  };
  const auto retire = [&](uint32_t g) {
    std::promise<void> ran;
    codec.Post([&] { codecs.Retire(g); });
    codec.Post([&] { ran.set_value(); });  // after the one before it
    ASSERT_EQ(ran.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  };
  for (auto* op : {&kept, &flying, &done}) ASSERT_TRUE(Compress(&(*op)->parts[0], 1).ok());
  decode(&done->parts[0]);
  ASSERT_EQ(codecs.size(), 3u);
  retire(1);
  EXPECT_EQ(codecs.size(), 2u);  // generation 1's idle key went; its key with a round in flight stays
  EXPECT_EQ(codecs.error_feedback(done->parts[0].key), nullptr);
  EXPECT_NE(codecs.error_feedback(flying->parts[0].key), nullptr);
  decode(&flying->parts[0]);  // its last round: decoded, then its state goes
  EXPECT_EQ(codecs.size(), 1u);
  EXPECT_NE(codecs.error_feedback(kept->parts[0].key), nullptr);  // generation 0 is untouched
}

TEST(CodecThreadTest, FailAllCompletesTheQueuedJobsWithTheFailure) {
  RecordingSink sink;
  auto plan = MakePlan("w", 0, 3, 16);
  pipeline::Pipeline p;
  std::vector<float> buf(12);
  auto op = MakeOp(*plan, p, buf.data(), buf.data());
  std::mutex gate;
  std::unique_lock<std::mutex> held(gate);
  {
    stages::CodecThread codec;
    // The first job waits on the gate, so the others stay queued.
    codec.Post(&op->parts[0], &sink, [&](pipeline::PartitionTask*) {
      std::lock_guard<std::mutex> wait(gate);
      return Status::Ok();
    });
    codec.Post(&op->parts[1], &sink, [](pipeline::PartitionTask*) { return Status::Ok(); });
    codec.Post(&op->parts[2], &sink, [](pipeline::PartitionTask*) { return Status::Ok(); });
    // Job 0 may or may not have started; jobs 1 and 2 have not (job 0 holds the thread or the queue's front).
    codec.FailAll(Aborted("job failed"));
    EXPECT_EQ(sink.WaitFor(&op->parts[2]).code(), StatusCode::kAborted);
    EXPECT_EQ(sink.WaitFor(&op->parts[1]).code(), StatusCode::kAborted);
    held.unlock();
    Status first = sink.WaitFor(&op->parts[0]);
    EXPECT_TRUE(first.ok() || first.code() == StatusCode::kAborted) << first.ToString();
  }
}

// ---- push-pull with compressed partitions ---------------------------------------------------

class NullConnection : public transport::Connection {
 public:
  Status Send(const Header&, const std::vector<iovec>&, transport::SendCallback) override { return Status::Ok(); }
  void Close(const Status&) override {}
  bool closed() const override { return false; }
  std::string peer_name() const override { return "server 1 (127.0.0.1:9, pid 6)"; }
  void set_peer_name(std::string) override {}
};

class RecordingPlane : public server_links::DataPlane {
 public:
  size_t ConnIndex(int, uint64_t) const override { return 0; }
  Status Send(int server, const server_links::OutFrame& f) override {
    std::lock_guard<std::mutex> lock(mu);
    sent.push_back(f);
    return Status::Ok();
  }
  void Flush() override {}
  std::mutex mu;
  std::vector<server_links::OutFrame> sent;
};

class CompressedPushPullTest : public ::testing::Test {
 protected:
  RecordingSink sink;
  RecordingPlane plane;
  NullConnection conn;
  stages::PushPullStage stage{&sink, &plane, /*host_rank=*/0, /*size=*/2};
  pipeline::Pipeline pipeline{{&stage}};
  std::vector<float> in = std::vector<float>(8, 1.f), out = std::vector<float>(8, 0.f);
  std::vector<uint8_t> send = std::vector<uint8_t>(20, 7), reply = std::vector<uint8_t>(40, 0);

  void MakeCompressed(pipeline::PartitionTask* t) {
    t->src = send.data();
    t->push_len = send.size();
    t->wire.compressed = true;
    t->wire.reply = reply.data();
    t->wire.reply_cap = reply.size();
  }
  Header ReplyHeader(const pipeline::PartitionTask& t, size_t len, bool compressed) {
    Header h;
    h.opcode = Opcode::kPushPullReply;
    h.key = t.key;
    h.request_id = t.id;
    h.payload_len = len;
    if (compressed) h.flags |= protocol::kFlagCompressed;
    return h;
  }
};

TEST_F(CompressedPushPullTest, PushesTheFlaggedPayloadAndReceivesTheReplyUndivided) {
  auto plan = MakePlan("w", 3, 1, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data(), 0, /*average=*/true);
  pipeline::PartitionTask* t = &op->parts[0];
  MakeCompressed(t);
  EXPECT_EQ(stage.CreditFor(*t), 20u);  // the bytes it sends, not the partition's 32
  stage.Start(t);
  ASSERT_EQ(plane.sent.size(), 2u);  // InitKey, PushPull
  const server_links::OutFrame& push = plane.sent[1];
  EXPECT_EQ(push.header.opcode, Opcode::kPushPull);
  EXPECT_NE(push.header.flags & protocol::kFlagCompressed, 0);
  EXPECT_EQ(push.header.payload_len, 20u);
  EXPECT_EQ(push.data, send.data());
  Header h = ReplyHeader(*t, 24, true);
  auto b = stage.OnReplyHeader(conn, h);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->data, reply.data());
  std::memset(b->data, 9, 24);
  stage.OnReplyFrame(conn, h, *b);
  ASSERT_TRUE(sink.WaitFor(t).ok());
  EXPECT_EQ(t->wire.reply_len, 24u);
  EXPECT_EQ(out, std::vector<float>(8, 0.f));  // nothing written or averaged: the decompress stage's work
  EXPECT_EQ(t->src, send.data());
}

TEST_F(CompressedPushPullTest, AnUncompressedTaskIsSentAsBefore) {
  auto plan = MakePlan("w", 3, 1, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  stage.Start(&op->parts[0]);
  EXPECT_EQ(plane.sent.back().header.flags & protocol::kFlagCompressed, 0);
  EXPECT_EQ(stage.CreditFor(op->parts[0]), 32u);
}

TEST_F(CompressedPushPullTest, AReplyOfTheOtherKindIsAProtocolErrorNamingThePeer) {
  auto plan = MakePlan("w", 3, 2, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  MakeCompressed(&op->parts[0]);
  stage.Start(&op->parts[0]);
  stage.Start(&op->parts[1]);
  auto a = stage.OnReplyHeader(conn, ReplyHeader(op->parts[0], 32, false));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kProtocol);
  EXPECT_EQ(a.status().message(),
            "server 1 (127.0.0.1:9, pid 6) answered compressed request " + std::to_string(op->parts[0].id) +
                " (key " + std::to_string(op->parts[0].key) + ") with an uncompressed reply");
  auto b = stage.OnReplyHeader(conn, ReplyHeader(op->parts[1], 32, true));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("answered uncompressed request"), std::string::npos);
  EXPECT_NE(b.status().message().find("with a compressed reply"), std::string::npos);
  auto c = stage.OnReplyHeader(conn, ReplyHeader(op->parts[0], 41, true));  // over reply_cap
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("at most 40 bytes"), std::string::npos) << c.status().message();
}

// ---- the engine's normalisation ------------------------------------------------------------

TensorRequest Request(const std::string& attrs, size_t bytes = 1 << 20, DataType dtype = DataType::kFloat32,
                      ReduceOp op = ReduceOp::kSum) {
  TensorRequest r;
  r.name = "byteps.w";
  r.bytes = bytes;
  r.dtype = dtype;
  r.op = op;
  r.attrs = attrs;
  return r;
}

TEST(NormalizeCompressionTest, RewritesTheKeysIntoTheCanonicalFormAfterTheOtherAttributes) {
  TensorRequest r = Request("shape=4x4;compressor_type=TopK;ef_type=vanilla;compressor_k=0.01;join=fail");
  ASSERT_TRUE(Engine::NormalizeCompression(r, nullptr, 65536).ok());
  const compress::Params want = MustParams("compressor=topk;k=0.01;ef=vanilla");
  EXPECT_EQ(r.attrs, "shape=4x4;join=fail;" + want.ToAttrs());
  EXPECT_EQ(r.attrs, "shape=4x4;join=fail;compressor=topk;k=0.01;ef=vanilla");
  ASSERT_NE(r.compression, nullptr);
  EXPECT_EQ(*r.compression, want);
  // Normalising the canonical form again changes nothing.
  TensorRequest again = Request(r.attrs);
  ASSERT_TRUE(Engine::NormalizeCompression(again, nullptr, 65536).ok());
  EXPECT_EQ(again.attrs, r.attrs);
}

TEST(NormalizeCompressionTest, WithoutCompressionTheRequestIsUntouched) {
  TensorRequest r = Request("shape=4;;members=0,1");
  ASSERT_TRUE(Engine::NormalizeCompression(r, nullptr, 65536).ok());
  EXPECT_EQ(r.attrs, "shape=4;;members=0,1");
  EXPECT_EQ(r.compression, nullptr);
  TensorRequest none = Request("shape=4;compressor=none");
  ASSERT_TRUE(Engine::NormalizeCompression(none, nullptr, 0).ok());
  EXPECT_EQ(none.attrs, "shape=4");
  EXPECT_EQ(none.compression, nullptr);
}

TEST(NormalizeCompressionTest, ATensorUnderTheThresholdIsSentUncompressed) {
  TensorRequest small = Request("shape=8;compressor=onebit", 65535);
  ASSERT_TRUE(Engine::NormalizeCompression(small, nullptr, 65536).ok());
  EXPECT_EQ(small.attrs, "shape=8");
  EXPECT_EQ(small.compression, nullptr);
  TensorRequest at = Request("compressor=onebit", 65536);
  ASSERT_TRUE(Engine::NormalizeCompression(at, nullptr, 65536).ok());
  EXPECT_EQ(at.attrs, MustParams("compressor=onebit").ToAttrs());
  EXPECT_EQ(at.attrs, "compressor=onebit;scaling=false");
  EXPECT_NE(at.compression, nullptr);
}

TEST(NormalizeCompressionTest, DeclaredParamsApplyOnlyWhenTheRequestHasNone) {
  const compress::Params declared = MustParams("compressor=randomk;k=0.5;seed=3");
  TensorRequest plain = Request("shape=2");
  ASSERT_TRUE(Engine::NormalizeCompression(plain, &declared, 0).ok());
  EXPECT_EQ(plain.attrs, "shape=2;" + declared.ToAttrs());
  EXPECT_EQ(*plain.compression, declared);
  TensorRequest own = Request("cast=fp16");
  ASSERT_TRUE(Engine::NormalizeCompression(own, &declared, 0).ok());
  EXPECT_EQ(*own.compression, MustParams("cast=fp16"));
}

TEST(NormalizeCompressionTest, EveryErrorNamesTheTensor) {
  struct Case {
    TensorRequest r;
    std::string says;
  };
  std::vector<Case> cases = {
      {Request("compressor=zip"), "compressor"},
      {Request("compressor=topk;k=-1"), "k"},
      {Request("compressor=onebit", 1 << 20, DataType::kInt32), "int32"},
      {Request("compressor=onebit", 1 << 20, DataType::kFloat32, ReduceOp::kConcat),
       "compression of tensor 'byteps.w': a concatenation cannot be compressed; only sums (push_pull, allreduce) can"},
      {Request("compressor=onebit", 1 << 20, DataType::kFloat32, ReduceOp::kMax), "a max cannot be compressed"},
      {Request("compressor=onebit", 1 << 20, DataType::kFloat32, ReduceOp::kAdasum), "adasum cannot be compressed"},
      {Request("compressor=onebit;scatter", 1 << 20), "a reducescatter cannot be compressed"},
  };
  for (Case& c : cases) {
    Status st = Engine::NormalizeCompression(c.r, nullptr, 65536);
    ASSERT_FALSE(st.ok()) << c.r.attrs;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("'byteps.w'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
  }
  // Errors come before the threshold: a small tensor is refused alike.
  TensorRequest small = Request("compressor=onebit", 4, DataType::kFloat32, ReduceOp::kConcat);
  EXPECT_FALSE(Engine::NormalizeCompression(small, nullptr, 65536).ok());
}

TEST(NormalizeCompressionTest, DeclaredParamsAreCheckedWithTheirPrefixStripped) {
  EXPECT_TRUE(Engine::CheckParams("byteps.w", {{"byteps_compressor_type", "topk"}, {"byteps_compressor_k", "0.1"}}).ok());
  Status bad = Engine::CheckParams("byteps.w", {{"byteps_compressor_type", "zip"}});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'byteps.w'"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace byteps::worker
