/* A logger for tests that provoke WARNs: keeps the last one in last_warn (for the test to check
 * its text) and prints it marked as expected, so the test log does not read as a failure. */
#ifndef LG_TEST_WARN_H
#define LG_TEST_WARN_H

#include <stdarg.h>
#include <stdio.h>

#include "nccl_net_abi.h"

static char last_warn[2048];

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    if (level != NCCL_LOG_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  [expected warn] %s\n", last_warn);
}

#endif
