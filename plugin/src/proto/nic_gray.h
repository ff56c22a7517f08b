/* Goodput holds per NIC (any thread; the monitor's, in practice): a connection that finds its path on a NIC lossy
 * or slow holds the path off (tcp_watch.c, inner_transport.c) and says so here, and every
 * other connection of the process whose path uses that NIC leaves it too, for as long, even
 * one that sends too little to judge the NIC itself: a lossy optic or a policed port loses
 * the data of every flow through it. Each entry keeps the verdict's words for the switch's
 * log line. */
#ifndef LG_NIC_GRAY_H
#define LG_NIC_GRAY_H

#include <stddef.h>
#include <stdint.h>

#define LG_NIC_GRAY_WHY 160

/* NIC `nic` is held off until `until` (monotonic ns; a later hold of it wins), for `why`
 * (NULL: the words it has). */
void lg_nic_gray_hold(const char *nic, uint64_t until, const char *why);
/* When the hold of `nic` ends (0: none); its words into `why` (if not NULL). */
uint64_t lg_nic_gray_until(const char *nic, char *why, size_t len);
/* Tests: forget every hold. */
void lg_nic_gray_reset(void);

#endif
