/* Logging through NCCL's logger; without one (unit tests, before init) WARNs go to stderr. */
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>

static ncclDebugLogger_t lg_logger;

void lg_log_set(ncclDebugLogger_t logger)
{
    if (logger)
        __atomic_store_n(&lg_logger, logger, __ATOMIC_RELEASE);
}

void lg_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ncclDebugLogger_t logger = __atomic_load_n(&lg_logger, __ATOMIC_ACQUIRE);
    if (logger)
        logger(level, flags, file, line, "NET/linkguard: %s", msg);
    else if (level == NCCL_LOG_WARN)
        fprintf(stderr, "linkguard WARN %s\n", msg);
}
