/* Writes the seed corpora of the fuzz harnesses into DIR/<harness>/ (`make -C plugin
 * fuzz-seeds`): valid encodings made by the project's own encoders, and the edge cases next
 * to them (one bad field, limits). The committed fuzz/corpus/ is this program's output. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session/handle.h"
#include "linkguard_shm.h"
#include "nccl_net_abi.h"
#include "runtime/le.h"
#include "runtime/params.h"
#include "session/wire.h"
#include "transport/transport.h"

static const char *root;

static void put(const char *harness, const char *name, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, harness);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void seeds_handle(void)
{
    uint8_t b[NCCL_NET_HANDLE_MAXSIZE] = {0};
    struct lg_handle h = {.listen_id = 0x1122334455667788ull, .flags = LG_HANDLE_F_BACKUP,
                          .ip = {inet_addr("198.18.0.1"), inet_addr("198.18.1.1")},
                          .port = {40000, 40001}};
    lg_handle_encode(b, &h);
    put("fuzz_handle", "backup", b, LG_HANDLE_SIZE);
    snprintf(h.nic[0], sizeof(h.nic[0]), "rail0");
    snprintf(h.nic[1], sizeof(h.nic[1]), "rail1");
    lg_handle_encode(b, &h);
    put("fuzz_handle", "nic-names", b, LG_HANDLE_SIZE);
    struct lg_handle set = h;
    set.flags |= LG_HANDLE_F_SET;
    set.nmore = 2;
    set.more_ip[0] = inet_addr("198.18.2.1"), set.more_port[0] = 40002;
    set.more_ip[1] = inet_addr("198.18.3.1"), set.more_port[1] = 40003;
    lg_handle_encode(b, &set);
    put("fuzz_handle", "backup-set", b, LG_HANDLE_SIZE);
    memset(h.nic, 0, sizeof(h.nic));
    h.flags = 0;
    h.ip[1] = 0, h.port[1] = 0;
    lg_handle_encode(b, &h);
    put("fuzz_handle", "no-backup", b, LG_HANDLE_SIZE);
    lg_handle_stage_set(b, (void *)(uintptr_t)0x7f0000001000ull);
    put("fuzz_handle", "stage-set", b, LG_HANDLE_SIZE);
    lg_handle_encode(b, &h);
    lg_put16(b + 4, LG_HANDLE_VERSION + 1);
    put("fuzz_handle", "next-version", b, LG_HANDLE_SIZE);
}

static void put_wire(const char *name, uint8_t sel, const uint8_t *b, size_t n)
{
    uint8_t out[1 + 256];
    out[0] = sel;
    memcpy(out + 1, b, n);
    put("fuzz_wire", name, out, 1 + n);
}

static void seeds_wire(void)
{
    uint8_t b[256];
    lg_hello_encode(b, &(struct lg_hello){.flags = LG_HELLO_F_SESSION, .conn_nonce = 5});
    put_wire("hello-session", 0, b, LG_HELLO_SIZE);
    struct lg_hello h = {.path = 0, .stream = 1, .nstreams = 2, .paths_mask = 3,
                         .transport = LG_TRANSPORT_TCP, .blob = 524288,
                         .listen_id = 0x1122334455667788ull,
                         .conn_nonce = 0x99aabbccddeeff00ull, .session = 5, .chan = 1};
    lg_hello_encode(b, &h);
    put_wire("hello-data", 0, b, LG_HELLO_SIZE);
    h.path = 1, h.stream = 2, h.flags = LG_HELLO_F_REJOIN, h.gen = 3;
    lg_hello_encode(b, &h);
    put_wire("hello-rejoin", 0, b, LG_HELLO_SIZE);
    h.flags = 0, h.transport = LG_TRANSPORT_INNER, h.blob = 0;
    h.nstreams = LG_MAX_STREAMS, h.stream = LG_MAX_STREAMS;
    lg_hello_encode(b, &h);
    put_wire("hello-wrap-max-streams", 0, b, LG_HELLO_SIZE);

    static const struct { const char *name; struct lg_ctrl c; } ctrl[] = {
        {"ack", {LG_CTRL_ACK, 0, 0, 17, 1}},
        {"session-hb", {LG_CTRL_HB, 0, 0, 0, 0}},
        {"bye-fence", {LG_CTRL_BYE, LG_BYE_FENCE, 0, 0, 0}},
        {"hb", {LG_CTRL_HB, LG_HB_NIC_DOWN | LG_HB_PATH_FAILED(1), 4, 1ull | 2ull << 32, 1}},
        {"switch", {LG_CTRL_SWITCH, 0, 5, 1, 1}},
        {"resync", {LG_CTRL_RESYNC, 1, 5, 12, 1}},
        {"ready", {LG_CTRL_READY, 0, 0, 2, 1}},
        {"inner", {LG_CTRL_INNER, LG_INNER_PARTS - 1, 2, 0x0807060504030201ull, 1}},
        {"hb-epoch-max", {LG_CTRL_HB, 0, UINT32_MAX, 0, 1}},
    };
    for (size_t i = 0; i < sizeof(ctrl) / sizeof(ctrl[0]); i++) {
        char name[64];
        lg_ctrl_encode(b, &ctrl[i].c);
        snprintf(name, sizeof(name), "ctrl-%s", ctrl[i].name);
        put_wire(name, 1, b, LG_CTRL_SIZE);
    }

    static const struct { const char *name; struct lg_chunk_hdr h; } chunks[] = {
        {"first", {1, 524288, 7, 0, 1048576 + 3, 1, 0}},
        {"last", {1, 3, 7, 1048576, 1048576 + 3, 1, 0}},
        {"empty", {0, 0, 0, 0, 0, 0, 0}},
        {"whole", {2, 100, 3, 0, 100, 9, 0}},
    };
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        char name[64];
        lg_chunk_encode(b, &chunks[i].h);
        lg_put32(b + LG_CHUNK_HDR_SIZE, 524288);     /* max_len */
        lg_put32(b + LG_CHUNK_HDR_SIZE + 4, 524288); /* chunk size */
        snprintf(name, sizeof(name), "chunk-%s", chunks[i].name);
        put_wire(name, 2, b, LG_CHUNK_HDR_SIZE + 8);
    }

    /* Window: base 0, then seq offsets (+16 is the base itself). */
    uint8_t w[8 + 80] = {0};
    for (int i = 0; i < 70; i++)
        w[8 + i] = 16; /* in order */
    put_wire("seqwin-in-order", 3, w, 8 + 70);
    for (int i = 0; i < 64; i++)
        w[8 + i] = (uint8_t)(16 + 63 - i); /* the whole window backwards, then it slides */
    put_wire("seqwin-reverse", 3, w, 8 + 64);
    lg_put64(w, UINT64_MAX);
    w[8] = 17, w[9] = 17, w[10] = 16, w[11] = 0, w[12] = 16 + 64;
    put_wire("seqwin-dup-below-beyond-high-base", 3, w, 8 + 5);
}

