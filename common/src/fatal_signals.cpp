// Fatal signals reported before the process dies; see fatal_signals.hpp.
#include "skein/fatal_signals.hpp"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <initializer_list>

namespace skein {
namespace {

const char* g_program = "skein";

// Only async-signal-safe calls from here on: write(2), and backtrace(3) once it has been loaded.
void write_text(const char* text) {
  size_t left = strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV  ? "SIGSEGV"
                     : sig == SIGBUS ? "SIGBUS"
                     : sig == SIGILL ? "SIGILL"
                     : sig == SIGFPE ? "SIGFPE"
                                     : "SIGABRT";
  write_text(g_program);
  write_text(": fatal signal ");
  write_text(name);
  write_text("; backtrace:\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // The handler was reset to the default on entry (SA_RESETHAND): the signal ends the process.
  ::raise(sig);
}

}  // namespace

void report_fatal_signals(const char* program) {
  g_program = program;
  // backtrace() loads libgcc's unwinder on its first call, which allocates: not in the handler.
  void* frame[1];
  (void)::backtrace(frame, 1);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) (void)::sigaction(sig, &sa, nullptr);
}

}  // namespace skein
