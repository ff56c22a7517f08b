/* The protocol's control frames, handed over by the path's control session on whichever
 * thread reads it (a worker, NCCL's thread when it polls, the monitor): frames are checked against what an honest peer can say and either
 * taken at once (ACK, BYE) or stored in the mailbox for the monitor (HB, SWITCH, RESYNC,
 * READY), which it wakes; the transport's own frames go to the transport (on_frame). */
#include "proto/proto.h"

#include <stdint.h>

#include "proto/conn.h"
#include "proto/resync.h"
#include "proto/sendmatch.h"
#include "proto/window.h"
#include "runtime/log.h"
#include "runtime/util.h"
#include "runtime/wake.h"

/* Frames of the failover protocol: into the mailbox (the monitor acts on them). */
static void on_protocol_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    struct lg_mailbox *mb = &c->mb;
    int wake = 0;
    switch (f->type) {
    case LG_CTRL_HB:
        pthread_mutex_lock(&c->mb_mu);
        if (!mb->hb_valid || mb->hb_flags != f->flags || mb->hb_epoch != f->epoch ||
            mb->hb_gens != f->value) {
            mb->hb_flags = f->flags;
            mb->hb_epoch = f->epoch;
            mb->hb_gens = f->value;
            mb->hb_valid = wake = 1;
        }
        pthread_mutex_unlock(&c->mb_mu);
        break;
    case LG_CTRL_SWITCH:
        if (f->value != (uint64_t)p->index) {
            lg_conn_path_failed(p, 0, "SWITCH for another path");
            return;
        }
        uint32_t ours = __atomic_load_n(&c->epoch, __ATOMIC_ACQUIRE);
        if (f->epoch > ours && !lg_epoch_plausible(f->epoch, ours)) {
            lg_conn_peer_lied(c, "SWITCH to epoch %u, ours is %u", f->epoch, ours);
            return;
        }
        pthread_mutex_lock(&c->mb_mu);
        if (f->epoch > mb->switch_epoch) {
            mb->switch_epoch = f->epoch;
            mb->switch_target = p->index;
            mb->switch_gen = p->gen;
            mb->switch_rx_ns = lg_now_ns();
            wake = 1;
        }
        pthread_mutex_unlock(&c->mb_mu);
        break;
    case LG_CTRL_RESYNC:
        if (f->flags != p->index || f->value > __atomic_load_n(&c->posted, __ATOMIC_ACQUIRE)) {
            lg_conn_path_failed(p, 0, "RESYNC for another path or unsent messages");
            return;
        }
        pthread_mutex_lock(&c->mb_mu);
        if (f->epoch > mb->resync_epoch) {
            mb->resync_epoch = f->epoch;
            mb->resync_target = p->index;
            mb->resync_n = f->value;
            mb->resync_gen = p->gen;
            mb->resync_rx_ns = lg_now_ns();
            wake = 1;
        }
        pthread_mutex_unlock(&c->mb_mu);
        break;
    case LG_CTRL_READY:
        if (f->value == p->gen) {
            __atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
            wake = 1;
        }
        break;
    default:
        break;
    }
    if (wake)
        lg_monitor_wake(c);
}

static const char *frame_name(uint8_t type)
{
    switch (type) {
    case LG_CTRL_DELIVERED:
        return "DELIVERED";
    case LG_CTRL_POSTED:
        return "POSTED";
    case LG_CTRL_KEEPS:
        return "KEEPS";
    case LG_CTRL_TAGS:
        return "TAGS";
    case LG_CTRL_GROUP:
        return "GROUP";
    case LG_CTRL_GROUPED:
        return "GROUPED";
    case LG_CTRL_STALLED:
        return "STALLED";
    default:
        return "a frame";
    }
}

/* A transport's own frame: the transport takes it, and one its transport never sends is a
 * lie. */
static int transport_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    int rc = c->tr->on_frame(p, f);
    if (rc == 0)
        lg_conn_peer_lied(c, "%s, which the %s transport never sends", frame_name(f->type),
                          c->tr->name);
    return rc > 0 ? 0 : -1;
}

int lg_proto_on_frame(struct lg_path *p, const struct lg_ctrl *f)
{
    struct lg_conn *c = p->conn;
    int send = c->kind == LG_CONN_SEND;
    switch (f->type) {
    case LG_CTRL_BYE:
        /* A closing receiver's BYE carries its final placed count: the sends it received
         * complete even if its last ACK is still unread on another path. */
        if (f->flags == LG_BYE_CLOSE && send && lg_conn_take_ack(c, f->value) != 0)
            return -1;
        /* A closing sender's carries what completed there (a count beyond our posts is a
         * lie that only bounds the wait): complete those before the close is taken. */
        if (f->flags == LG_BYE_CLOSE && !send && c->tr->drain_delivered &&
            f->value > __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE))
            c->tr->drain_delivered(c, f->value);
        lg_path_note_bye(p, f->flags);
        return 0;
    case LG_CTRL_ACK:
        if (!send)
            break;
        if (lg_conn_take_ack(c, f->value) == 0 &&
            __atomic_load_n(&c->hold, __ATOMIC_RELAXED) == LG_HOLD_BOUNDARY)
            lg_monitor_wake(c); /* a graceful switch waits for the last in-flight ack */
        return 0;
    case LG_CTRL_HB:
        on_protocol_frame(p, f);
        return 0;
    case LG_CTRL_SWITCH:
        if (send)
            break;
        on_protocol_frame(p, f);
        return 0;
    case LG_CTRL_RESYNC:
    case LG_CTRL_READY:
        if (!send)
            break;
        on_protocol_frame(p, f);
        return 0;
    case LG_CTRL_INNER: { /* the transport's: sender side */
        int rc = send ? c->tr->on_frame(p, f) : 0;
        if (rc)
            return rc > 0 ? 0 : -1;
        break;
    }
    case LG_CTRL_STALLED: /* the transport's: sender side */
        if (!send)
            break;
        return transport_frame(p, f);
    case LG_CTRL_TAGS: /* matching at the sender (sendmatch.h): the question, the answer */
        if (!send) {
            lg_match_on_ask(p, f);
            return 0;
        }
        return lg_match_on_frame(p, f);
    case LG_CTRL_GROUP:
        if (!send)
            break;
        return lg_match_on_frame(p, f);
    case LG_CTRL_DELIVERED: /* the transport's: receiver side */
    case LG_CTRL_POSTED:
    case LG_CTRL_KEEPS:
        if (send)
            break;
        return transport_frame(p, f);
    case LG_CTRL_GROUPED: /* the transport's: the question, the answer */
        return transport_frame(p, f);
    default:
        break;
    }
    lg_conn_path_failed(p, 0, "unexpected control frame");
    return -1;
}