/* A params record: setting index, 2-byte length, value (or one byte repeated: 0x80). */
static size_t param_rec(uint8_t *out, const char *env, const char *value, int repeat)
{
    int idx = 0;
    while (idx < lg_param_count && strcmp(lg_param_table[idx].env, env))
        idx++;
    size_t len = repeat ? (size_t)repeat : strlen(value);
    out[0] = (uint8_t)(idx | (repeat ? 0x80 : 0));
    lg_put16(out + 1, (uint16_t)len);
    if (repeat) {
        out[3] = (uint8_t)value[0];
        return 4;
    }
    memcpy(out + 3, value, len);
    return 3 + len;
}

static void seeds_params(void)
{
    uint8_t b[4096];
    size_t n = 0;
    for (int i = 0; i < lg_param_count; i++)
        n += param_rec(b + n, lg_param_table[i].env, lg_param_table[i].def, 0);
    put("fuzz_params", "all-defaults", b, n);
    n = param_rec(b, "LINKGUARD_PAIRS", "a", 4089); /* issue #16, finding 4 */
    put("fuzz_params", "pairs-4089", b, n);
    n = param_rec(b, "LINKGUARD_PAIRS", "a", 3000);
    n += param_rec(b + n, "LGTCP_IFS", "b", 1095);
    n += param_rec(b + n, "LINKGUARD_INNER", "c", 4);
    put("fuzz_params", "strings-fill-the-buffer", b, n);
    n = param_rec(b, "LINKGUARD_CHUNK_SIZE", "64MiB", 0);
    n += param_rec(b + n, "LINKGUARD_INLINE_SEND", "16m", 0);
    n += param_rec(b + n, "LINKGUARD_STREAMS", " 16", 0);
    n += param_rec(b + n, "LINKGUARD_BACKUP", "off", 0);
    put("fuzz_params", "limits", b, n);
    n = param_rec(b, "LINKGUARD_CHUNK_SIZE", "9999999999999999999G", 0);
    n += param_rec(b + n, "LINKGUARD_STREAMS", "17", 0);
    n += param_rec(b + n, "LINKGUARD_THREADS", "-1", 0);
    n += param_rec(b + n, "LINKGUARD_BACKUP", "maybe", 0);
    n += param_rec(b + n, "LINKGUARD_SOCK_SNDBUF", "-4K", 0);
    put("fuzz_params", "bad-values", b, n);
}

