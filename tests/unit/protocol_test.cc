// The wire header codec (frame.h) and the JSON control payloads (control.h): exact byte layout,
// round trips at the extremes, every rejection path with a message naming the field, and random
// bytes that must never crash the decoder.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "protocol/auth.h"
#include "protocol/control.h"
#include "protocol/error_frame.h"
#include "protocol/frame.h"
#include "protocol/key_layout.h"

namespace byteps::protocol {
namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
constexpr Opcode kAllOpcodes[] = {
    Opcode::kRegister, Opcode::kRegisterReply, Opcode::kBarrier,  Opcode::kBarrierRelease,
    Opcode::kHeartbeat, Opcode::kNodeFailed,   Opcode::kFinish,   Opcode::kTerminate,
    Opcode::kJobError,  Opcode::kHello,        Opcode::kInitKey,  Opcode::kPushPull,
    Opcode::kPushPullReply, Opcode::kError, Opcode::kLocalReady, Opcode::kLocalDone,
    Opcode::kAuthChallenge, Opcode::kAuthResponse, Opcode::kLocalGroup, Opcode::kLocalGo,
    Opcode::kShmHello, Opcode::kShmReady, Opcode::kShmBell,
    Opcode::kUcxHello, Opcode::kUcxReady, Opcode::kLeave,
    Opcode::kNameRequest, Opcode::kNameReply, Opcode::kRelease, Opcode::kTopRequest, Opcode::kTopReply};
// Bytes EncodeHeader always writes as zero and DecodeHeader ignores (frame.cc: kOffReserved, kOffPad).
constexpr size_t kIgnoredBytes[] = {7, 18, 19};

std::vector<uint8_t> Encode(const Header& h) {
  std::vector<uint8_t> b(kHeaderSize);
  EncodeHeader(h, b.data());
  return b;
}

void ExpectSameHeader(const Header& a, const Header& b) {
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.sender, b.sender);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.payload_len, b.payload_len);
  EXPECT_EQ(a.arg, b.arg);
}

void ExpectProtocolError(const Status& st, const std::string& needle) {
  EXPECT_EQ(st.code(), StatusCode::kProtocol) << st.ToString();
  EXPECT_NE(st.message().find(needle), std::string::npos) << "'" << st.message() << "' lacks '" << needle << "'";
}

TEST(FrameTest, HeaderSizeIsFixed) {
  static_assert(kHeaderSize == 48);
  static_assert(kMagic == 0x31535042);
  EXPECT_EQ(Encode(Header{}).size(), 48u);
}

TEST(FrameTest, RoundTripsEveryFieldAtZeroAndMax) {
  for (Opcode op : kAllOpcodes) {
    Header zero;
    zero.opcode = op;
    auto d = DecodeHeader(Encode(zero).data(), kHeaderSize, 0);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ExpectSameHeader(d.value(), zero);

    Header max;
    max.opcode = op;
    max.dtype = std::numeric_limits<decltype(max.dtype)>::max();
    max.flags = std::numeric_limits<decltype(max.flags)>::max();
    max.sender = std::numeric_limits<decltype(max.sender)>::max();
    max.round = std::numeric_limits<decltype(max.round)>::max();
    max.key = std::numeric_limits<decltype(max.key)>::max();
    max.request_id = std::numeric_limits<decltype(max.request_id)>::max();
    max.payload_len = std::numeric_limits<decltype(max.payload_len)>::max();
    max.arg = std::numeric_limits<decltype(max.arg)>::max();
    d = DecodeHeader(Encode(max).data(), kHeaderSize, kNoLimit);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ExpectSameHeader(d.value(), max);
  }
}

