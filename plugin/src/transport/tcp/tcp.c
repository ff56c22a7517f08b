/* The TCP transport (tcp.h): its ops table, and the ops too small for a file of their own. */
#include "transport/tcp/tcp.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/devices.h"
#include "proto/upcall.h"
#include "runtime/log.h"
#include "runtime/params.h"
#include "runtime/util.h"
#include "transport/tcp/tcp_conn.h"

static ncclResult_t tcp_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    const struct lg_device *d = lg_device_get(dev);
    memset(props, 0, sizeof(*props));
    /* DESIGN.md: describe the primary; advertise what both members support (both are this
     * TCP transport: host memory, grouped receives up to LINKGUARD_MAX_RECVS). */
    props->name = (char *)d->nic[0].name;
    props->pciPath = d->pci_path[0] ? (char *)d->pci_path : NULL;
    props->guid = d->guid;
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = d->speed_mbps;
    props->port = 0;
    props->latency = 0;
    props->maxComms = LG_MAX_COMMS;
    props->maxRecvs = (int)lg_params.max_recvs; /* grouped receives: conn.h, LG_MAX_RECVS */
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = LG_MAX_MSG_BYTES;
    props->maxCollBytes = LG_MAX_MSG_BYTES;
    props->maxMultiRequestSize = 1;
    props->railId = NCCL_NET_ID_UNDEF;
    props->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
}

static ncclResult_t tcp_ctx_open(uint64_t comm_id, int traffic_class, struct lg_inner_ctx **out)
{
    (void)comm_id;
    (void)traffic_class;
    *out = NULL; /* nothing below us to give a context to */
    return ncclSuccess;
}

static int tcp_nstreams(void) { return (int)lg_params.streams; }

static int tcp_usable(struct lg_conn *c, uint64_t now)
{
    (void)c;
    (void)now;
    return 1; /* connected is usable: nothing to register with */
}

