/* The shape of a grouped-receive workload, shared by lg_nccl_driver --grouped and the
 * in-process tests (tests/lg_test_grouped.h): group g posts n = 1 + g % 8 buffers of mixed
 * sizes (0 bytes, 1, a few KiB, the largest) and tags (n > 5 repeats some), most of them
 * larger than what is sent into them; the sender posts the group's sends in another order,
 * highest tag first and same-tag sends in buffer order, since the k-th send with tag T fills
 * the k-th buffer posted with tag T (as NCCL's IB transport matches them). */
#ifndef LG_GROUPED_SHAPE_H
#define LG_GROUPED_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#define LG_GROUP_MAXN 8

static inline int lg_group_n(uint64_t g) { return 1 + (int)(g % LG_GROUP_MAXN); }

/* Buffer i of group g, with sends of at most `max` bytes into buffers of at most `capmax`:
 * the size posted, the size sent into it, its tag. */
static inline void lg_group_shape(uint64_t g, int i, size_t max, size_t capmax, size_t *cap,
                                  size_t *sz, int *tag)
{
    const size_t sizes[] = {0, 1, 4096, max / 7 + 1, max, 100, max / 2 + 1, 7, max / 3};
    size_t s = sizes[(g * 5 + (uint64_t)i * 3) % (sizeof(sizes) / sizeof(sizes[0]))];
    s = s < max ? s : max;
    size_t c = (g + (uint64_t)i) % 3 == 0 ? s : s + 1 + s % 4096;
    *sz = s;
    *cap = c < capmax ? c : capmax;
    *tag = 100 + (int)((g + (uint64_t)i * 2) % 5);
}

/* The buffer that the k-th send of group g fills. */
static inline int lg_group_order(uint64_t g, int k)
{
    int n = lg_group_n(g), idx[LG_GROUP_MAXN], tags[LG_GROUP_MAXN];
    for (int i = 0; i < n; i++) {
        size_t c, s;
        lg_group_shape(g, i, 1, 1, &c, &s, &tags[i]);
        idx[i] = i;
    }
    for (int a = 1; a < n; a++) /* stable insertion sort by tag, descending */
        for (int b = a; b > 0 && tags[idx[b - 1]] < tags[idx[b]]; b--) {
            int t = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = t;
        }
    return idx[k];
}

#endif
