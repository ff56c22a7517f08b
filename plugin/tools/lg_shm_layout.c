/* lg_shm_layout: prints, as JSON, the size and offset of every field of the control channel's
 * structs and its constants, so tests/unit/test_shm_layout.py can compare them with the Python
 * mirror (daemon/linkguardd/shm/layout.py). Adding a field to linkguard_shm.h means adding a line
 * here; the test fails on any field Python has and C does not print, or the reverse. */
#include "linkguard_shm.h"

#include <stdio.h>

static int lg_first; /* no comma before the first item of an object */

static void lg_obj_open(const char *name)
{
    printf("%s\n  \"%s\": {", lg_first ? "" : ",", name);
    lg_first = 1;
}

static void lg_obj_close(void)
{
    printf("\n  }");
    lg_first = 0;
}

static void lg_item(const char *name, unsigned long long v)
{
    printf("%s\n    \"%s\": %llu", lg_first ? "" : ",", name, v);
    lg_first = 0;
}

static void lg_item_signed(const char *name, long long v)
{
    printf("%s\n    \"%s\": %lld", lg_first ? "" : ",", name, v);
    lg_first = 0;
}

static void lg_item_str(const char *name, const char *v)
{
    printf("%s\n    \"%s\": \"%s\"", lg_first ? "" : ",", name, v);
    lg_first = 0;
}

static void lg_field(const char *name, size_t offset, size_t size)
{
    printf("%s\n    \"%s\": [%zu, %zu]", lg_first ? "" : ",", name, offset, size);
    lg_first = 0;
}

/* "field": [offset, size] */
#define F(type, f) lg_field(#f, offsetof(struct type, f), sizeof(((struct type *)0)->f))
#define C(name) lg_item(#name, (unsigned long long)(name))

int main(void)
{
    lg_first = 1;
    printf("{");

    lg_obj_open("sizes");
    lg_item("lg_shm_header", sizeof(struct lg_shm_header));
    lg_item("lg_shm_nic", sizeof(struct lg_shm_nic));
    lg_item("lg_shm_event", sizeof(struct lg_shm_event));
    lg_item("lg_shm_reader", sizeof(struct lg_shm_reader));
    lg_item("lg_shm_snapshot", sizeof(struct lg_shm_snapshot));
    lg_obj_close();

    lg_obj_open("lg_shm_header");
    F(lg_shm_header, magic);
    F(lg_shm_header, version);
    F(lg_shm_header, compat_version);
    F(lg_shm_header, header_size);
    F(lg_shm_header, nic_size);
    F(lg_shm_header, nic_capacity);
    F(lg_shm_header, event_size);
    F(lg_shm_header, ring_slots);
    F(lg_shm_header, nic_table_offset);
    F(lg_shm_header, ring_offset);
    F(lg_shm_header, total_size);
    F(lg_shm_header, daemon_pid);
    F(lg_shm_header, reserved0);
    F(lg_shm_header, generation);
    F(lg_shm_header, heartbeat_ns);
    F(lg_shm_header, ring_head);
    F(lg_shm_header, nic_count);
    F(lg_shm_header, reserved1);
    F(lg_shm_header, reserved2);
    F(lg_shm_header, daemon_start_ns);
    F(lg_shm_header, daemon_start_monotonic_ns);
    F(lg_shm_header, reserved3);
    lg_obj_close();

    lg_obj_open("lg_shm_nic");
    F(lg_shm_nic, name);
    F(lg_shm_nic, state);
    F(lg_shm_nic, reason);
    F(lg_shm_nic, epoch);
    F(lg_shm_nic, last_change_ns);
    F(lg_shm_nic, backup_index);
    F(lg_shm_nic, flags);
    F(lg_shm_nic, ifindex);
    F(lg_shm_nic, speed_mbps);
    F(lg_shm_nic, rdma_port);
    F(lg_shm_nic, n_ipv4);
    F(lg_shm_nic, ipv4);
    F(lg_shm_nic, n_ipv6);
    F(lg_shm_nic, reserved0);
    F(lg_shm_nic, ipv6);
    F(lg_shm_nic, rdma_dev);
    F(lg_shm_nic, pci_path);
    F(lg_shm_nic, n_backups);
    F(lg_shm_nic, backup_set);
    F(lg_shm_nic, reserved1);
    lg_obj_close();

    lg_obj_open("lg_shm_event");
    F(lg_shm_event, seq);
    F(lg_shm_event, time_ns);
    F(lg_shm_event, epoch);
    F(lg_shm_event, fact_ns);
    F(lg_shm_event, nic_index);
    F(lg_shm_event, old_state);
    F(lg_shm_event, new_state);
    F(lg_shm_event, reason);
    F(lg_shm_event, name);
    lg_obj_close();

    /* The reader-side structs the ctypes binding allocates (not part of the file). */
    lg_obj_open("lg_shm_reader");
    F(lg_shm_reader, base);
    F(lg_shm_reader, size);
    F(lg_shm_reader, hdr);
    F(lg_shm_reader, nics);
    F(lg_shm_reader, ring);
    F(lg_shm_reader, nic_capacity);
    F(lg_shm_reader, ring_mask);
    F(lg_shm_reader, dev);
    F(lg_shm_reader, ino);
    lg_obj_close();

    lg_obj_open("lg_shm_snapshot");
    F(lg_shm_snapshot, generation);
    F(lg_shm_snapshot, nic_count);
    F(lg_shm_snapshot, nics);
    lg_obj_close();

    lg_obj_open("constants");
    C(LG_SHM_MAGIC);
    C(LG_SHM_VERSION);
    C(LG_SHM_COMPAT_VERSION);
    C(LG_SHM_HEADER_SIZE);
    C(LG_SHM_NIC_SIZE);
    C(LG_SHM_EVENT_SIZE);
    C(LG_SHM_MAX_NICS);
    C(LG_SHM_MAX_RING_SLOTS);
    C(LG_NAME_LEN);
    C(LG_RDMA_NAME_LEN);
    C(LG_PCI_PATH_LEN);
    C(LG_MAX_IPV4);
    C(LG_MAX_IPV6);
    C(LG_SHM_MAX_BACKUPS);
    C(LG_NIC_F_PRESENT);
    C(LG_NIC_F_CARRIER);
    C(LG_NIC_F_ADMIN_UP);
    C(LG_NIC_F_RDMA);
    C(LG_NIC_STATE_COUNT);
    C(LG_REASON_COUNT);
    lg_item_signed("LG_NO_BACKUP", LG_NO_BACKUP);
    lg_item_str("LG_SHM_DEFAULT_PATH", LG_SHM_DEFAULT_PATH);
    lg_item_str("LG_SHM_PATH_ENV", LG_SHM_PATH_ENV);
    lg_obj_close();

    lg_obj_open("lg_shm_status");
    C(LG_SHM_OK);
    C(LG_SHM_ENOENT);
    C(LG_SHM_ESHORT);
    C(LG_SHM_EMAGIC);
    C(LG_SHM_EVERSION);
    C(LG_SHM_ELAYOUT);
    C(LG_SHM_EBUSY);
    C(LG_SHM_ESYS);
    C(LG_SHM_ESTALE);
    C(LG_SHM_EUNTRUSTED);
    lg_obj_close();

    printf("\n}\n");
    return 0;
}
