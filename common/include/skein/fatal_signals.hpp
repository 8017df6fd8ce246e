// What a daemon prints when it dies of a fatal signal: the signal and a backtrace, on stderr
// (the gateway's and the mount's stderr go to their log files).
#pragma once

namespace skein {

// Installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (the last also ends an
// uncaught exception, after the C++ runtime has printed it) that write "<program>: fatal signal
// <name>" and a backtrace to stderr, then let the signal end the process as it would have, core
// dump included. `program` must outlive the process (a string literal).
void report_fatal_signals(const char* program);

}  // namespace skein
