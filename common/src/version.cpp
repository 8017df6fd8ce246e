// The version string; SKEIN_VERSION comes from CMake (common/CMakeLists.txt).
#include "skein/version.hpp"

#ifndef SKEIN_VERSION
#define SKEIN_VERSION "unknown"
#endif

namespace skein {

const char* version() { return SKEIN_VERSION; }

}  // namespace skein
