/* provider.c: which libfabric provider and endpoint type a transport opens. */
/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "sock.h"

static bool is_loopback(const char *h)
{
	return strncmp(h, "127.", 4) == 0 || strcmp(h, "::1") == 0 || strcmp(h, "localhost") == 0;
}

/*
 * Whether every rank runs on this host, as far as we can tell: the
 * launcher's count of ranks on this host is the world size; without a
 * launcher, whether ranks listen on loopback only.
 */
static bool one_host(const struct ft__tp_params *p)
{
	if (p->env->local_ranks > 0)
		return p->env->local_ranks == p->env->world_size;
	return p->bind_host == NULL || p->bind_host[0] == '\0' || is_loopback(p->bind_host);
}

static struct fi_info *make_hints(enum fi_ep_type type, const char *prov, bool rm)
{
	struct fi_info *h = fi_allocinfo();

	if (h == NULL)
		return NULL;
	h->caps = (type == FI_EP_RDM ? FI_TAGGED : FI_MSG) | FI_SEND | FI_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = type;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->resource_mgmt = rm ? FI_RM_ENABLED : FI_RM_UNSPEC;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	if (prov != NULL && (h->fabric_attr->prov_name = strdup(prov)) == NULL) {
		fi_freeinfo(h);
		return NULL;
	}
	return h;
}

/* fi_getinfo for one endpoint type; with exact, only a provider named prov;
 * with no_shm, no shared-memory provider (ranks on several hosts). */
static struct fi_info *get_info(enum fi_ep_type type, const char *prov, bool exact,
				const char *node, bool no_shm)
{
	struct fi_info *list = NULL, *pick = NULL;

	for (int rm = 1; rm >= 0 && list == NULL; rm--) {
		struct fi_info *hints = make_hints(type, prov, rm != 0);
		if (hints == NULL)
			return NULL;
		if (fi_getinfo(FI_VERSION(1, 9), node, NULL, node != NULL ? FI_SOURCE : 0, hints,
			       &list) != 0)
			list = NULL;
		fi_freeinfo(hints);
	}
	for (struct fi_info *i = list; i != NULL && pick == NULL; i = i->next)
		if ((!exact || prov == NULL || strcmp(i->fabric_attr->prov_name, prov) == 0) &&
		    !(no_shm && strcmp(i->fabric_attr->prov_name, "shm") == 0))
			pick = i;
	if (pick != NULL)
		pick = fi_dupinfo(pick);
	fi_freeinfo(list);
	return pick;
}

static bool ip_format(uint32_t f)
{
	return f == FI_SOCKADDR || f == FI_SOCKADDR_IN || f == FI_SOCKADDR_IN6;
}

/*
 * The provider comes from FTCC_FABRIC_PROVIDER or FI_PROVIDER (as config.c
 * read them); unset, shm when every rank is on this host, else fi_getinfo's
 * first answer. RDM is tried first; a plain provider name that only layered
 * RDM providers match ("tcp" gives "tcp;ofi_rxm") selects that provider's
 * MSG endpoints when it has them. FTCC_FABRIC_EP=rdm|msg forces the type.
 */
struct fi_info *ft__fab_choose_info(const struct ft__tp_params *p)
{
	const char *req = p->env->fabric_provider, *ept = p->env->fabric_ep;
	const char *want, *node;
	bool explicit, try_rdm, try_msg;
	struct fi_info *rdm = NULL, *pick = NULL;

	explicit = req[0] != '\0';
	want = explicit ? req : (one_host(p) ? "shm" : NULL);
	try_rdm = strcmp(ept, "msg") != 0;
	try_msg = strcmp(ept, "rdm") != 0;
	for (int attempt = 0; attempt < 2 && pick == NULL; attempt++) {
		if (try_rdm) {
			rdm = get_info(FI_EP_RDM, want, false, NULL, !explicit && !one_host(p));
			if (rdm != NULL && (want == NULL || strcmp(rdm->fabric_attr->prov_name, want) == 0)) {
				pick = rdm;
				rdm = NULL;
			}
		}
		if (pick == NULL && try_msg && (want == NULL || strchr(want, ';') == NULL))
			pick = get_info(FI_EP_MSG, want, true, NULL, false);
		if (pick == NULL) {
			pick = rdm;
			rdm = NULL;
		}
		fi_freeinfo(rdm);
		rdm = NULL;
		if (explicit || want == NULL)
			break;
		want = NULL; /* shm is not there: take what there is */
	}
	if (pick == NULL)
		return NULL;
	/* IP providers listen where the tcp transport would, but on one address:
	 * the endpoint's name is what peers connect to, so never a wildcard */
	node = p->publish_host != NULL && p->publish_host[0] != '\0' ? p->publish_host
	       : p->bind_host != NULL && p->bind_host[0] != '\0' && !ft__sock_is_wildcard(p->bind_host)
		       ? p->bind_host
		       : "127.0.0.1";
	if (ip_format(pick->addr_format)) {
		char prov[64];
		snprintf(prov, sizeof(prov), "%s", pick->fabric_attr->prov_name);
		struct fi_info *bound = get_info(pick->ep_attr->type, prov, true, node, false);
		if (bound != NULL) {
			fi_freeinfo(pick);
			pick = bound;
		} else {
			ft__warn("fabric: provider %s cannot bind %s; using its default address",
				 prov, node);
		}
	}
	return pick;
}
