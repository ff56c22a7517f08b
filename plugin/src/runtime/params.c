/* Plugin tunables: the table generated from params.def, parsing and range checks. */
#include "runtime/params.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/log.h"

struct lg_params lg_params;

const struct lg_param_info lg_param_table[] = {
#define LG_PARAM(field, env, kind, def, lo, hi, doc) \
    {#field, env, LG_PK_##kind, def, lo, hi, doc, offsetof(struct lg_params, field)},
#include "runtime/params.def"
#undef LG_PARAM
};
const int lg_param_count = (int)(sizeof(lg_param_table) / sizeof(lg_param_table[0]));

int lg_param_parse_int(const char *s, int64_t *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

int lg_param_parse_size(const char *s, int64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end || v > (unsigned long long)(INT64_MAX >> shift))
        return -1;
    *out = (int64_t)(v << shift);
    return 0;
}

int lg_param_parse_bool(const char *s, int64_t *out)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(s, no[i])) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_one(const struct lg_param_info *pi, const char *s, int64_t *v)
{
    int rc = -1;
    if (pi->kind == LG_PK_INT)
        rc = lg_param_parse_int(s, v);
    else if (pi->kind == LG_PK_SIZE)
        rc = lg_param_parse_size(s, v);
    else if (pi->kind == LG_PK_BOOL)
        rc = lg_param_parse_bool(s, v);
    if (rc == 0 && (*v < pi->lo || *v > pi->hi))
        rc = -1;
    return rc;
}

/* Values taken from the environment are copied here (getenv's strings may change under us);
 * defaults are string literals and are used in place, so a fallback needs no room. */
static char lg_param_strbuf[4096];

int lg_params_load(struct lg_params *p, lg_getenv_fn get)
{
    int bad = 0;
    size_t used = 0;
    for (int i = 0; i < lg_param_count; i++) {
        const struct lg_param_info *pi = &lg_param_table[i];
        const char *s = get ? get(pi->env) : NULL;
        char *slot = (char *)p + pi->offset;
        if (pi->kind == LG_PK_STR) {
            const char *v = pi->def;
            size_t n = s ? strlen(s) + 1 : 0;
            if (s && n > sizeof(lg_param_strbuf) - used) {
                LG_WARN("%s is too long (%zu bytes; all string settings together may use %zu), "
                        "using the default \"%s\"", pi->env, n - 1, sizeof(lg_param_strbuf) - 1,
                        pi->def);
                bad++;
            } else if (s) {
                char *dst = lg_param_strbuf + used;
                memcpy(dst, s, n);
                used += n;
                v = dst;
            }
            memcpy(slot, &v, sizeof(v));
            continue;
        }
        int64_t v = 0;
        if (s && parse_one(pi, s, &v) != 0) {
            LG_WARN("%s=\"%s\" is not valid (range %lld..%lld), using the default %s", pi->env,
                    s, (long long)pi->lo, (long long)pi->hi, pi->def);
            bad++;
            s = NULL;
        }
        if (!s && parse_one(pi, pi->def, &v) != 0)
            v = 0; /* unreachable for a well-formed params.def: tested */
        memcpy(slot, &v, sizeof(v));
    }
    return bad;
}
