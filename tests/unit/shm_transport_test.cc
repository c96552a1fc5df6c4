// The shared-memory backend's own pieces (the conformance suite in transport_test.cc runs every
// Transport test over it too): rings that wrap, records that are damaged, segments a crashed
// process left behind, and a peer killed with a frame half read.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/tsan.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_transport.h"
#include "transport_test_sink.h"

namespace byteps::transport::shm {
namespace {

using protocol::Header;

void PutRecord(uint8_t* p, uint32_t len, RecordKind kind, uint32_t iovecs = 0) {
  std::memset(p, 0, len);
  std::memcpy(p, &len, 4);
  uint32_t k = static_cast<uint32_t>(kind);
  std::memcpy(p + 4, &k, 4);
  std::memcpy(p + 12 + protocol::kHeaderSize, &iovecs, 4);
}

TEST(ShmRing, RecordsWrapWithAPadAndArriveInOrder) {
  RingControl c;
  std::vector<uint8_t> mem(1024);
  Ring tx(&c, mem.data(), mem.size()), rx(&c, mem.data(), mem.size());
  int sent = 0, got = 0;
  for (int round = 0; round < 50; ++round) {
    const uint32_t len = static_cast<uint32_t>(Ring::Align(kRecordHead + (round * 37) % 200));
    uint8_t* p = tx.Reserve(len);
    ASSERT_NE(p, nullptr) << round;
    PutRecord(p, len, RecordKind::kInline);
    std::memcpy(p + 8 + 8, &sent, sizeof sent);  // inside the header bytes: the record's number
    ++sent;
    tx.Publish();
    size_t avail = 0;
    auto next = rx.Next(&avail);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    ASSERT_NE(*next, nullptr);
    auto rec = ParseRecord(*next, avail);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    int n = -1;
    std::memcpy(&n, rec->header + 8, sizeof n);
    EXPECT_EQ(n, got++);
    EXPECT_EQ(rec->length, len);
    rx.Consume(rec->length);
  }
  EXPECT_GT(c.head.load(), mem.size());  // it did wrap
  EXPECT_TRUE(rx.Empty());
}

TEST(ShmRing, AFullRingRefusesUntilTheConsumerFreesSpace) {
  RingControl c;
  std::vector<uint8_t> mem(512);
  Ring tx(&c, mem.data(), mem.size()), rx(&c, mem.data(), mem.size());
  const size_t len = Ring::Align(kRecordHead + 100);
  int published = 0;
  while (uint8_t* p = tx.Reserve(len)) {
    PutRecord(p, static_cast<uint32_t>(len), RecordKind::kInline);
    tx.Publish();
    ++published;
  }
  EXPECT_GT(published, 0);
  EXPECT_EQ(tx.Reserve(len), nullptr);
  size_t avail = 0;
  auto next = rx.Next(&avail);
  ASSERT_TRUE(next.ok() && *next);
  rx.Consume(ParseRecord(*next, avail)->length);
  EXPECT_NE(tx.Reserve(len), nullptr);  // room again
}

TEST(ShmRing, DamagedRecordsAreProtocolErrors) {
  std::vector<uint8_t> mem(512);
  const struct {
    uint32_t len;
    uint32_t kind;
    uint32_t iovecs;
    size_t avail;
    const char* why;
  } cases[] = {
      {0, 1, 0, 512, "claims 0 bytes"},
      {12, 1, 0, 512, "claims 12 bytes"},              // not 8-aligned
      {1024, 1, 0, 512, "claims 1024 bytes"},          // past what is readable
      {static_cast<uint32_t>(kRecordHead + 8), 9, 0, 512, "unknown kind 9"},
      {16, 1, 0, 512, "no room for its header"},
      {static_cast<uint32_t>(kRecordHead + 16), 2, 2, 512, "lists 2 iovecs"},
      {static_cast<uint32_t>(kRecordHead + 16), 2, 1000, 512, "lists 1000 iovecs"},
  };
  for (const auto& k : cases) {
    std::memset(mem.data(), 0, mem.size());
    std::memcpy(mem.data(), &k.len, 4);
    std::memcpy(mem.data() + 4, &k.kind, 4);
    std::memcpy(mem.data() + 12 + protocol::kHeaderSize, &k.iovecs, 4);
    auto rec = ParseRecord(mem.data(), k.avail);
    ASSERT_FALSE(rec.ok()) << k.why;
    EXPECT_EQ(rec.status().code(), StatusCode::kProtocol);
    EXPECT_NE(rec.status().message().find(k.why), std::string::npos) << rec.status().message();
  }
  RingControl c;
  c.head = 5;  // not a record boundary a producer could have written
  c.tail = 3;
  Ring rx(&c, mem.data(), mem.size());
  size_t avail = 0;
  EXPECT_EQ(rx.Next(&avail).status().code(), StatusCode::kProtocol);
}

TEST(ShmSegment, LeftoversOfDeadProcessesAreRemovedAndOursKept) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // now a pid nobody has
  const std::string dead = "byteps-shmt-" + std::to_string(child) + "-1-deadbeef";
  int fd = shm_open(("/" + dead).c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto mine = Segment::Create(NewSegmentName(), 4096);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_GE(RemoveStaleSegments(), 1);
  EXPECT_NE(access(("/dev/shm/" + dead).c_str(), F_OK), 0) << "the dead process's segment is still there";
  EXPECT_EQ(access(("/dev/shm/" + (*mine)->name()).c_str(), F_OK), 0) << "ours was removed";
  (*mine)->Unlink();
  // A name that is not a connection segment, or a damaged one, is never mapped.
  EXPECT_EQ(Segment::Open("other-thing").status().code(), StatusCode::kInvalidArgument);
}


// The sending process dies (SIGKILL) right after it queued a 256 MiB frame that stays in its own
// memory: the receiver notices within the deadline, never delivers a partial frame, and nothing
// of the dead process is left in /dev/shm.

TEST(ShmTransport, APeerKilledMidFrameIsDetectedAndNothingIsLeft) {
#ifdef BYTEPS_UNDER_TSAN
  GTEST_SKIP() << "forks a multithreaded process that then starts threads, which ThreadSanitizer does not "
                  "support; the plain and ASan runs cover it";
#endif
  // Fork first, while this process has no threads of its own: a child forked from a process whose
  // threads may hold a lock (the sanitizers' allocator's, taken by a listener thread that is just
  // starting) can hang on it. The child learns the port through a pipe.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t child = fork();
  if (child == 0) {
    ::close(pipe_fds[1]);
    int port = 0;
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1 || ::read(pipe_fds[0], &port, sizeof(port)) != sizeof(port)) _exit(4);
    auto t = CreateShmTransport(TransportOptions{});
    Sink mine;
    auto c = t->Connect("127.0.0.1", port, &mine, 5.0);
    if (!c.ok()) _exit(2);
    static std::vector<uint8_t> big(256u << 20, 7);
    Header h;
    h.opcode = protocol::Opcode::kPushPull;
    h.payload_len = big.size();
    if (!(*c)->Send(h, {{big.data(), big.size()}}, [](const Status&) {}).ok()) _exit(3);
    raise(SIGKILL);
  }
  ASSERT_GT(child, 0);
  ::close(pipe_fds[0]);
  Sink sink;
  auto server = CreateShmTransport(TransportOptions{});
  auto port = server->Listen("127.0.0.1", 0, &sink);
  const int port_number = port.ok() ? *port : 0;
  ASSERT_EQ(::write(pipe_fds[1], &port_number, sizeof(port_number)), static_cast<ssize_t>(sizeof(port_number)));
  ::close(pipe_fds[1]);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child did not get to send (exit " << WEXITSTATUS(status) << ")";
  ASSERT_TRUE(sink.WaitClose(std::chrono::seconds(10))) << "the dead peer was not noticed";
  {
    std::lock_guard<std::mutex> lock(sink.mu_);
    EXPECT_EQ(sink.closes_[0].code(), StatusCode::kUnavailable) << sink.closes_[0].ToString();
    for (size_t n : sink.frames_) EXPECT_EQ(n, 256u << 20) << "a partial frame was delivered";
  }
  RemoveStaleSegments();
  const std::string prefix = "byteps-shmt-" + std::to_string(child) + "-";
  bool left = false;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) left |= std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  EXPECT_FALSE(left) << "a segment of the killed process is still in /dev/shm";
  server->Shutdown();
}

TEST(ShmTransport, APeerOnAnotherHostIsRefusedNamingTheFallback) {
  Sink sink;
  auto t = CreateShmTransport(TransportOptions{});
  auto c = t->Connect("198.18.0.7", 1234, &sink, 1.0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not on this host"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("BYTEPS_TRANSPORT=auto"), std::string::npos) << c.status().message();
  EXPECT_TRUE(IsLocalHost("127.0.0.1"));
  EXPECT_FALSE(IsLocalHost("198.18.0.7"));
}

}  // namespace
}  // namespace byteps::transport::shm