TEST(FrameTest, LittleEndianLayoutMatchesHandWrittenBytes) {
  Header h;
  h.opcode = Opcode::kPushPull;
  h.dtype = 7;
  h.flags = 0x0102;
  h.sender = 0x03040506;
  h.round = 0x0708090a;
  h.key = 0x1112131415161718;
  h.request_id = 0x2122232425262728;
  h.payload_len = 0x3132333435363738;
  h.arg = 0x41424344;
  const std::vector<uint8_t> expected = {
      'B',  'P',  'S',  '1',                           // magic
      kWireVersion,                                    // version
      18,                                              // opcode kPushPull
      0x07,                                            // dtype
      0x00,                                            // reserved
      0x02, 0x01,                                      // flags
      0x06, 0x05, 0x04, 0x03,                          // sender
      0x0a, 0x09, 0x08, 0x07,                          // round
      0x00, 0x00,                                      // pad
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // key
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // request_id
      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,  // payload_len
      0x44, 0x43, 0x42, 0x41};                         // arg
  ASSERT_EQ(expected.size(), kHeaderSize);
  EXPECT_EQ(Encode(h), expected);
  auto d = DecodeHeader(expected.data(), expected.size(), kNoLimit);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ExpectSameHeader(d.value(), h);
}

TEST(FrameTest, TruncatedHeaderIsAnErrorAtEveryLength) {
  const auto bytes = Encode(Header{});
  for (size_t len = 0; len < kHeaderSize; ++len) {
    auto d = DecodeHeader(bytes.data(), len, kNoLimit);
    ASSERT_FALSE(d.ok()) << "length " << len;
    ExpectProtocolError(d.status(), "truncated header: " + std::to_string(len) + " of 48");
  }
  EXPECT_TRUE(DecodeHeader(bytes.data(), kHeaderSize, kNoLimit).ok());
  EXPECT_TRUE(DecodeHeader(bytes.data(), kHeaderSize, 0).ok());  // payload 0 <= limit 0
}

TEST(FrameTest, RejectionsNameTheField) {
  auto bytes = Encode(Header{});
  bytes[0] = 'X';
  ExpectProtocolError(DecodeHeader(bytes.data(), kHeaderSize, kNoLimit).status(), "bad magic 0x31535058");

  bytes = Encode(Header{});
  bytes[4] = kWireVersion + 1;
  EXPECT_TRUE(IsWireVersionMismatch(bytes.data(), kHeaderSize));
  const Status other = DecodeHeader(bytes.data(), kHeaderSize, kNoLimit).status();
  EXPECT_EQ(other.code(), StatusCode::kInvalidArgument) << other.ToString();  // no retry can fix it
  EXPECT_NE(other.message().find("unsupported wire version " + std::to_string(kWireVersion + 1) + " (this build speaks " + std::to_string(kWireVersion) +
                                 ")"),
            std::string::npos)
      << other.ToString();
  EXPECT_FALSE(IsWireVersionMismatch(bytes.data(), kHeaderSize - 1));
  bytes[0] = 'X';
  EXPECT_FALSE(IsWireVersionMismatch(bytes.data(), kHeaderSize));  // not a byteps header at all

  for (int op : {0, 12, 15, 36, 200, 255}) {
    bytes = Encode(Header{});
    bytes[5] = static_cast<uint8_t>(op);
    ExpectProtocolError(DecodeHeader(bytes.data(), kHeaderSize, kNoLimit).status(),
                        "unknown opcode " + std::to_string(op));
  }

  Header big;
  big.opcode = Opcode::kPushPull;
  big.payload_len = 5000000000ull;
  bytes = Encode(big);
  auto d = DecodeHeader(bytes.data(), kHeaderSize, 1ull << 30);
  ExpectProtocolError(d.status(), "payload of 5000000000 bytes exceeds the limit of 1073741824");
  ExpectProtocolError(d.status(), "PushPull");
  EXPECT_TRUE(DecodeHeader(bytes.data(), kHeaderSize, 5000000000ull).ok());  // limit is inclusive
}

