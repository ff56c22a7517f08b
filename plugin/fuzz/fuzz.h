/* Shared by the libFuzzer harnesses (fuzz_*.c): FUZZ_ASSERT, which aborts so that libFuzzer
 * keeps the input as a crash, and a silent logger (every rejected input WARNs, which would
 * only slow the fuzzer down). */
#ifndef LG_FUZZ_H
#define LG_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/log.h"

#define FUZZ_ASSERT(cond)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz assertion failed: %s:%d: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                             \
            abort();                                                                    \
        }                                                                               \
    } while (0)

static void fuzz_silent_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                               int line, const char *fmt, ...)
{
    (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

static inline void fuzz_quiet(void)
{
    lg_log_set(fuzz_silent_logger);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