/* Interfaces for fuzz_devices: flags (1 up, 2 loopback, 4 address, 8 backups on), name. */
static size_t dev_if(uint8_t *out, uint8_t flags, const char *name)
{
    size_t len = strlen(name);
    out[0] = flags;
    out[1] = (uint8_t)len;
    memcpy(out + 2, name, len);
    return 2 + len;
}

static void seeds_devices(void)
{
    /* The pairs spec, then after a NUL the LINKGUARD_IFNAME list (sizeof - 1: both). */
    static const struct { const char *name, *spec; size_t len; } specs[] = {
        {"two-pairs", "rail0:rail1,rail1:rail0", 0},
        {"spaces-no-backup", " rail0 ,\track1\t", 0},
        {"paired-with-itself", "rail0:rail0", 0},
        {"unknown-and-no-address", "rail9:rail1,lo:nolink", 0},
        {"empty-entries", ",:,rail0:", 0},
        {"too-long-name", "rail0:abcdefghijklmnopq", 0},
        {"ifname-prefix", "\0rail", sizeof("\0rail") - 1},
        {"ifname-exclude-exact", "\0^=rail1,,rack1", sizeof("\0^=rail1,,rack1") - 1},
        {"ifname-exclude-only", "\0^", sizeof("\0^") - 1},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        uint8_t b[256];
        size_t n = 0;
        b[n++] = 5;
        n += dev_if(b + n, 1 | 4 | 8, "rail0");
        n += dev_if(b + n, 1 | 4, "rail1");
        n += dev_if(b + n, 1 | 4, "rack1");
        n += dev_if(b + n, 1 | 2 | 4, "lo");
        n += dev_if(b + n, 1, "nolink");
        size_t len = specs[i].len ? specs[i].len : strlen(specs[i].spec);
        memcpy(b + n, specs[i].spec, len);
        put("fuzz_devices", specs[i].name, b, n + len);
    }
}

