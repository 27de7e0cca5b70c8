/* tool.h — what attnc and attnc-opt share: reading the input (whole, or split
 * into independent chunks for tests) and writing the output atomically. */
#ifndef ATTNC_TOOL_H
#define ATTNC_TOOL_H

#include "support/support.h"

/* Reads path into *whole; on failure reports and returns false. */
bool tool_read_input(Arena *a, Diag *d, const char *path, Source *whole);

/* -split-input-file: chunks separated by a line "# -----" or "// -----".
 * Each chunk keeps its line numbers within the whole file. */
int tool_split(Arena *a, const Source *whole, bool split, Source **chunks);

/* Writes the output (stdout for NULL or "-"); reports and returns false on failure. */
bool tool_write_output(Diag *d, const char *path, const char *text, size_t len);

/* "-name=value": the value if arg starts with "-name=", else NULL. */
const char *tool_flag_value(const char *arg, const char *name);

#endif
