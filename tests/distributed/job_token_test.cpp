// The job token (distributed/net/job_token.h): reading it (the file's permission check), its HMAC
// proofs, DirectMesh's handshake refusing a peer with another token, and a shared-memory segment whose
// tag does not prove the token being refused. The TCPStore's side is in tcp_store_hostile_test.cpp.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "distributed/gloo/direct_mesh.h"
#include "distributed/net/job_token.h"
#include "distributed/shm/segment.h"
#include "distributed/store/file_store.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::thrown_by;
using dist::JobToken;
using std::chrono::milliseconds;

namespace {

const JobToken kToken("0123456789abcdef0123456789abcdef", "test");
const JobToken kOtherToken("fedcba9876543210fedcba9876543210", "test");

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& value) : name(n) { ::setenv(n.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

std::string write_file(const std::string& path, const std::string& text, mode_t mode) {
  { std::ofstream(path) << text; }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

}  // namespace

TEST_CASE("JobToken: generate gives 64 hex digits, fresh each time; short tokens are refused") {
  const std::string a = JobToken::generate(), b = JobToken::generate();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
  CHECK(thrown_by([] { JobToken("short", "LOCKSTEP_JOB_TOKEN"); }) ==
        "job token: LOCKSTEP_JOB_TOKEN has 5 characters; a job token needs at least 16 (unset it and the launcher "
        "makes one)");
  CHECK_FALSE(JobToken().enabled());
}

TEST_CASE("JobToken: proofs are HMAC-SHA256 and verify only with the same token, context and nonces") {
  // The message is the context, a NUL, then the two byte strings; the expected value is Python's
  // hmac.new(key, b"ctx\x00" + bytes([1, 2, 3, 4, 5]), hashlib.sha256).hexdigest().
  const std::vector<uint8_t> a = {1, 2, 3}, b = {4, 5};
  const JobToken::Mac m = kToken.prove("ctx", a, b);
  std::string hex;
  for (uint8_t x : m) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", x);
    hex += buf;
  }
  CHECK(hex == "0aee0864c4391a4dbdf1069224dcbbe943038b50e3e4dac0900fd1e8e8b879ab");
  CHECK(kToken.verify("ctx", a, b, m));
  CHECK_FALSE(kOtherToken.verify("ctx", a, b, m));
  CHECK_FALSE(kToken.verify("ctx2", a, b, m));
  CHECK_FALSE(kToken.verify("ctx", b, a, m));
  JobToken::Mac flipped = m;
  flipped[31] ^= 1;
  CHECK_FALSE(kToken.verify("ctx", a, b, flipped));
  CHECK_FALSE(kToken.verify("ctx", a, b, std::span<const uint8_t>(m.data(), 31)));
  CHECK_FALSE(JobToken().verify("ctx", a, b, m));
}

TEST_CASE("JobToken: the token file must be readable by its owner alone") {
  testing::TempDir dir;
  const std::string good = write_file(dir.path + "/token", "0123456789abcdef0123456789abcdef\n", 0600);
  const std::string open = write_file(dir.path + "/open", "0123456789abcdef0123456789abcdef\n", 0644);
  const std::string group = write_file(dir.path + "/group", "0123456789abcdef0123456789abcdef\n", 0640);
  // The trailing newline is dropped: the file's token proves what LOCKSTEP_JOB_TOKEN's does.
  const std::vector<uint8_t> n = {7};
  CHECK(JobToken::read_file(good).verify("c", n, n, kToken.prove("c", n, n)));
  CHECK(thrown_by([&] { JobToken::read_file(open); }) ==
        "job token: refused " + open + ": it has mode 0644, so its group or other users may read it; run chmod 600 " +
            open);
  CHECK(thrown_by([&] { JobToken::read_file(group); }) ==
        "job token: refused " + group + ": it has mode 0640, so its group or other users may read it; run chmod 600 " +
            group);
  CHECK(thrown_by([&] { JobToken::read_file(dir.path + "/missing"); }).starts_with("job token: cannot open"));
  {
    ScopedEnv file(JobToken::kFileEnvVar, open);
    CHECK(thrown_by([] { JobToken::from_env(); }).find("it has mode 0644") != std::string::npos);
  }
  {
    ScopedEnv file(JobToken::kFileEnvVar, good);
    CHECK(JobToken::from_env().enabled());
    CHECK(JobToken::from_env().source() == "LOCKSTEP_JOB_TOKEN_FILE=" + good);
    ScopedEnv token(JobToken::kEnvVar, "0123456789abcdef0123456789abcdef");
    CHECK(thrown_by([] { JobToken::from_env(); }) ==
          "job token: both LOCKSTEP_JOB_TOKEN and LOCKSTEP_JOB_TOKEN_FILE=" + good + " are set; set one of them");
  }
  CHECK_FALSE(JobToken::from_env().enabled());  // neither set: no token, nothing checked
}

TEST_CASE("DirectMesh: ranks with one token connect; a rank with another token is refused at once") {
  testing::TempDir dir;
  auto run = [&](const std::string& store_path, const JobToken& token0, const JobToken& token1,
                 milliseconds timeout, std::string errors[2], int32_t got[2]) {
    auto rank_fn = [&](int rank) {
      errors[rank] = thrown_by([&] {
        dist::FileStore store(store_path, -1, milliseconds(20000));
        dist::DirectMesh mesh(store, rank, 2, "127.0.0.1", timeout, rank == 0 ? token0 : token1);
        const int32_t mine = 10 + rank;
        mesh.exchange(&mine, &got[rank], sizeof(mine), /*seq=*/1);
      });
    };
    std::thread rank0(rank_fn, 0), rank1(rank_fn, 1);
    rank0.join();
    rank1.join();
  };
  std::string errors[2];
  int32_t got[2] = {-1, -1};
  run(dir.path + "/same", kToken, kToken, milliseconds(20000), errors, got);
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(got[0] == 11);
  CHECK(got[1] == 10);

  // Rank 1 (the connector) holds another token: rank 0 refuses its hello and closes; rank 1 fails at
  // once, rank 0 at its timeout, naming the refused connection.
  run(dir.path + "/other", kToken, kOtherToken, milliseconds(3000), errors, got);
  CHECK(errors[1].find("DirectMesh: rank 0 at 127.0.0.1:") == 0);
  CHECK(errors[1].find("refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)") != std::string::npos);
  CHECK(errors[0].find("DirectMesh: rank 0 timed out") == 0);
  CHECK(errors[0].find("waiting for rank(s) 1 to connect (1 connection from 127.0.0.1:") != std::string::npos);
  CHECK(errors[0].find("did not prove the job token)") != std::string::npos);
}

TEST_CASE("ShmSegment: a segment whose tag does not prove the token is refused") {
  const uint64_t nonce[2] = {0x1234, 0x5678};
  const std::string name = "/lockstep-test-token-" + std::to_string(::getpid());
  const size_t bytes = 8192;
  dist::shm::ShmSegment::unlink(name);
  dist::shm::ShmSegment made = dist::shm::ShmSegment::create(name, bytes, 2, nonce, kToken);
  CHECK(thrown_by([&] { dist::shm::ShmSegment::attach(name, bytes, 2, nonce, kOtherToken); }) ==
        "shared memory: refused " + name + ": its tag does not prove this job's token (made by a process without it, "
        "or by a rank with a different LOCKSTEP_JOB_TOKEN)");
  CHECK(thrown_by([&] { dist::shm::ShmSegment::attach(name, bytes, 2, nonce, kToken); }) == "");
  dist::shm::ShmSegment::unlink(name);
  // Made without the token (by a process that found the name): refused by a rank that holds it.
  dist::shm::ShmSegment forged = dist::shm::ShmSegment::create(name, bytes, 2, nonce);
  CHECK(thrown_by([&] { dist::shm::ShmSegment::attach(name, bytes, 2, nonce, kToken); }).find("its tag does not prove") !=
        std::string::npos);
  dist::shm::ShmSegment::unlink(name);
}
