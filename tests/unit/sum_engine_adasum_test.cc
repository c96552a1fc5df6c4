// The "adasum" key policy of one summation shard: every worker's push of a round is kept and the
// round's result is the Adasum tree of the pushes in rank order (whatever order they arrive in),
// compared against a float64 reference written here; rounds do not mix; integer dtypes are
// refused at the declaration; a worker that declares the key as a sum gets a mismatch.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "protocol/error_frame.h"
#include "server/buffer_pool.h"
#include "server/sum_engine.h"
#include "tests/support/fake_transport.h"
#include "tests/support/typed_values.h"

namespace byteps::server {
namespace {

using protocol::KeyInit;
using protocol::Opcode;
using Conn = std::shared_ptr<testing::FakeConnection>;
using Vec = std::vector<double>;

Vec Ref(const Vec& a, const Vec& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] * b[i], na += a[i] * a[i], nb += b[i] * b[i];
  const double ca = na < std::sqrt(DBL_MIN) ? 1 : 1 - d / (2 * na), cb = nb < std::sqrt(DBL_MIN) ? 1 : 1 - d / (2 * nb);
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Worker w's gradient in round r: correlated across workers, so the order of the tree matters.
Vec Grad(int w, uint32_t r, size_t n) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.3 * i + r) + 0.25 * (w + 1) * std::cos(0.7 * i * (w + 1));
  return v;
}

class AdasumKeyTest : public ::testing::Test {
 protected:
  void Start(int n) {
    for (int w = 0; w < n; ++w) conns_.push_back(std::make_shared<testing::FakeConnection>("worker " + std::to_string(w), nullptr));
    engine_ = std::make_unique<SumEngine>(0, n);
  }
  void TearDown() override { engine_.reset(); }
  void Init(uint64_t key, int w, const std::string& op, DataType dt, size_t n) {
    const uint64_t bytes = n * DataTypeSize(dt);
    engine_->Post(InitTask{key, w, conns_[w], KeyInit{"adasum.g", bytes, static_cast<int>(dt), bytes, op, ""}});
  }
  void Push(uint64_t key, uint32_t round, int w, DataType dt, const Vec& v) {
    std::vector<uint8_t> bytes = testing::Encode(dt, v);
    PushTask t;
    t.key = key;
    t.round = round;
    t.worker = w;
    t.request_id = 100 * round + w;
    t.dtype = static_cast<uint8_t>(dt);
    t.conn = conns_[w];
    t.data = pool_.Get(bytes.size()).value();
    std::memcpy(t.data.get(), bytes.data(), bytes.size());
    t.bytes = bytes.size();
    engine_->Post(std::move(t));
  }
  Vec Reply(int w, DataType dt, size_t n, uint32_t round) {
    auto f = conns_[w]->NextSent();
    if (!f || f->header.opcode != Opcode::kPushPullReply) {
      ADD_FAILURE() << "worker " << w << ": no reply" << (f ? ": " + f->payload : "");
      return {};
    }
    EXPECT_EQ(f->header.round, round);
    EXPECT_EQ(f->payload.size(), n * DataTypeSize(dt));
    Vec v(n);
    for (size_t i = 0; i < n; ++i) v[i] = testing::LoadValue(f->payload.data(), dt, i);
    return v;
  }
  Status Error(int w) {
    auto f = conns_[w]->NextSent();
    if (!f || f->header.opcode != Opcode::kError) {
      ADD_FAILURE() << "worker " << w << ": no error";
      return Status::Ok();
    }
    return protocol::StatusFromErrorFrame(f->header, f->payload);
  }

  BufferPool pool_;
  std::vector<Conn> conns_;
  std::unique_ptr<SumEngine> engine_;
};

TEST_F(AdasumKeyTest, ThreeWorkersCombineInRankOrderWhateverTheArrivalOrder) {
  Start(3);
  const size_t n = 45;
  uint64_t key = 1;
  for (DataType dt : {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16}) {
    SCOPED_TRACE(DataTypeName(dt));
    ++key;
    for (int w = 0; w < 3; ++w) Init(key, w, protocol::kOpAdasum, dt, n);
    for (uint32_t round = 1; round <= 2; ++round) {  // the second round starts from nothing
      std::vector<Vec> g;
      for (int w = 0; w < 3; ++w) {
        Vec v = Grad(w, round, n);
        for (double& x : v) x = testing::LoadValue(testing::Encode(dt, {x}).data(), dt, 0);  // as the dtype holds it
        g.push_back(v);
      }
      for (int w : {2, 0, 1}) Push(key, round, w, dt, g[w]);
      const Vec want = Ref(g[0], Ref(g[1], g[2]));  // R(0,3): mid = 1
      const double tol = dt == DataType::kFloat16 ? 4e-3 : dt == DataType::kFloat32 ? 1e-6 : 1e-13;
      for (int w = 0; w < 3; ++w) {
        Vec got = Reply(w, dt, n, round);
        ASSERT_EQ(got.size(), n);
        for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << w << " " << i;
      }
    }
  }
}

TEST_F(AdasumKeyTest, AnIntegerAdasumKeyIsRefusedNamingTheTensor) {
  Start(2);
  Init(7, 0, protocol::kOpAdasum, DataType::kInt32, 4);
  Status st = Error(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("adasum of tensor 'adasum.g' (key 7): dtype int32"), std::string::npos) << st.message();
  Push(7, 1, 1, DataType::kInt32, {1, 2, 3, 4});
  EXPECT_EQ(Error(1).code(), StatusCode::kInvalidArgument);
}

TEST_F(AdasumKeyTest, AWorkerThatDeclaresASumGetsAMismatch) {
  Start(2);
  Init(9, 0, protocol::kOpAdasum, DataType::kFloat32, 4);
  Init(9, 1, protocol::kOpSum, DataType::kFloat32, 4);
  Status st = Error(1);
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find("is a adasum on worker 0 but a sum on worker 1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace byteps::server
