/* Minimal test harness for the C unit tests: CHECK records a failure and continues; each
 * binary ends with LG_TEST_DONE(), which prints a summary and sets the exit status. */
#ifndef LG_TEST_H
#define LG_TEST_H

#include <stdio.h>

static int lg_test_failures, lg_test_checks;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        lg_test_checks++;                                                              \
        if (!(cond)) {                                                                 \
            lg_test_failures++;                                                        \
            fprintf(stderr, "not ok: %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
        }                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        lg_test_checks++;                                                              \
        if (a_ != b_) {                                                                \
            lg_test_failures++;                                                        \
            fprintf(stderr, "not ok: %s:%d: %s == %s (%lld != %lld)\n", __FILE__,      \
                    __LINE__, #a, #b, a_, b_);                                         \
        }                                                                              \
    } while (0)

#define LG_TEST_DONE()                                                                 \
    do {                                                                               \
        printf("%s: %d checks, %d failed\n", __FILE__, lg_test_checks,                 \
               lg_test_failures);                                                      \
        return lg_test_failures ? 1 : 0;                                               \
    } while (0)

#endif