/* A control file as the daemon's writer makes it, read back as bytes. */
static void shm_seed(const char *name, uint32_t capacity, uint32_t slots, uint64_t first_seq,
                     uint32_t count, int events)
{
    char path[] = "/tmp/lg-fuzz-seed-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    close(fd);
    int err = 0;
    struct lg_shm_writer *w = lg_shm_writer_create(path, capacity, slots, first_seq, &err);
    if (!w) {
        fprintf(stderr, "lg_shm_writer_create: %d\n", err);
        exit(1);
    }
    static struct lg_shm_nic nics[LG_SHM_MAX_NICS];
    memset(nics, 0, sizeof(nics));
    for (uint32_t i = 0; i < count; i++) {
        snprintf(nics[i].name, sizeof(nics[i].name), "rail%u", i);
        nics[i].state = i == 1 ? LG_NIC_DOWN : LG_NIC_UP;
        nics[i].reason = i == 1 ? LG_REASON_CARRIER_LOST : LG_REASON_STARTUP;
        nics[i].epoch = i + 1;
        nics[i].backup_index = count > 1 ? (int32_t)((i + 1) % count) : LG_NO_BACKUP;
        nics[i].n_ipv4 = 1;
        nics[i].ipv4[0] = htonl(0xc6120001u + (i << 8));
        snprintf(nics[i].pci_path, sizeof(nics[i].pci_path), "/sys/devices/pci0000:00/0000:00:0%u.0", i);
    }
    lg_shm_writer_update(w, nics, count);
    for (int e = 0; e < events; e++) {
        struct lg_shm_event ev = {.nic_index = (uint32_t)e % (count ? count : 1),
                                  .old_state = LG_NIC_UP, .new_state = LG_NIC_DOWN,
                                  .reason = LG_REASON_CARRIER_LOST};
        snprintf(ev.name, sizeof(ev.name), "rail%u", ev.nic_index);
        lg_shm_writer_push_event(w, &ev);
    }
    lg_shm_writer_heartbeat(w, 1000000000ull);
    lg_shm_writer_close(w, 0);
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    unlink(path);
    put("fuzz_shm", name, buf, n);
}

/* fuzz_conn scripts (the operations of fuzz/fuzz_conn.c): the honest protocol and each
 * lie of issue #16. */
enum { OP_POST, OP_TEST, OP_WAIT, OP_FRAME, OP_CHUNK, OP_RAW, OP_SHUTDOWN };
enum { CFG_SEND = 1, CFG_BACKUP = 2, CFG_TWO_STREAMS = 4, CFG_CHUNK_4096 = 3 << 3 };
/* op_frame's first byte: path, the frame type's index in its table, "honest" (bit 7). */
#define FRAME(path, type_index, honest) ((uint8_t)((path) | (type_index) << 1 | (honest) << 7))
enum { F_ACK, F_RESYNC, F_HB, F_SWITCH };
enum { E_SWITCH, E_NEXT, E_COMMITTED, E_FAR, E_MAX };    /* pick_epoch */
enum { N_POSTED, N_ACKED_1, N_ACKED, N_BEYOND };          /* pick_count */

static void conn_seed(const char *name, const uint8_t *b, size_t n)
{
    put("fuzz_conn", name, b, n);
}
#define CONN_SEED(name, ...)                                     \
    do {                                                         \
        static const uint8_t b_[] = {__VA_ARGS__};               \
        conn_seed(name, b_, sizeof(b_));                         \
    } while (0)

