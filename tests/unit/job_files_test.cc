// The per-worker settings records that `byteps info` reads (src/worker/job_files.h): written,
// read back by the same job only, replaced, removed, and a dead writer told apart.
#include "worker/job_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace byteps::worker {
namespace {

namespace fs = std::filesystem;

class JobFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("byteps-job-files-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const char* old = getenv("TMPDIR");
    if (old) old_tmpdir_ = old;
    setenv("TMPDIR", dir_.c_str(), 1);
    job_.root_uri = "127.0.0.1";
    job_.root_port = 4321;
  }
  void TearDown() override {
    if (old_tmpdir_.empty()) unsetenv("TMPDIR");
    else setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    fs::remove_all(dir_);
  }
  SettingsRecord Record(int rank, size_t credit) {
    SettingsRecord r;
    r.rank = rank;
    r.partition_bytes = 262144;
    r.credit_bytes = credit;
    r.report = "partition 262144 bytes: why\nwith a newline";
    return r;
  }
  fs::path dir_;
  std::string old_tmpdir_;
  config::Config job_;
};

TEST_F(JobFilesTest, WrittenReadBackReplacedAndRemoved) {
  WriteSettingsRecord(job_, Record(3, 8 << 20));
  WriteSettingsRecord(job_, Record(1, 4 << 20));
  auto got = ReadSettingsRecords(job_);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rank, 1);  // by rank
  EXPECT_EQ(got[1].rank, 3);
  EXPECT_EQ(got[1].partition_bytes, 262144u);
  EXPECT_EQ(got[1].credit_bytes, size_t{8} << 20);
  EXPECT_EQ(got[1].report, "partition 262144 bytes: why with a newline");  // one line per field
  EXPECT_EQ(got[1].pid, getpid());
  EXPECT_TRUE(got[1].running);
  EXPECT_FALSE(got[1].written.empty());
  EXPECT_EQ(fs::path(got[1].path).parent_path(), dir_);

  WriteSettingsRecord(job_, Record(3, 16 << 20));  // the settled value replaces the start-up one
  got = ReadSettingsRecords(job_);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].credit_bytes, size_t{16} << 20);

  RemoveSettingsRecord(job_, 3);
  got = ReadSettingsRecords(job_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 1);
  EXPECT_NE(SettingsRecordPattern(job_).find("<rank>"), std::string::npos);
}

TEST_F(JobFilesTest, OnlyThisJobsRecordsAndOnlyWholeOnes) {
  config::Config other = job_;
  other.root_port = 4322;
  ASSERT_NE(JobToken(other), JobToken(job_));
  WriteSettingsRecord(other, Record(0, 1));
  WriteSettingsRecord(job_, Record(0, 2));
  std::ofstream(SettingsRecordPath(job_, 7)) << "rank=seven\npid=1\n";  // damaged: skipped
  auto got = ReadSettingsRecords(job_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].credit_bytes, 2u);
}

TEST_F(JobFilesTest, ARecordLeftByADeadProcessSaysSo) {
  // A pid above the kernel's pid_max belongs to no process.
  long pid_max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  std::ofstream(SettingsRecordPath(job_, 5)) << "rank=5\npid=" << pid_max + 1
                                             << "\nwritten=then\npartition_bytes=1\ncredit_bytes=3\nreport=r\n";
  auto got = ReadSettingsRecords(job_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pid, pid_max + 1);
  EXPECT_EQ(got[0].credit_bytes, 3u);
  EXPECT_FALSE(got[0].running);
}

}  // namespace
}  // namespace byteps::worker
