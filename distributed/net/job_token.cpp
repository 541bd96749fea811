// JobToken: reading the token from the environment or a file, and the HMAC proofs (OpenSSL libcrypto).
#include "distributed/net/job_token.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/env.h"

namespace lockstep::dist {

namespace {

void random_bytes(uint8_t* out, size_t n) {
  LOCKSTEP_CHECK(RAND_bytes(out, static_cast<int>(n)) == 1, "job token: RAND_bytes failed (the OS random generator "
                 "is not available)");
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

JobToken::JobToken(std::string secret, const std::string& source) : secret_(std::move(secret)), source_(source) {
  LOCKSTEP_CHECK(secret_.size() >= kMinChars, "job token: ", source, " has ", secret_.size(),
                 " characters; a job token needs at least ", kMinChars, " (unset it and the launcher makes one)");
}

JobToken JobToken::from_env() {
  auto token = env_string(kEnvVar);
  auto file = env_string(kFileEnvVar);
  LOCKSTEP_CHECK(!(token && file), "job token: both ", kEnvVar, " and ", kFileEnvVar, "=", *file,
                 " are set; set one of them");
  if (token) return JobToken(*token, kEnvVar);
  if (file) return read_file(*file);
  return {};
}

JobToken JobToken::read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  LOCKSTEP_CHECK(fd >= 0, "job token: cannot open ", kFileEnvVar, "=", path, ": ", std::strerror(errno));
  struct stat st {};
  std::string secret;
  try {
    LOCKSTEP_CHECK(::fstat(fd, &st) == 0, "job token: cannot stat ", path, ": ", std::strerror(errno));
    LOCKSTEP_CHECK(S_ISREG(st.st_mode), "job token: ", path, " is not a regular file");
    // Checked on the open file, so the file cannot be swapped between the check and the read.
    LOCKSTEP_CHECK((st.st_mode & 077) == 0, "job token: refused ", path, ": it has mode ", octal_mode(st.st_mode),
                   ", so its group or other users may read it; run chmod 600 ", path);
    LOCKSTEP_CHECK(st.st_uid == ::geteuid(), "job token: refused ", path, ": it belongs to uid ", st.st_uid,
                   ", not to this process's user (uid ", ::geteuid(), ")");
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      LOCKSTEP_CHECK(n >= 0, "job token: cannot read ", path, ": ", std::strerror(errno));
      if (n == 0) break;
      secret.append(buf, static_cast<size_t>(n));
      LOCKSTEP_CHECK(secret.size() <= 65536, "job token: ", path, " is over 64 KiB; a token is one short line");
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();  // `echo TOKEN > file` adds one
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  return JobToken(std::move(secret), std::string(kFileEnvVar) + "=" + path);
}

std::string JobToken::generate() {
  uint8_t bytes[32];
  random_bytes(bytes, sizeof(bytes));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

JobToken::Nonce JobToken::nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

JobToken::Mac JobToken::prove(std::string_view context, std::span<const uint8_t> a, std::span<const uint8_t> b) const {
  LOCKSTEP_CHECK(enabled(), "job token: prove() without a token");
  // HMAC() takes one buffer: the context (with its terminating NUL, so no context is a prefix of
  // another's bytes) and the two byte strings, each of a fixed size at every call site.
  std::string message(context);
  message.push_back('\0');
  message.append(reinterpret_cast<const char*>(a.data()), a.size());
  message.append(reinterpret_cast<const char*>(b.data()), b.size());
  Mac mac{};
  unsigned int len = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
                                 reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(), &len);
  LOCKSTEP_CHECK(ok != nullptr && len == kMacBytes, "job token: HMAC-SHA256 failed");
  return mac;
}

bool JobToken::verify(std::string_view context, std::span<const uint8_t> a, std::span<const uint8_t> b,
                      std::span<const uint8_t> mac) const {
  if (!enabled() || mac.size() != kMacBytes) return false;
  const Mac expected = prove(context, a, b);
  return CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) == 0;
}

}  // namespace lockstep::dist