TEST(FrameTest, KnownOpcodesAndNames) {
  const std::string names[] = {"Register", "RegisterReply", "Barrier",  "BarrierRelease", "Heartbeat",
                               "NodeFailed", "Finish",      "Terminate", "JobError",      "Hello",
                               "InitKey",  "PushPull",      "PushPullReply", "Error", "LocalReady", "LocalDone",
                               "AuthChallenge", "AuthResponse", "LocalGroup", "LocalGo",
                               "ShmHello", "ShmReady", "ShmBell", "UcxHello", "UcxReady", "Leave",
                               "NameRequest", "NameReply", "Release", "TopRequest", "TopReply"};
  for (size_t i = 0; i < std::size(kAllOpcodes); ++i) {
    EXPECT_EQ(OpcodeName(kAllOpcodes[i]), names[i]);
    EXPECT_TRUE(IsKnownOpcode(static_cast<uint8_t>(kAllOpcodes[i])));
  }
  int known = 0;
  for (int op = 0; op < 256; ++op) known += IsKnownOpcode(static_cast<uint8_t>(op)) ? 1 : 0;
  EXPECT_EQ(known, static_cast<int>(std::size(kAllOpcodes)));
  EXPECT_STREQ(OpcodeName(static_cast<Opcode>(99)), "Unknown");

  Header h;
  h.opcode = Opcode::kInitKey;
  h.key = 65537;
  h.round = 3;
  EXPECT_EQ(DescribeHeader(h), "InitKey(key=65537, round=3, req=0, sender=0, len=0)");
}

// Random bytes never crash the decoder; whatever it accepts re-encodes to the same bytes except
// the reserved/pad bytes. Half the buffers get a valid magic + version so the later checks run too.
TEST(FrameTest, RandomBuffersDecodeSafely) {
  std::mt19937_64 rng(20240601);
  int accepted = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<uint8_t> b(kHeaderSize);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    if (iter % 2 == 0) {
      std::memcpy(b.data(), "BPS1", 4);
      b[4] = kWireVersion;
      b[9] &= 0x7f;  // no checksum flag: a random checksum field would (rightly) fail
      if (iter % 4 == 0) b[5] = static_cast<uint8_t>(kAllOpcodes[rng() % std::size(kAllOpcodes)]);
    }
    const uint64_t limit = (iter % 3 == 0) ? kNoLimit : rng();
    auto d = DecodeHeader(b.data(), b.size(), limit);
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), StatusCode::kProtocol);
      continue;
    }
    ++accepted;
    EXPECT_LE(d->payload_len, limit);
    auto re = Encode(d.value());
    for (size_t i : kIgnoredBytes) re[i] = b[i];
    ASSERT_EQ(re, b) << "iteration " << iter;
  }
  EXPECT_GT(accepted, 1000);  // the accepting path was exercised
}

// ---- control payloads ------------------------------------------------------------------------

TEST(ControlTest, RegisterRequestRoundTrip) {
  RegisterRequest m{.role = "server", .requested_rank = 3, .host = "10.0.0.7", .port = 4242, .pid = 77,
                    .num_workers = 8, .num_servers = 2, .job_secret_hash = "abc", .rejoin = true,
                    .instance = "9f86d081884c7d65"};
  auto d = DecodeRegisterRequest(Encode(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->rejoin);
  EXPECT_EQ(d->instance, "9f86d081884c7d65");
  EXPECT_EQ(d->role, "server");
  EXPECT_EQ(d->requested_rank, 3);
  EXPECT_EQ(d->host, "10.0.0.7");
  EXPECT_EQ(d->port, 4242);
  EXPECT_EQ(d->pid, 77);
  EXPECT_EQ(d->num_workers, 8);
  EXPECT_EQ(d->num_servers, 2);
  EXPECT_EQ(d->job_secret_hash, "abc");

  RegisterRequest ext{.role = "worker", .requested_rank = -1, .host = "", .port = 0,
                      .pid = std::numeric_limits<int>::max(), .num_workers = std::numeric_limits<int>::min(),
                      .num_servers = 0, .job_secret_hash = "quote\" backslash\\ unicode \xc3\xa9",
                      .rejoin = false, .instance = ""};
  d = DecodeRegisterRequest(Encode(ext));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->requested_rank, -1);
  EXPECT_EQ(d->pid, std::numeric_limits<int>::max());
  EXPECT_EQ(d->num_workers, std::numeric_limits<int>::min());
  EXPECT_EQ(d->job_secret_hash, ext.job_secret_hash);

  // rejoin and instance are optional (absent from older nodes); present, they must be typed right.
  d = DecodeRegisterRequest(R"({"role": "worker", "requested_rank": -1, "host": "h", "port": 0, "pid": 1,
                                "num_workers": 1, "num_servers": 1, "job_secret_hash": ""})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->rejoin);
  EXPECT_EQ(d->instance, "");
  d = DecodeRegisterRequest(R"({"role": "worker", "requested_rank": -1, "host": "h", "port": 0, "pid": 1,
                                "num_workers": 1, "num_servers": 1, "job_secret_hash": "", "instance": 7})");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'instance'"), std::string::npos) << d.status().ToString();
}

