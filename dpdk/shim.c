/* See shim.h: the static-inline fast path of DPDK, out of line. */
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_lcore.h>

#include "shim.h"

/*
 * src/mbuf.rs reads these fields of struct rte_mbuf directly (a call per
 * field on every packet cost more than the work done on it): the build
 * fails here if the layout it assumes is not the installed DPDK's.
 */
#include <stddef.h>
_Static_assert(offsetof(struct rte_mbuf, buf_addr) == 0, "rte_mbuf.buf_addr moved: update src/mbuf.rs");
_Static_assert(offsetof(struct rte_mbuf, data_off) == 16, "rte_mbuf.data_off moved: update src/mbuf.rs");
_Static_assert(offsetof(struct rte_mbuf, refcnt) == 18, "rte_mbuf.refcnt moved: update src/mbuf.rs");
_Static_assert(sizeof(((struct rte_mbuf *)0)->refcnt) == 2, "rte_mbuf.refcnt is not 16 bits: update src/mbuf.rs");
_Static_assert(offsetof(struct rte_mbuf, data_len) == 40, "rte_mbuf.data_len moved: update src/mbuf.rs");

uint16_t inagg_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t inagg_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *inagg_pktmbuf_alloc(struct rte_mempool *pool)
{
	return rte_pktmbuf_alloc(pool);
}

int inagg_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned count)
{
	return rte_pktmbuf_alloc_bulk(pool, mbufs, count);
}

void inagg_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void inagg_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count)
{
	rte_pktmbuf_free_bulk(mbufs, count);
}

char *inagg_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}



uint16_t inagg_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

uint16_t inagg_mbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

void inagg_pktmbuf_reset(struct rte_mbuf *m)
{
	rte_pktmbuf_reset(m);
}



int inagg_errno(void)
{
	return rte_errno;
}

unsigned inagg_lcore_id(void)
{
	return rte_lcore_id();
}
