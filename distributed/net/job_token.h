// JobToken: the secret that the processes of one job share, so that only they can join its TCPStore,
// its DirectMesh connections and its shared-memory segment. The launcher gives every rank a fresh one
// (32 bytes from the OS's random generator, hex) in LOCKSTEP_JOB_TOKEN unless one is set already; under
// srun or mpirun it comes through LOCKSTEP_JOB_TOKEN or LOCKSTEP_JOB_TOKEN_FILE (a file only its owner
// may read). No token set: nothing is checked, as in PyTorch (programs started by hand with MASTER_ADDR
// or tcp://).
//
// The token never crosses the wire: a peer proves it by answering a fresh random nonce with
// HMAC-SHA256(token, context || nonces), checked in constant time. `context` names the protocol and
// the role ("lockstep tcpstore v1 client"), so a proof made for one purpose is no proof for another,
// and a fresh nonce per connection makes a captured exchange useless to replay. OpenSSL's libcrypto
// does the cryptography.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/check.h"

namespace lockstep::dist {

class JobToken {
 public:
  static constexpr const char* kEnvVar = "LOCKSTEP_JOB_TOKEN";
  static constexpr const char* kFileEnvVar = "LOCKSTEP_JOB_TOKEN_FILE";
  static constexpr size_t kMinChars = 16;  // a token set by hand shorter than this is refused as guessable
  static constexpr size_t kNonceBytes = 32;
  static constexpr size_t kMacBytes = 32;
  using Nonce = std::array<uint8_t, kNonceBytes>;
  using Mac = std::array<uint8_t, kMacBytes>;

  // No token: enabled() is false and nothing is checked.
  JobToken() = default;
  // Throws naming `source` unless `secret` has at least kMinChars characters.
  JobToken(std::string secret, const std::string& source);

  // What the environment says: LOCKSTEP_JOB_TOKEN, else the file named by LOCKSTEP_JOB_TOKEN_FILE
  // (read_file), else no token. Both set is an error (which one is meant?).
  static JobToken from_env();
  // The token in `path`, one trailing newline dropped. Refuses a file that its group or others may
  // read or write ("... has mode 0644; run chmod 600 PATH"), or that is not a regular file.
  static JobToken read_file(const std::string& path);
  // A fresh token for a launcher to hand out: 32 random bytes (RAND_bytes), 64 hex digits.
  static std::string generate();
  // kNonceBytes random bytes for one handshake.
  static Nonce nonce();

  bool enabled() const { return !secret_.empty(); }
  // Where it came from, for messages: "LOCKSTEP_JOB_TOKEN", the file's path; "" without a token.
  const std::string& source() const { return source_; }

  // HMAC-SHA256(token, context || NUL || a || b). Requires enabled().
  Mac prove(std::string_view context, std::span<const uint8_t> a, std::span<const uint8_t> b) const;
  // Whether `mac` equals prove(context, a, b); constant time in the mac's bytes (CRYPTO_memcmp).
  // False for a mac of the wrong size, or when no token is set.
  bool verify(std::string_view context, std::span<const uint8_t> a, std::span<const uint8_t> b,
              std::span<const uint8_t> mac) const;

 private:
  std::string secret_;
  std::string source_;
};

// Thrown when a peer refuses this process's token (or does not prove its own): never retried, since
// waiting does not mend a wrong token.
class JobTokenError : public Error {
 public:
  using Error::Error;
};

}  // namespace lockstep::dist