TEST(ControlTest, RegisterReplyRoundTripWithNodes) {
  RegisterReply m;
  m.rank = 1;
  m.nodes = {{"worker", 0, "127.0.0.1", 0, 11}, {"worker", 1, "127.0.0.2", 0, 12},
             {"server", 0, "h0", 9000, 13}};
  auto d = DecodeRegisterReply(Encode(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->error, "");
  EXPECT_EQ(d->rank, 1);
  EXPECT_EQ(d->nodes, m.nodes);

  RegisterReply refused{"job is full", -1, {}};
  d = DecodeRegisterReply(Encode(refused));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->error, "job is full");
  EXPECT_TRUE(d->nodes.empty());
  EXPECT_EQ(Describe(m.nodes[2]), "server 0 (h0:9000, pid 13)");
}

// Wire v13: the job id and the scheduler's clock travel in the reply; absent, they read as unknown.
TEST(ControlTest, RegisterReplyCarriesJobAndClock) {
  RegisterReply m;
  m.rank = 0;
  m.job = "0123456789abcdef";
  m.clock_us = 1'780'000'000'123'456;  // µs since the epoch: beyond 32 bits
  m.held_us = 2'500'000;
  auto d = DecodeRegisterReply(Encode(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->job, m.job);
  EXPECT_EQ(d->clock_us, m.clock_us);
  EXPECT_EQ(d->held_us, m.held_us);

  d = DecodeRegisterReply(R"({"error":"","rank":0,"nodes":[]})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->job, "");
  EXPECT_EQ(d->clock_us, 0);
  ExpectProtocolError(DecodeRegisterReply(R"({"error":"","rank":0,"nodes":[],"clock_us":"now"})").status(),
                      "'clock_us'");
  ExpectProtocolError(DecodeRegisterReply(R"({"error":"","rank":0,"nodes":[],"job":7})").status(), "'job'");
}

TEST(ControlTest, NodeFailedAndKeyInitRoundTrip) {
  NodeFailedNotice n{{"server", 2, "10.1.1.1", 7000, 99}, "no heartbeat for 15 s"};
  auto dn = DecodeNodeFailedNotice(Encode(n));
  ASSERT_TRUE(dn.ok()) << dn.status().ToString();
  EXPECT_EQ(dn->node, n.node);
  EXPECT_EQ(dn->reason, n.reason);

  KeyInit k{"layer1.weight", std::numeric_limits<uint64_t>::max(), 7, 1ull << 40, kOpMax, "shape=2x3;root=1"};
  auto dk = DecodeKeyInit(Encode(k));
  ASSERT_TRUE(dk.ok()) << dk.status().ToString();
  EXPECT_EQ(dk->name, k.name);
  EXPECT_EQ(dk->bytes, k.bytes);
  EXPECT_EQ(dk->dtype, 7);
  EXPECT_EQ(dk->tensor_bytes, k.tensor_bytes);
  EXPECT_EQ(dk->op, "max");
  EXPECT_EQ(dk->attrs, k.attrs);
}

TEST(ControlTest, KeyInitOpsAndAttributes) {
  for (const char* op : {kOpSum, kOpMin, kOpMax, kOpProduct, kOpConcat}) {
    auto d = DecodeKeyInit(Encode(KeyInit{"t", 4, 0, 4, op, ""}));
    ASSERT_TRUE(d.ok()) << op << ": " << d.status().ToString();
    EXPECT_EQ(d->op, op);
  }
  EXPECT_EQ(ReduceKindOfOp("sum"), ReduceKind::kSum);
  EXPECT_EQ(ReduceKindOfOp("min"), ReduceKind::kMin);
  EXPECT_EQ(ReduceKindOfOp("max"), ReduceKind::kMax);
  EXPECT_EQ(ReduceKindOfOp("prod"), ReduceKind::kProduct);
  EXPECT_FALSE(ReduceKindOfOp("concat").has_value());
  EXPECT_STREQ(OpOfReduceKind(ReduceKind::kProduct), "prod");
  // An older sender's payload (no op, no attrs): a sum without attributes.
  auto old = DecodeKeyInit(R"({"name":"t","bytes":4,"dtype":0,"tensor_bytes":4})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->op, "sum");
  EXPECT_EQ(old->attrs, "");
  auto bad = DecodeKeyInit(R"({"name":"t","bytes":4,"dtype":0,"tensor_bytes":4,"op":"avg"})");
  ExpectProtocolError(bad.status(), "InitKey of tensor 't': unknown op 'avg'");
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ParseAttrs(""), Pairs{});
  EXPECT_EQ(ParseAttrs("shape=2x3;root=1;;flag;x=a=b"),
            (Pairs{{"shape", "2x3"}, {"root", "1"}, {"flag", ""}, {"x", "a=b"}}));
}

TEST(ControlTest, GarbageAndNonObjectsAreErrors) {
  std::string deep = "{\"name\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::string bad[] = {"",      "{",      "not json", "[1,2,3]", "42",         "null",
                             "\"s\"", "true",   "{\"a\":}", "{}{}",    "\xff\xfe{}", deep,
                             std::string("{\"name\":\"a\0b\"}", sizeof("{\"name\":\"a\0b\"}") - 1)};
  for (const std::string& p : bad) {
    EXPECT_NO_THROW({
      EXPECT_FALSE(DecodeRegisterRequest(p).ok()) << p.substr(0, 40);
      EXPECT_FALSE(DecodeRegisterReply(p).ok()) << p.substr(0, 40);
      EXPECT_FALSE(DecodeNodeFailedNotice(p).ok()) << p.substr(0, 40);
      EXPECT_FALSE(DecodeKeyInit(p).ok()) << p.substr(0, 40);
    });
  }
  ExpectProtocolError(DecodeKeyInit("[1]").status(), "InitKey payload is not a JSON object");
}

TEST(ControlTest, MissingOrMistypedFieldsAreNamed) {
  const std::string good = R"({"name":"t","bytes":4,"dtype":0,"tensor_bytes":8})";
  ASSERT_TRUE(DecodeKeyInit(good).ok());
  ExpectProtocolError(DecodeKeyInit(R"({"bytes":4,"dtype":0,"tensor_bytes":8})").status(), "'name'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":5,"bytes":4,"dtype":0,"tensor_bytes":8})").status(), "'name'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":"4","dtype":0,"tensor_bytes":8})").status(), "'bytes'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":4.5,"dtype":0,"tensor_bytes":8})").status(), "'bytes'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":4,"dtype":null,"tensor_bytes":8})").status(), "'dtype'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":4,"dtype":0})").status(), "'tensor_bytes'");
  // Integers that do not fit the field are rejected, not wrapped.
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":-1,"dtype":0,"tensor_bytes":8})").status(), "'bytes'");
  ExpectProtocolError(DecodeKeyInit(R"({"name":"t","bytes":4,"dtype":4294967296,"tensor_bytes":8})").status(),
                      "'dtype'");

  RegisterRequest req{.role = "worker", .requested_rank = 0, .host = "h", .port = 1, .pid = 2, .num_workers = 3,
                      .num_servers = 4, .job_secret_hash = "", .rejoin = false, .instance = ""};
  std::string enc = Encode(req);
  for (const char* field : {"role", "requested_rank", "host", "port", "pid", "num_workers", "num_servers",
                            "job_secret_hash"}) {
    std::string key = std::string("\"") + field + "\":";
    std::string renamed = enc;
    renamed.replace(renamed.find(key), key.size(), "\"zz_" + std::string(field) + "\":");
    ExpectProtocolError(DecodeRegisterRequest(renamed).status(), std::string("'") + field + "'");
  }
  ExpectProtocolError(DecodeRegisterRequest(R"({"role":"worker","requested_rank":0,"host":"h","port":99999999999,)"
                                            R"("pid":2,"num_workers":3,"num_servers":4,"job_secret_hash":""})")
                          .status(),
                      "'port'");

  ExpectProtocolError(DecodeRegisterReply(R"({"error":"","rank":0})").status(), "'nodes'");
  ExpectProtocolError(DecodeRegisterReply(R"({"error":"","rank":0,"nodes":{}})").status(), "'nodes'");
  ExpectProtocolError(DecodeRegisterReply(R"({"error":"","rank":0,"nodes":[1]})").status(), "node entry");
  ExpectProtocolError(
      DecodeRegisterReply(R"({"error":"","rank":0,"nodes":[{"role":"worker","rank":0,"host":"h","pid":1}]})")
          .status(),
      "'port'");
  ExpectProtocolError(DecodeNodeFailedNotice(R"({"reason":"x"})").status(), "'node'");
  ExpectProtocolError(DecodeNodeFailedNotice(R"({"node":"x","reason":"x"})").status(), "node entry");
  ExpectProtocolError(
      DecodeNodeFailedNotice(R"({"node":{"role":"s","rank":0,"host":"h","port":1,"pid":1},"reason":3})").status(),
      "'reason'");
}

