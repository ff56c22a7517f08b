/* On-the-wire formats of the TCP transport (see wire.h). */
#include "session/wire.h"

#include <string.h>

#include "runtime/le.h"


void lg_hello_encode(uint8_t out[LG_HELLO_SIZE], const struct lg_hello *h)
{
    memset(out, 0, LG_HELLO_SIZE);
    lg_put32(out + 0, LG_HELLO_MAGIC);
    lg_put16(out + 4, LG_WIRE_VERSION);
    out[6] = h->path;
    out[7] = h->stream;
    out[8] = h->nstreams;
    out[9] = h->paths_mask;
    out[11] = h->transport;
    lg_put32(out + 12, h->blob);
    lg_put64(out + 16, h->listen_id);
    lg_put64(out + 24, h->conn_nonce);
    out[10] = h->flags;
    lg_put32(out + 32, h->gen);
    lg_put64(out + 36, h->session);
    lg_put32(out + 44, h->chan);
}

int lg_hello_decode(const uint8_t in[LG_HELLO_SIZE], struct lg_hello *h)
{
    if (lg_get32(in) != LG_HELLO_MAGIC || lg_get16(in + 4) != LG_WIRE_VERSION)
        return -1;
    h->path = in[6];
    h->stream = in[7];
    h->nstreams = in[8];
    h->paths_mask = in[9];
    h->transport = in[11];
    h->blob = lg_get32(in + 12);
    h->listen_id = lg_get64(in + 16);
    h->conn_nonce = lg_get64(in + 24);
    h->flags = in[10];
    h->gen = lg_get32(in + 32);
    h->session = lg_get64(in + 36);
    h->chan = lg_get32(in + 44);
    if (h->flags & ~(LG_HELLO_F_REJOIN | LG_HELLO_F_SESSION))
        return -1;
    if (h->flags & LG_HELLO_F_SESSION) /* nothing but its id */
        return h->flags != LG_HELLO_F_SESSION || h->path || h->stream || h->nstreams ||
                       h->paths_mask || h->listen_id || h->gen || h->session || h->chan ||
                       h->transport || h->blob
                   ? -1 : 0;
    /* The transport id and word are the listener's to judge (its transport's blob_ok). */
    if (h->path >= LG_NPATHS || h->nstreams < 1 || h->nstreams > LG_MAX_STREAMS ||
        h->stream < 1 || h->stream > h->nstreams || h->transport == 0 ||
        !(h->paths_mask & 1) || (h->paths_mask >> LG_NPATHS) != 0 || h->chan == 0)
        return -1;
    return 0;
}

void lg_ctrl_encode(uint8_t out[LG_CTRL_SIZE], const struct lg_ctrl *c)
{
    out[0] = c->type;
    out[1] = c->flags;
    lg_put16(out + 2, 0);
    lg_put32(out + 4, c->epoch);
    lg_put64(out + 8, c->value);
    lg_put32(out + 16, c->chan);
    lg_put32(out + 20, 0);
}

int lg_ctrl_decode(const uint8_t in[LG_CTRL_SIZE], struct lg_ctrl *c)
{
    c->type = in[0];
    c->flags = in[1];
    c->epoch = lg_get32(in + 4);
    c->value = lg_get64(in + 8);
    c->chan = lg_get32(in + 16);
    if (c->type == 0 || c->type >= LG_CTRL_TYPE_MAX || lg_get16(in + 2) != 0 ||
        lg_get32(in + 20) != 0)
        return -1;
    return 0;
}

void lg_chunk_encode(uint8_t out[LG_CHUNK_HDR_SIZE], const struct lg_chunk_hdr *c)
{
    lg_put16(out + 0, LG_CHUNK_MAGIC);
    lg_put16(out + 2, c->epoch);
    lg_put32(out + 4, c->len);
    lg_put64(out + 8, c->seq);
    lg_put64(out + 16, c->offset);
    lg_put64(out + 24, c->total);
    lg_put32(out + 32, c->tag);
    lg_put32(out + 36, c->flags);
}

int lg_chunk_decode(const uint8_t in[LG_CHUNK_HDR_SIZE], uint32_t max_len, struct lg_chunk_hdr *c)
{
    if (lg_get16(in) != LG_CHUNK_MAGIC)
        return -1;
    c->epoch = lg_get16(in + 2);
    c->len = lg_get32(in + 4);
    c->seq = lg_get64(in + 8);
    c->offset = lg_get64(in + 16);
    c->total = lg_get64(in + 24);
    c->tag = lg_get32(in + 32);
    c->flags = lg_get32(in + 36);
    if ((c->flags & ~LG_CHUNK_F_ALL) || c->len > max_len || c->offset > c->total || c->total - c->offset < c->len ||
        (c->len == 0 && c->total != 0))
        return -1;
    return 0;
}

int lg_seqwin_mark(struct lg_seqwin *w, uint64_t seq)
{
    if (seq < w->base || seq - w->base >= LG_WINDOW)
        return -1;
    uint64_t bit = 1ull << (seq - w->base);
    if (w->bits & bit)
        return -1;
    w->bits |= bit;
    if (!(w->bits & 1))
        return 0;
    /* Advance over the run of done messages at the bottom of the window. */
    int run = w->bits == ~0ull ? 64 : __builtin_ctzll(~w->bits);
    w->base += (uint64_t)run;
    w->bits = run == 64 ? 0 : w->bits >> run;
    return 1;
}
