// kill -USR1's plumbing (common/report_signal.h): callbacks run on their own thread, a handler
// installed before still runs, and the last Remove puts it back.
#include "common/report_signal.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace byteps {
namespace {

std::atomic<int> g_previous_calls{0};
void Previous(int) { ++g_previous_calls; }

bool WaitFor(const std::atomic<int>& n, int want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (n.load() < want) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(ReportSignalTest, CallbacksRunOffTheHandlerAndTheHandlerBeforeIsKept) {
  struct sigaction before {};
  before.sa_handler = Previous;
  sigemptyset(&before.sa_mask);
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGUSR1, &before, &saved), 0);

  std::atomic<int> a{0}, b{0};
  const int ia = report_signal::Add([&] { ++a; });
  const int ib = report_signal::Add([&] { ++b; });
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_TRUE(WaitFor(a, 1));
  EXPECT_TRUE(WaitFor(b, 1));
  EXPECT_EQ(g_previous_calls.load(), 1) << "the handler installed before ours still runs";

  report_signal::Remove(ia);
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_TRUE(WaitFor(b, 2));
  EXPECT_EQ(a.load(), 1) << "a removed callback is not called";

  report_signal::Remove(ib);
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &Previous) << "the last Remove puts the handler back";
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ(g_previous_calls.load(), 3);
  report_signal::Remove(12345);  // unknown: ignored

  // A second life: Add after the thread stopped starts it again.
  std::atomic<int> c{0};
  const int ic = report_signal::Add([&] { ++c; });
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_TRUE(WaitFor(c, 1));
  report_signal::Remove(ic);
  sigaction(SIGUSR1, &saved, nullptr);
}

}  // namespace
}  // namespace byteps