TEST(Crc32cTest, KnownValueAndIncremental) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(0, check.data(), check.size()), 0xe3069283u);  // the CRC-32C check value
  EXPECT_EQ(Crc32c(0, nullptr, 0), 0u);
  std::vector<uint8_t> data(100003);
  std::mt19937 rng(5);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4097}, data.size()}) {
    uint32_t c = Crc32c(0, data.data(), cut);
    EXPECT_EQ(Crc32c(c, data.data() + cut, data.size() - cut), whole) << "split at " << cut;
  }
  data[500] ^= 0x10;
  EXPECT_NE(Crc32c(0, data.data(), data.size()), whole);
}

TEST(FrameChecksumTest, EveryFlippedBitOfAChecksummedHeaderIsCaught) {
  Header h{.opcode = Opcode::kPushPull, .dtype = 1, .flags = kFlagChecksum, .sender = 3, .round = 9,
           .key = 0x1234567890ull, .request_id = 77, .payload_len = 4096, .arg = 5};
  auto bytes = Encode(h);
  auto ok = DecodeHeader(bytes.data(), bytes.size(), kNoLimit);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ExpectSameHeader(ok.value(), h);
  for (size_t bit = 0; bit < kHeaderSize * 8; ++bit) {
    if (bit == 9 * 8 + 7) continue;  // the flag itself (0x8000): receivers with BYTEPS_CHECKSUM=1 require it
    auto b = bytes;
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto d = DecodeHeader(b.data(), b.size(), kNoLimit);
    EXPECT_FALSE(d.ok()) << "bit " << bit << " flipped and the header still decoded";
    // Damage past the magic is damage (worth a new connection), even in the version byte: never
    // "another release" (InvalidArgument, which ends registration at once).
    if (bit >= 32 && !d.ok()) EXPECT_EQ(d.status().code(), StatusCode::kProtocol) << "bit " << bit << ": " << d.status().ToString();
  }
  // Without the flag the checksum field is not checked (and EncodeHeader leaves it zero).
  h.flags = 0;
  auto plain = Encode(h);
  EXPECT_EQ(plain[18], 0);
  EXPECT_EQ(plain[19], 0);
}