static ncclResult_t tcp_reg_mr(struct lg_conn *c, void *data, size_t size, int type,
                               uint64_t offset, int fd, struct lg_inner_mr **out)
{
    (void)data;
    (void)size;
    (void)offset;
    *out = NULL; /* host memory needs no registration */
    if (!(type & NCCL_PTR_HOST) || fd >= 0) {
        LG_WARN("%s: memory type %d is not supported by dev %d (ptrSupport 0x%x)",
                fd >= 0 ? "regMrDmaBuf" : "regMr", type, lg_tcp_ep(lg_conn_ep(c))->dev,
                NCCL_PTR_HOST);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t tcp_dereg_mr(struct lg_conn *c, struct lg_inner_mr *mr)
{
    (void)c;
    (void)mr;
    return ncclSuccess;
}

static ncclResult_t tcp_iflush(struct lg_conn *c, int n, void **data, int *sizes,
                               struct lg_inner_mr **mrs, void **request)
{
    (void)c;
    (void)n;
    (void)data;
    (void)sizes;
    (void)mrs;
    *request = NULL; /* host memory needs no flush: NULL means "already complete" */
    return ncclSuccess;
}

static int tcp_flush_test(void *request, int *done, ncclResult_t *rc)
{
    (void)request;
    (void)done;
    (void)rc;
    return 0; /* it hands out no flush requests */
}

/* The hello's word: the sender's chunk size (LINKGUARD_CHUNK_SIZE). A listener takes any up
 * to 64 MiB, or up to its own if that is larger (chunks land straight in the posted buffer:
 * their size costs the receiver nothing but a coverage bit each). */
static uint32_t tcp_hello_blob(void) { return (uint32_t)lg_params.chunk_size; }
static int tcp_blob_ok(uint32_t blob)
{
    return blob >= 1 && blob <= (uint32_t)LG_MAX(lg_params.chunk_size, 64 << 20);
}

/* Both sides' endpoint (tcp_conn.h): what the connection is, the chunk size, a sender's
 * cursor place, parked streams and goodput windows, the watchdogs' asks. */
static int tcp_open(struct lg_conn *c, struct lg_endpoint **out)
{
    *out = NULL;
    struct lg_tcp_conn *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    struct lg_conn_facts f = lg_conn_facts(c);
    pthread_mutex_init(&e->ask_mu, NULL);
    e->send = f.send;
    e->dev = f.dev;
    e->nstreams = f.nstreams;
    e->nonce = f.nonce;
    e->chunk_size = f.blob; /* the connector's (its hello's word) */
    if (f.send) /* every data stream starts with nothing to send */
        e->parked = (uint32_t)((1ull << f.nstreams) - 1);
    *out = (struct lg_endpoint *)e;
    return 0;
}

static void tcp_release(struct lg_endpoint *ep)
{
    struct lg_tcp_conn *e = lg_tcp_ep(ep);
    if (e)
        pthread_mutex_destroy(&e->ask_mu);
    free(e);
}

static int tcp_path_open(struct lg_path *p, struct lg_ep_path **out)
{
    (void)p;
    *out = calloc(1, sizeof(struct lg_tcp_path));
    return *out ? 0 : -1;
}

static void tcp_path_close(struct lg_ep_path *tp) { free(tp); }

static void tcp_path_detached(struct lg_path *p)
{
    if (lg_tcp_ep(lg_conn_ep(lg_path_conn(p)))->send)
        lg_tcp_send_detached(p);
}

static void tcp_posted(struct lg_conn *c, const struct lg_req *r, struct lg_inner_mr *const *mrs,
                       uint32_t wake)
{
    (void)mrs; /* registers nothing (tcp_reg_mr) */
    if (lg_tcp_ep(lg_conn_ep(c))->send) {
        if (wake) /* else no stream to wake */
            lg_tcp_send_posted(c, lg_req_info(r).size, wake);
    } else {
        lg_tcp_recv_posted(c);
    }
}

/* NCCL's thread polls test() while requests are outstanding: let it do the socket work of
 * this connection instead of waking a worker (bounded; see the handlers). */
static void tcp_progress(struct lg_conn *c, struct lg_req *r)
{
    if (!lg_params.poll_inline)
        return;
    if (lg_tcp_ep(lg_conn_ep(c))->send)
        lg_conn_poll_ctrl(c); /* the acks */
    else
        lg_tcp_recv_progress(c, r);
}

static int tcp_step(struct lg_conn *c, uint64_t now)
{
    (void)c;
    (void)now;
    return 0; /* no handshake beyond the protocol's own */
}

static int tcp_carries(const struct lg_path *p)
{
    (void)p;
    return 1; /* its sockets are the path */
}

static void tcp_at(struct lg_conn *c, uint64_t now)
{
    (void)c;
    (void)now;
}

static void tcp_resume(struct lg_path *p)
{
    if (!p)
        return;
    struct lg_conn *c = lg_path_conn(p);
    struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    if (e->send)
        lg_tcp_send_resume(c);
    for (int k = 0; lg_path_is_up(p) && k < e->nstreams; k++)
        lg_task_kick(lg_path_stream(p, k));
}

static void tcp_path_nothing(struct lg_path *p) { (void)p; }

static void tcp_rebuilt(struct lg_path *p)
{
    struct lg_ctrl ready = {.type = LG_CTRL_READY, .value = lg_path_id(p).gen};
    lg_path_ctrl_out(p, &ready);
}

static void tcp_switching(struct lg_conn *c, struct lg_path *target)
{
    (void)c;
    (void)target;
}

static void tcp_commit(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    (void)c;
    (void)from;
    (void)to;
}

static void tcp_commit_end(struct lg_conn *c, struct lg_path *from, struct lg_path *to)
{
    (void)from;
    (void)to;
    if (!lg_tcp_ep(lg_conn_ep(c))->send)
        lg_tcp_recv_commit_end(c);
}

const struct lg_transport lg_tcp_transport = {
    .name = "tcp",
    .chunks = 1,
    .sends_copies = LG_COPY_SENDS,
    .any_backup_nic = 1,
    .id = LG_TRANSPORT_TCP,
    .hello_blob = tcp_hello_blob,
    .blob_ok = tcp_blob_ok,
    .stream_fn = {lg_tcp_send_handler, lg_tcp_recv_handler},
    .get_properties = tcp_get_properties,
    .ctx_open = tcp_ctx_open,
    .nstreams = tcp_nstreams,
    .usable = tcp_usable,
    .reg_mr = tcp_reg_mr,
    .dereg_mr = tcp_dereg_mr,
    .iflush = tcp_iflush,
    .flush_test = tcp_flush_test,
    .open = tcp_open,
    .release = tcp_release,
    .path_open = tcp_path_open,
    .path_close = tcp_path_close,
    .path_detached = tcp_path_detached,
    .recv_prepare = lg_tcp_recv_prepare,
    .send_queued = lg_tcp_send_queued,
    .mid_message = lg_tcp_send_mid_message,
    .to_boundary = lg_tcp_send_to_boundary,
    .posted = tcp_posted,
    .progress = tcp_progress,
    .step = tcp_step,
    .carries = tcp_carries,
    .watch = lg_tcp_watch,
    .goodput = lg_tcp_goodput,
    .heartbeat = tcp_at,
    .on_frame = lg_tcp_on_frame,
    .resume = tcp_resume,
    .fence = tcp_path_nothing,
    .rearm = tcp_path_nothing,
    .rebuilt = tcp_rebuilt,
    .switching = tcp_switching,
    .commit_begin = tcp_commit,
    .commit_end = tcp_commit_end,
};
