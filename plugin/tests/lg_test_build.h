/* Where the plugin libraries a test loads are: next to its binary (build/tests/..), or in
 * LG_TEST_BUILD_DIR. */
#ifndef LG_TEST_BUILD_H
#define LG_TEST_BUILD_H

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char build_dir[PATH_MAX];

static void find_build_dir(void)
{
    const char *env = getenv("LG_TEST_BUILD_DIR");
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (env) {
        snprintf(build_dir, sizeof(build_dir), "%s", env);
        return;
    }
    exe[n > 0 ? n : 0] = 0;
    snprintf(build_dir, sizeof(build_dir), "%s", dirname(dirname(exe))); /* build/tests/x */
}

/* build_dir/rel, or "" if it does not fit. */
static void lib_path(char *out, size_t len, const char *rel)
{
    if (snprintf(out, len, "%s/%s", build_dir, rel) >= (int)len)
        out[0] = 0;
}

#endif
