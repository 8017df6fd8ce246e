// Progress of a copy as skeinctl (`stage --wait`) and skein-mpi (stage-in, stage-out) show it: a
// bar on a terminal, lines otherwise, with sizes in binary units.
#pragma once

#include <string>

namespace skein {

// "512 B", "4.0 KiB", "1.2 GiB".
std::string size_text(double bytes);

// The fraction done of a copy: by bytes, else (a copy of empty files, or of nothing but
// directories) by items; 0 to 1.
double fraction_done(double bytes_done, double bytes_total, double items_done, double items_total);

// "[#########.....................]  30%": `fraction` (0 to 1) of a 30-wide bar.
std::string progress_bar(double fraction);

}  // namespace skein
