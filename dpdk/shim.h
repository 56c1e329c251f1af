/*
 * Out-of-line copies of DPDK's static-inline fast path, which bindgen cannot
 * bind: the Rust side calls these. Each is a one-line forward to the inline
 * function of the same name without the "inagg_" prefix.
 */
#ifndef INAGG_DPDK_SHIM_H
#define INAGG_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

uint16_t inagg_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t inagg_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *inagg_pktmbuf_alloc(struct rte_mempool *pool);
int inagg_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned count);
void inagg_pktmbuf_free(struct rte_mbuf *m);
void inagg_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count);
char *inagg_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
uint16_t inagg_pktmbuf_tailroom(const struct rte_mbuf *m);
uint16_t inagg_mbuf_nb_segs(const struct rte_mbuf *m);
void inagg_pktmbuf_reset(struct rte_mbuf *m);
int inagg_errno(void);
unsigned inagg_lcore_id(void);

#endif
