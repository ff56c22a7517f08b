/* Which inner plugins complete a send only once it is placed (see inner_completion.h). */
#include "transport/inner/inner_completion.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "runtime/params.h"

/* A row only for what the plugin's own code guarantees whatever its settings; a plugin with
 * several transports or providers behind one name (aws-ofi-nccl, UCX) has none. */
static const struct {
    const char *name;
    int min_version; /* ncclNetPlugin_vN */
    const char *why;
} placed_plugins[] = {
    {"lgtcp", 8, "linkguard's lgtcp completes a send on its receiver's acknowledgement, sent "
                 "once placed"},
    {"IB", 8, "the verbs plugin's RC queue pairs complete a send after the responder "
              "acknowledged its RDMA write (InfiniBand vol. 1, RC transport)"},
};

int lg_inner_completion_placed(const char *setting, const char *name, int version,
                               const char **why)
{
    int64_t v = 0;
    int bad = 0;
    if (setting && strcasecmp(setting, "auto") != 0) {
        if (lg_param_parse_bool(setting, &v) == 0) {
            *why = v ? "LINKGUARD_INNER_PLACED=1" : "LINKGUARD_INNER_PLACED=0";
            return (int)v;
        }
        bad = 1;
    }
    *why = "an inner plugin not known to complete a send only once it is placed";
    for (size_t i = 0; i < sizeof(placed_plugins) / sizeof(placed_plugins[0]); i++)
        if (name && !strcmp(name, placed_plugins[i].name) &&
            version >= placed_plugins[i].min_version) {
            *why = placed_plugins[i].why;
            v = 1;
        }
    return bad ? -1 : (int)v;
}