TEST(AuthTest, ProofsDependOnSecretRoleAndBothNonces) {
  auto a = NewAuthNonce(), b = NewAuthNonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value(), b.value());
  auto p = MakeAuthProof("s3cret", AuthRole::kConnector, a.value(), b.value());
  EXPECT_EQ(p, MakeAuthProof("s3cret", AuthRole::kConnector, a.value(), b.value()));  // deterministic
  EXPECT_TRUE(AuthProofMatches(p, p.data(), p.size()));
  EXPECT_FALSE(AuthProofMatches(p, p.data(), p.size() - 1));
  for (const auto& other : {MakeAuthProof("s3cret!", AuthRole::kConnector, a.value(), b.value()),
                            MakeAuthProof("s3cret", AuthRole::kAcceptor, a.value(), b.value()),
                            MakeAuthProof("s3cret", AuthRole::kConnector, b.value(), a.value())}) {
    EXPECT_NE(other, p);
    EXPECT_FALSE(AuthProofMatches(p, other.data(), other.size()));
  }
}

TEST(ErrorFrameTest, CodeSurvivesTheWire) {
  for (StatusCode code : {StatusCode::kInvalidArgument, StatusCode::kPrecondition, StatusCode::kUnavailable,
                          StatusCode::kDeadlineExceeded, StatusCode::kAborted, StatusCode::kProtocol,
                          StatusCode::kInternal, StatusCode::kMismatch}) {
    Header h = ErrorHeader(Opcode::kError, code, 77, 9);
    uint8_t raw[kHeaderSize];
    EncodeHeader(h, raw);
    auto back = DecodeHeader(raw, sizeof raw, kNoLimit);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->key, 77u);
    EXPECT_EQ(back->request_id, 9u);
    Status st = StatusFromErrorFrame(*back, "tensor 'w': bad");
    EXPECT_EQ(st.code(), code) << StatusCodeName(code);
    EXPECT_EQ(st.message(), "tensor 'w': bad");
  }
}

