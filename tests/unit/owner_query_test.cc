// Asking an owner thread with a deadline (common/owner_query.h): its answer, its refusal, its
// silence past the deadline, and a late answer after the caller gave up.
#include "common/owner_query.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace byteps {
namespace {

TEST(OwnerQuery, ReturnsTheOwnersAnswer) {
  owner_query::Reply<std::string> held;
  std::thread owner;
  auto answer = owner_query::AskOwner<std::string>(
      5,
      [&](owner_query::Reply<std::string> r) {
        owner = std::thread([r] { r->set_value("open rounds"); });
        return Status::Ok();
      },
      [] { return Unavailable("owner did not answer"); });
  owner.join();
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer.value(), "open rounds");
}

TEST(OwnerQuery, APostThatFailsReturnsItsError) {
  auto answer = owner_query::AskOwner<int>(
      5, [](owner_query::Reply<int>) { return Unavailable("the owner thread is not running"); },
      [] { return Unavailable("owner did not answer"); });
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().message(), "the owner thread is not running");
}

TEST(OwnerQuery, SilencePastTheDeadlineIsTheTimeoutErrorAndALateAnswerIsHarmless) {
  owner_query::Reply<int> kept;
  auto answer = owner_query::AskOwner<int>(
      0.01,
      [&](owner_query::Reply<int> r) {
        kept = std::move(r);  // the owner holds it and answers only after the caller gave up
        return Status::Ok();
      },
      [] { return Unavailable("owner did not answer within 0.01 s"); });
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(answer.status().message(), "owner did not answer within 0.01 s");
  kept->set_value(7);  // no one waits: no throw, no crash
}

}  // namespace
}  // namespace byteps
