/* A logger for tests that provoke WARNs: keeps the last one in last_warn (for the test to check
 * its text) and prints it marked as expected, so the test log does not read as a failure. */
#ifndef LG_TEST_WARN_H
#define LG_TEST_WARN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl_net_abi.h"

static char last_warn[2048];

static __attribute__((unused)) void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
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

/* A logger for tests that mean no WARN: prints WARNs (and INFO lines with LG_TEST_VERBOSE set,
 * TRACE too with LG_TEST_VERBOSE=2) on stderr as NCCL would, each with its monotonic time (s)
 * so that a failure's events can be read in order. */
static __attribute__((unused)) void test_print_logger(ncclDebugLogLevel level, unsigned long flags,
                                                      const char *file, int line,
                                                      const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    const char *verbose = getenv("LG_TEST_VERBOSE");
    if (level != NCCL_LOG_WARN && !(level == NCCL_LOG_INFO && verbose) &&
        !(level == NCCL_LOG_TRACE && verbose && atoi(verbose) >= 2))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%ld.%06ld %s ", (long)ts.tv_sec, ts.tv_nsec / 1000,
            level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

#endif