TEST(ErrorFrameTest, NonErrorCodesReadAsInternal) {
  // An error frame is an error whatever its arg says: OK, in-progress and unknown values included.
  for (uint32_t arg : {0u, static_cast<uint32_t>(StatusCode::kInProgress), 10u, 0xffffffffu}) {
    Header h;
    h.opcode = Opcode::kError;
    h.arg = arg;
    EXPECT_EQ(StatusFromErrorFrame(h, "x").code(), StatusCode::kInternal) << arg;
  }
}

TEST(KeyLayoutTest, RoundTripsAndOrder) {
  EXPECT_EQ(MakeKey(0, 0), 0u);
  EXPECT_EQ(MakeKey(1, 0), uint64_t{1} << 16);
  EXPECT_EQ(MakeKey(5, 3), (uint64_t{5} << 16) + 3);
  EXPECT_EQ(DeclaredKeyOf(MakeKey(65535, 65535)), 65535u);
  EXPECT_EQ(PartitionOf(MakeKey(65535, 65535)), 65535u);
  EXPECT_LT(MakeKey(1, 65535), MakeKey(2, 0));  // a tensor's partitions sort before the next tensor's
}

TEST(KeyLayoutTest, PlaceKeySpreadsOneTensorEvenlyAndManyTensorsToo) {
  // The 64 partitions of one tensor: exactly 16 on each of 4 places, in turn.
  int count[4] = {0, 0, 0, 0};
  const size_t first = PlaceKey(MakeKey(7, 0), 4);
  for (uint32_t i = 0; i < 64; ++i) {
    const size_t at = PlaceKey(MakeKey(7, i), 4);
    EXPECT_EQ(at, (first + i) % 4) << i;
    ++count[at];
  }
  for (int c : count) EXPECT_EQ(c, 16);
  // The first partitions of 64 tensors: every place gets some (a hash of the low bits alone would
  // put them all on one).
  int first_parts[4] = {0, 0, 0, 0};
  for (uint32_t t = 0; t < 64; ++t) ++first_parts[PlaceKey(MakeKey(t, 0), 4)];
  for (int c : first_parts) EXPECT_GE(c, 8);
  EXPECT_EQ(PlaceKey(MakeKey(3, 2), 1), 0u);
}

}  // namespace
}  // namespace byteps::protocol
