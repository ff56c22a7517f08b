/* Plugin tunables: the struct generated from params.def and its parser. */
#ifndef LG_PARAMS_H
#define LG_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#define LG_PTYPE_INT int64_t
#define LG_PTYPE_SIZE int64_t
#define LG_PTYPE_BOOL int64_t
#define LG_PTYPE_STR const char *

struct lg_params {
#define LG_PARAM(field, env, kind, def, lo, hi, doc) LG_PTYPE_##kind field;
#include "runtime/params.def"
#undef LG_PARAM
};

enum lg_param_kind { LG_PK_INT, LG_PK_SIZE, LG_PK_BOOL, LG_PK_STR };

struct lg_param_info {
    const char *field;
    const char *env;
    enum lg_param_kind kind;
    const char *def;
    int64_t lo, hi;
    const char *doc;
    size_t offset; /* in struct lg_params */
};

extern const struct lg_param_info lg_param_table[];
extern const int lg_param_count;

/* The process-wide values, valid after lg_params_load(&lg_params, getenv). */
extern struct lg_params lg_params;

typedef const char *(*lg_getenv_fn)(const char *name);
/* Fills p from the environment (get(name) == NULL: unset). A bad value is reported through
 * the logger and replaced by its default; returns the number of bad values. String values
 * point into a private buffer owned by p's loader (valid until the next load). */
int lg_params_load(struct lg_params *p, lg_getenv_fn get);

/* Parsers (0 on success, -1 on a malformed value). */
int lg_param_parse_int(const char *s, int64_t *out);
int lg_param_parse_size(const char *s, int64_t *out);
int lg_param_parse_bool(const char *s, int64_t *out);

#endif
