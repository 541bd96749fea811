// Sanitizer settings compiled into every test binary (through :doctest_main). Inert in normal builds:
// the sanitizer runtimes look these functions up only when a binary is built with --config=tsan.
//
// ThreadSanitizer suppressions: only for races TSan cannot see through, in code Debian does not build
// with TSan. Every entry says why it is not a lockstep bug.
extern "C" __attribute__((visibility("default"), used)) const char* __tsan_default_suppressions() {
  return
      // exception_ptr (Work's stored error) is reference-counted inside libsupc++, and
      // std::runtime_error's message is a reference-counted string inside libstdc++: their atomics are
      // not instrumented, so the thread that drops the last reference appears to race with the thread
      // that read the message before releasing its own.
      "race:std::__exception_ptr::exception_ptr::_M_release\n";
}
