// The version of skein every program reports (--version, the Admin service's health reply).
#pragma once

namespace skein {

// The project's version as CMake knows it (project(skein VERSION ...)).
const char* version();

}  // namespace skein
