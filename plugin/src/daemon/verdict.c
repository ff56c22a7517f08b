/* Verdicts to the daemon over its unix datagram socket (see verdict.h). */
#include "daemon/verdict.h"

#include <pthread.h>
#include <string.h>

#include "daemon/daemon_sock.h"
#include "runtime/le.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"

/* (NIC, kind) pairs remembered for the rate limit: more than any host has NICs x kinds; when
 * full, the oldest entry is reused (at worst one extra report). */
#define LG_VERDICT_SLOTS 64

struct slot {
    char nic[LG_VERDICT_NIC_LEN];
    uint8_t kind;
    uint64_t sent_ns;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[LG_VERDICT_SLOTS];
static int dropped_logged;

void lg_verdict_encode(uint8_t out[LG_VERDICT_SIZE], const struct lg_verdict *v)
{
    memset(out, 0, LG_VERDICT_SIZE);
    lg_put32(out + 0, LG_VERDICT_MAGIC);
    lg_put16(out + 4, LG_VERDICT_VERSION);
    out[6] = v->kind;
    out[7] = v->path;
    lg_put_text(out + 8, LG_VERDICT_NIC_LEN, v->nic);
    lg_put32(out + 24, v->for_ms);
    lg_put32(out + 28, v->loss_ppm);
    lg_put64(out + 32, v->rate_Bps);
    lg_put64(out + 40, v->expected_Bps);
    lg_put64(out + 48, v->conn);
    lg_put_text(out + 56, LG_VERDICT_PEER_LEN, v->peer);
}

/* Under mu: 1 if (nic, kind) may be reported now (and the slot is taken), 0 if too soon. */
static int take_slot(const char *nic, uint8_t kind, uint64_t now)
{
    struct slot *oldest = &slots[0];
    for (int i = 0; i < LG_VERDICT_SLOTS; i++) {
        struct slot *s = &slots[i];
        if (s->sent_ns && s->kind == kind && !strncmp(s->nic, nic, sizeof(s->nic) - 1)) {
            if (now - s->sent_ns < (uint64_t)LG_VERDICT_INTERVAL_MS * 1000000ull)
                return 0;
            s->sent_ns = now;
            return 1;
        }
        if (s->sent_ns < oldest->sent_ns)
            oldest = s;
    }
    lg_put_text((uint8_t *)oldest->nic, sizeof(oldest->nic), nic);
    oldest->kind = kind;
    oldest->sent_ns = now;
    return 1;
}

int lg_verdict_report(const struct lg_verdict *v) { return lg_verdict_report_at(v, lg_now_ns()); }

int lg_verdict_report_at(const struct lg_verdict *v, uint64_t now_ns)
{
    if (!v || !v->nic || !v->nic[0] || v->kind < LG_VERDICT_HEALTHY ||
        v->kind >= LG_VERDICT_KIND_MAX || !lg_daemon_sock_enabled())
        return 0;
    uint8_t msg[LG_VERDICT_SIZE];
    lg_verdict_encode(msg, v);
    int sent = 0;
    pthread_mutex_lock(&mu);
    if (take_slot(v->nic, v->kind, now_ns)) {
        char why[96];
        sent = lg_daemon_sock_send(msg, sizeof(msg), why, sizeof(why));
        if (!sent && !dropped_logged) { /* once: no daemon is a normal way to run */
            dropped_logged = 1;
            LG_INFO(NCCL_NET, "verdict for NIC %s not reported to the daemon at %s: %s (later "
                    "failures to report are not logged)", v->nic, lg_params.verdict_socket, why);
        }
    }
    pthread_mutex_unlock(&mu);
    return sent;
}

void lg_verdict_reset(void)
{
    pthread_mutex_lock(&mu);
    memset(slots, 0, sizeof(slots));
    dropped_logged = 0;
    pthread_mutex_unlock(&mu);
}
