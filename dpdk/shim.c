/* See shim.h: the static-inline fast path of DPDK, out of line. */
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "shim.h"

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

char *inagg_pktmbuf_mtod(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, char *);
}

uint16_t inagg_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
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

uint16_t inagg_mbuf_refcnt_read(const struct rte_mbuf *m)
{
	return rte_mbuf_refcnt_read(m);
}

void inagg_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value)
{
	rte_mbuf_refcnt_update(m, value);
}

int inagg_errno(void)
{
	return rte_errno;
}
