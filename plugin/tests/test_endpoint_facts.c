/* A transport's own objects (issue 27): each endpoint copies what its connection is at open
 * (upcall.h, lg_conn_facts: side, device, streams, hello word, nonce), so the transports need
 * not read the protocol's objects; and lg_conn_ep / lg_path_tp, which read an object's first
 * word, find the pointers the protocol holds. A fact set after open (the nonce once was)
 * would reach the endpoint as 0 here. */
#include "lg_test.h"
#include "proto/conn.h"
#include "proto/upcall.h"
#include "transport/inner/inner_conn.h"
#include "transport/inner/inner_transport.h"
#include "transport/tcp/tcp.h"
#include "transport/tcp/tcp_conn.h"

static void check_tcp(enum lg_conn_kind kind)
{
    struct lg_conn *c = lg_conn_new(kind, 1, &lg_tcp_transport, 3, 8192, 0x1badc0ffeeull);
    CHECK(c != NULL);
    if (!c)
        return;
    CHECK(lg_conn_ep(c) == c->ep && c->ep != NULL);
    const struct lg_tcp_conn *e = lg_tcp_ep(lg_conn_ep(c));
    CHECK_EQ(e->send, kind == LG_CONN_SEND);
    CHECK_EQ(e->dev, 1);
    CHECK_EQ(e->nstreams, 3);
    CHECK_EQ(e->chunk_size, 8192);
    CHECK(e->nonce == 0x1badc0ffeeull);
    CHECK_EQ(e->parked, kind == LG_CONN_SEND ? 0x7 : 0); /* every stream starts idle */
    struct lg_path *p = lg_path_alloc(c, 1, "rail1", "peer");
    CHECK(p != NULL && lg_path_tp(p) == p->tp && p->tp != NULL);
    struct lg_path_id id = p ? lg_path_id(p) : (struct lg_path_id){0};
    CHECK(id.nonce == 0x1badc0ffeeull && id.slot == 1 && id.gen == 0);
    lg_path_free(p);
    lg_conn_free(c);
}

static void check_inner(enum lg_conn_kind kind)
{
    struct lg_conn *c = lg_conn_new(kind, 2, &lg_inner_transport, 1, 0, 42);
    CHECK(c != NULL);
    if (!c)
        return;
    const struct lg_inner_conn *e = lg_inner_ep(lg_conn_ep(c));
    CHECK(e == (const struct lg_inner_conn *)c->ep && e != NULL);
    CHECK_EQ(e->send, kind == LG_CONN_SEND);
    CHECK_EQ(e->dev, 2);
    CHECK(e->nonce == 42);
    lg_conn_free(c);
}

int main(void)
{
    check_tcp(LG_CONN_SEND);
    check_tcp(LG_CONN_RECV);
    check_inner(LG_CONN_SEND);
    check_inner(LG_CONN_RECV);
    LG_TEST_DONE();
}