static void seeds_conn(void)
{
    /* A receive's OP_POST: the group byte (buffers 1 + (g & 3) % 3, tag of buffer b at bit
     * 2 + b), then each buffer's size; a send's: its size. */
    CONN_SEED("recv-two-chunks", 0, OP_POST, 0, 100, 0, OP_CHUNK, 0, 0, 0, OP_CHUNK, 0, 0, 1,
              OP_WAIT, 10, OP_TEST);
    CONN_SEED("send-acked", CFG_SEND, OP_POST, 100, 0, OP_WAIT, 5,
              OP_FRAME, FRAME(0, F_ACK, 0), 0, E_COMMITTED, N_POSTED, OP_WAIT, 5);
    CONN_SEED("send-switch-resync", CFG_SEND | CFG_BACKUP, OP_POST, 64, 0,
              OP_FRAME, FRAME(0, F_HB, 0), 2 /* NIC 0 DOWN */, E_COMMITTED, N_ACKED,
              OP_FRAME, FRAME(1, F_HB, 0), 2, E_COMMITTED, N_ACKED, OP_WAIT, 19,
              OP_FRAME, FRAME(1, F_RESYNC, 1), 0, E_SWITCH, N_ACKED, OP_WAIT, 10,
              OP_FRAME, FRAME(1, F_ACK, 0), 0, E_COMMITTED, N_POSTED, OP_WAIT, 10);
    CONN_SEED("recv-switch", CFG_BACKUP, OP_POST, 0, 64, 0,
              OP_FRAME, FRAME(1, F_SWITCH, 1), 0, E_NEXT, OP_WAIT, 19,
              OP_CHUNK, 1, 0, 0, OP_WAIT, 10);
    /* Issue #16, finding 1: stream 1 stops inside chunk 0; stream 2 sends it whole twice. */
    CONN_SEED("lie-overlapping-chunks", CFG_TWO_STREAMS, OP_POST, 0, 128, 0,
              OP_CHUNK, 0x20, 0, 0, 10, OP_CHUNK, 2, 0, 0, OP_CHUNK, 2, 0, 0, OP_WAIT, 10,
              OP_RAW, 2, 54);
    /* Finding 2: an ACK for a message still being written. */
    CONN_SEED("lie-early-ack", CFG_SEND | CFG_CHUNK_4096, OP_POST, 0xff, 0xff, OP_WAIT, 2,
              OP_FRAME, FRAME(0, F_ACK, 0), 0, E_COMMITTED, N_ACKED_1, OP_WAIT, 10);
    /* Finding 3: a RESYNC below what was acknowledged. */
    CONN_SEED("lie-resync-below-acked", CFG_SEND | CFG_BACKUP, OP_POST, 64, 0, OP_WAIT, 2,
              OP_FRAME, FRAME(0, F_ACK, 0), 0, E_COMMITTED, N_POSTED, OP_WAIT, 5,
              OP_POST, 64, 0,
              OP_FRAME, FRAME(0, F_HB, 0), 2, E_COMMITTED, N_ACKED,
              OP_FRAME, FRAME(1, F_HB, 0), 2, E_COMMITTED, N_ACKED, OP_WAIT, 19,
              OP_FRAME, FRAME(1, F_RESYNC, 1), 0, E_SWITCH, 5 /* any */, 0, 0, 0, 0, 0, 0, 0, 0,
              OP_WAIT, 10);
    /* Finding 5: epochs of 0xffffffff in a heartbeat and in a SWITCH. */
    CONN_SEED("lie-heartbeat-epoch-max", CFG_SEND | CFG_BACKUP, OP_POST, 64, 0,
              OP_FRAME, FRAME(1, F_HB, 0), 0, E_MAX, N_ACKED, OP_WAIT, 10);
    CONN_SEED("lie-switch-epoch-max", CFG_BACKUP, OP_POST, 0, 64, 0,
              OP_FRAME, FRAME(1, F_SWITCH, 1), 0, E_MAX, OP_WAIT, 10);
    /* A grouped receive of 3 buffers, tags 0, 1, 0, of 100, 50 and 0 bytes: message 1 (tag 1)
     * and 2 (tag 0, so it waits for message 0's tag) on stream 2, message 0 on stream 1. */
    CONN_SEED("recv-group-tags", CFG_TWO_STREAMS, OP_POST, 2 | 1 << 3, 100, 0, 50, 0, 0, 0,
              OP_CHUNK, 0x42, 1, 0, OP_CHUNK, 0x02, 2, 0, OP_CHUNK, 0, 0, 0, OP_CHUNK, 0, 0, 1,
              OP_WAIT, 10, OP_TEST);
    /* The chunks of one message of a group with two tags (a lie). */
    CONN_SEED("lie-group-tags-disagree", CFG_TWO_STREAMS, OP_POST, 1 | 1 << 3, 100, 0, 50, 0,
              OP_CHUNK, 0, 0, 0, OP_CHUNK, 0x40, 0, 1, OP_WAIT, 10, OP_TEST);
    CONN_SEED("send-path-lost", CFG_SEND | CFG_BACKUP | CFG_TWO_STREAMS, OP_POST, 0, 2,
              OP_SHUTDOWN, 0, OP_WAIT, 19, OP_TEST);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    seeds_handle();
    seeds_wire();
    seeds_params();
    seeds_devices();
    seeds_conn();
    shm_seed("two-nics-three-events", 4, 8, 1, 2, 3);
    shm_seed("ring-lapped", 2, 4, 1, 2, 11);
    shm_seed("seq-near-2-32", 1, 2, (1ull << 32) - 1, 1, 3);
    shm_seed("empty-table", 2, 2, 1, 0, 0);
    return 0;
}
