/* Tunables: every params.def default parses and is in range; environment values override,
 * bad ones fall back to the default; size suffixes and booleans. */
#include <string.h>

#include "lg_test.h"
#include "runtime/params.h"

static const char *const *fake_env;

static const char *fake_get(const char *name)
{
    for (int i = 0; fake_env && fake_env[i]; i += 2)
        if (!strcmp(fake_env[i], name))
            return fake_env[i + 1];
    return NULL;
}

/* Every string setting, at every length around the shared buffer's size: accepted whole or
 * replaced by its default, never written past the buffer (ASan builds of this test catch an
 * overflow by one byte; issue #16, finding 4: a LINKGUARD_PAIRS of 4,089 characters). */
static void check_long_strings(void)
{
    static char big[5000];
    for (int i = 0; i < lg_param_count; i++) {
        const struct lg_param_info *pi = &lg_param_table[i];
        if (pi->kind != LG_PK_STR)
            continue;
        for (size_t len = 4070; len < 4100; len++) {
            memset(big, 'a', len);
            big[len] = 0;
            const char *env[] = {pi->env, big, NULL};
            fake_env = env;
            struct lg_params p;
            int bad = lg_params_load(&p, fake_get);
            const char *got = *(const char *const *)((const char *)&p + pi->offset);
            CHECK(bad == 0 ? strlen(got) == len : bad == 1 && !strcmp(got, pi->def));
            for (int k = 0; k < lg_param_count; k++) {
                const struct lg_param_info *o = &lg_param_table[k];
                if (k != i && o->kind == LG_PK_STR)
                    CHECK(!strcmp(*(const char *const *)((const char *)&p + o->offset), o->def));
            }
        }
        /* Far too long: the default, and one bad value reported. */
        memset(big, 'b', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        const char *env[] = {pi->env, big, NULL};
        fake_env = env;
        struct lg_params p;
        CHECK_EQ(lg_params_load(&p, fake_get), 1);
        CHECK(!strcmp(*(const char *const *)((const char *)&p + pi->offset), pi->def));
    }
    fake_env = NULL;
}

int main(void)
{
    int64_t v;
    CHECK_EQ(lg_param_parse_size("512K", &v), 0);
    CHECK_EQ(v, 524288);
    CHECK_EQ(lg_param_parse_size("4MiB", &v), 0);
    CHECK_EQ(v, 4 << 20);
    CHECK_EQ(lg_param_parse_size("1g", &v), 0);
    CHECK_EQ(v, 1 << 30);
    CHECK_EQ(lg_param_parse_size("123", &v), 0);
    CHECK_EQ(v, 123);
    CHECK(lg_param_parse_size("-1", &v) != 0);
    CHECK(lg_param_parse_size("12Q", &v) != 0);
    CHECK(lg_param_parse_size("", &v) != 0);
    CHECK(lg_param_parse_size("99999999999999999999", &v) != 0);
    CHECK(lg_param_parse_size("9999999999999G", &v) != 0);
    CHECK_EQ(lg_param_parse_int("-5", &v), 0);
    CHECK_EQ(v, -5);
    CHECK(lg_param_parse_int("5x", &v) != 0);
    CHECK_EQ(lg_param_parse_bool("off", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(lg_param_parse_bool("YES", &v), 0);
    CHECK_EQ(v, 1);
    CHECK(lg_param_parse_bool("2", &v) != 0);

    /* Defaults: all parse, all in range, every parameter documented. */
    struct lg_params p;
    fake_env = NULL;
    CHECK_EQ(lg_params_load(&p, fake_get), 0);
    CHECK(p.streams >= 1 && p.backup == 1 && p.chunk_size == 524288);
    CHECK(!strcmp(p.pairs, ""));
    for (int i = 0; i < lg_param_count; i++) {
        const struct lg_param_info *pi = &lg_param_table[i];
        CHECK(pi->doc && strlen(pi->doc) > 20);
        CHECK(!strncmp(pi->env, "LINKGUARD_", 10) || !strncmp(pi->env, "LGTCP_", 6));
        for (int k = 0; k < i; k++)
            CHECK(strcmp(pi->env, lg_param_table[k].env) != 0);
    }

    static const char *const env[] = {"LINKGUARD_STREAMS", "4",
                                      "LINKGUARD_CHUNK_SIZE", "1M",
                                      "LINKGUARD_BACKUP", "0",
                                      "LINKGUARD_PAIRS", "rail0:rail1,rail1:rail0",
                                      "LINKGUARD_THREADS", "0",        /* below range */
                                      "LINKGUARD_CONNECT_TIMEOUT_MS", "soon", /* garbage */
                                      NULL};
    fake_env = env;
    CHECK_EQ(lg_params_load(&p, fake_get), 2);
    CHECK_EQ(p.streams, 4);
    CHECK_EQ(p.chunk_size, 1 << 20);
    CHECK_EQ(p.backup, 0);
    CHECK(!strcmp(p.pairs, "rail0:rail1,rail1:rail0"));
    struct lg_params def;
    fake_env = NULL;
    lg_params_load(&def, fake_get);
    CHECK_EQ(p.threads, def.threads);
    check_long_strings();
    LG_TEST_DONE();
}
