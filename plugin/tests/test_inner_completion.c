/* Wrap mode's completion model (inner_completion.h): LINKGUARD_INNER_PLACED decides when set,
 * "auto" decides from the table of plugins known to complete a send only once placed, and any
 * other plugin gets acknowledged completion. */
#include <string.h>

#include "lg_test.h"
#include "transport/inner/inner_completion.h"

int main(void)
{
    const char *why = NULL;
    /* auto: the known plugins, from the ABI version on which the row holds */
    CHECK_EQ(lg_inner_completion_placed("auto", "lgtcp", 12, &why), 1);
    CHECK(strstr(why, "lgtcp") != NULL);
    CHECK_EQ(lg_inner_completion_placed("AUTO", "IB", 8, &why), 1);
    CHECK(strstr(why, "RC queue pairs") != NULL);
    CHECK_EQ(lg_inner_completion_placed(NULL, "IB", 8, &why), 1);
    CHECK_EQ(lg_inner_completion_placed("auto", "IB", 7, &why), 0);
    /* one name, several transports or providers: never guessed */
    CHECK_EQ(lg_inner_completion_placed("auto", "Libfabric", 12, &why), 0);
    CHECK_EQ(lg_inner_completion_placed("auto", "UCX", 12, &why), 0);
    CHECK_EQ(lg_inner_completion_placed("auto", "Socket", 12, &why), 0);
    CHECK_EQ(lg_inner_completion_placed("auto", "ib", 12, &why), 0); /* names are exact */
    CHECK_EQ(lg_inner_completion_placed("auto", NULL, 12, &why), 0);
    CHECK(strstr(why, "not known") != NULL);
    /* the setting wins either way */
    CHECK_EQ(lg_inner_completion_placed("0", "lgtcp", 12, &why), 0);
    CHECK(!strcmp(why, "LINKGUARD_INNER_PLACED=0"));
    CHECK_EQ(lg_inner_completion_placed("yes", "Libfabric", 12, &why), 1);
    CHECK(!strcmp(why, "LINKGUARD_INNER_PLACED=1"));
    /* neither: -1 for the caller's WARN */
    CHECK_EQ(lg_inner_completion_placed("maybe", "lgtcp", 12, &why), -1);
    CHECK_EQ(lg_inner_completion_placed("", "lgtcp", 12, &why), -1);
    LG_TEST_DONE();
}
