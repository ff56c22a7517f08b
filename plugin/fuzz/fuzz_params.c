/* Fuzzes the plugin's environment parser (lg_params_load, src/runtime/params.c) with any set of
 * LINKGUARD_* / LGTCP_* values, through a fuzzed getenv table.
 * Input: records, each one byte `i` then a 2-byte little-endian length L:
 *   i < 0x80: setting i % count gets the next L bytes (up to a NUL) as its value;
 *   i >= 0x80: setting i % count gets L copies of the next byte (long strings in few bytes).
 * A later record for the same setting wins. fuzz_params.options raises -max_len so that
 * values near and past the 4 KiB string buffer are reached.
 * Checks: every numeric setting is the value given when it parses and is in range, else the
 * default; every string is a copy of the value given or, when it did not fit, the default;
 * the bad count is exactly the number of values replaced by their default; loading twice
 * gives the same result. ASan catches any write past the string buffer. */
#include <string.h>

#include "fuzz.h"
#include "runtime/params.h"

#define MAX_SETTINGS 64
static char *env_val[MAX_SETTINGS]; /* by index in lg_param_table; NULL: unset */

static const char *fuzz_getenv(const char *name)
{
    for (int i = 0; i < lg_param_count; i++)
        if (!strcmp(lg_param_table[i].env, name))
            return env_val[i];
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    FUZZ_ASSERT(lg_param_count <= MAX_SETTINGS);
    return 0;
}

static int parse(const struct lg_param_info *pi, const char *s, int64_t *v)
{
    int rc = pi->kind == LG_PK_INT    ? lg_param_parse_int(s, v)
             : pi->kind == LG_PK_SIZE ? lg_param_parse_size(s, v)
                                      : lg_param_parse_bool(s, v);
    return rc == 0 && *v >= pi->lo && *v <= pi->hi ? 0 : -1;
}

static int64_t field_int(const struct lg_params *p, const struct lg_param_info *pi)
{
    int64_t v;
    memcpy(&v, (const char *)p + pi->offset, sizeof(v));
    return v;
}

static const char *field_str(const struct lg_params *p, const struct lg_param_info *pi)
{
    const char *v;
    memcpy(&v, (const char *)p + pi->offset, sizeof(v));
    return v;
}

static void check(const struct lg_params *p, int bad)
{
    int expect_bad = 0;
    size_t used = 0;
    for (int i = 0; i < lg_param_count; i++) {
        const struct lg_param_info *pi = &lg_param_table[i];
        const char *s = env_val[i];
        if (pi->kind == LG_PK_STR) {
            /* The value given, copied (getenv's strings may change), or the default in place:
             * then it was too long for the room the string settings share. */
            const char *got = field_str(p, pi);
            if (s && got != pi->def) {
                FUZZ_ASSERT(got != s && !strcmp(got, s));
                used += strlen(s) + 1;
            } else {
                FUZZ_ASSERT(got == pi->def);
                expect_bad += s != NULL;
            }
            continue;
        }
        int64_t want, def;
        FUZZ_ASSERT(parse(pi, pi->def, &def) == 0);
        if (s && parse(pi, s, &want) != 0) {
            want = def;
            expect_bad++;
        } else if (!s) {
            want = def;
        }
        FUZZ_ASSERT(field_int(p, pi) == want);
    }
    FUZZ_ASSERT(used <= 4096); /* the WARN's "all string settings together may use" */
    FUZZ_ASSERT(bad == expect_bad);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memset(env_val, 0, sizeof(env_val));
    size_t pos = 0;
    while (pos + 3 <= size) {
        uint8_t sel = data[pos];
        size_t len = (size_t)data[pos + 1] | (size_t)data[pos + 2] << 8;
        pos += 3;
        int i = (sel & 0x7f) % lg_param_count;
        char *v;
        if (sel & 0x80) {
            uint8_t c = pos < size ? data[pos++] : 'x';
            v = malloc(len + 1);
            memset(v, c ? c : 'x', len);
            v[len] = 0;
        } else {
            if (len > size - pos)
                len = size - pos;
            v = strndup((const char *)data + pos, len);
            pos += len;
        }
        free(env_val[i]);
        env_val[i] = v;
    }
    struct lg_params p, again;
    int bad = lg_params_load(&p, fuzz_getenv);
    check(&p, bad);
    FUZZ_ASSERT(lg_params_load(&again, fuzz_getenv) == bad);
    check(&again, bad);
    for (int i = 0; i < MAX_SETTINGS; i++)
        free(env_val[i]);
    return 0;
}
