// libFuzzer target for the TCPStore request parser (parse_request in distributed/store/tcp_store_protocol.h):
// any bytes, read as one connection's stream, must decode without crashing, reading out of bounds or
// allocating more than the frame describes, and decoded requests must re-encode to the same bytes.
// Build and run with tools/fuzz/fuzz_store.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/tcp_store_parse_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lockstep::dist::testing::check_parse(data, size);
  return 0;
}
