/* sock.h: socket helpers shared by the TCP transport and the control links. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_SOCK_H
#define FTCC_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Addresses are text, as published through membership: "host:port", with an
 * IPv6 host in brackets ("[::1]:4000"). Every socket made here is
 * nonblocking and close-on-exec. Functions return 0 or a negative FT_E*
 * code and log nothing unless they say so.
 */

/* A resolved peer address. */
struct ft__sock_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/*
 * Options set on a connected socket (TCP_NODELAY always). A peer whose host
 * vanishes without a FIN or RST is found by the kernel only through these
 * two (else after about 15 minutes of retransmissions, or never on an idle
 * link), which is why they follow the configured timeouts (config.c,
 * ft__config_data_link_timeouts, and ctl.c).
 */
struct ft__sock_opts {
	/* Keepalive: an idle link (nothing in flight) whose peer's kernel stops
	 * answering probes fails about this long after the peer's last word. A
	 * live peer's kernel answers them whatever its process does, so this can
	 * be short. 0: no keepalive. */
	int keepalive_ms;
	/* TCP_USER_TIMEOUT: data left unacknowledged this long fails the link,
	 * and so does a window the peer keeps closed this long, its zero-window
	 * probes answered or not (recent kernels; measured on 6.18): a live peer
	 * that does not read for that long loses the link. 0: the kernel's
	 * default. */
	int user_timeout_ms;
	size_t buffer;          /* SO_SNDBUF and SO_RCVBUF; 0: the kernel's autotuning */
};

/*
 * Segments the kernel received out of order on connected TCP socket fd
 * (tcp_info's tcpi_rcv_ooopack, Linux 5.4 and later): bytes that arrived
 * but wait, unreadable, behind a lost one being retransmitted. A count
 * that grows says the peer is alive and sending even while its reader
 * sees nothing. 0, or -ENOTSUP (an older kernel), or -errno.
 */
int ft__sock_rcv_ooo(int fd, uint32_t *count);

/* Keepalive in the kernel's units (whole seconds; a count of probes). */
struct ft__sock_keepalive {
	int idle_s;             /* TCP_KEEPIDLE: silence before the first probe */
	int intvl_s;            /* TCP_KEEPINTVL: between probes */
	int cnt;                /* TCP_KEEPCNT: unanswered probes that fail the link */
};

/*
 * Probes that give up on a silent peer idle_s + cnt * intvl_s seconds after
 * its last word: dead_ms rounded up to whole seconds, at least 2 s (the
 * shortest idle and interval are 1 s each) and at most 65532 s (18 h: the
 * kernel takes no longer idle time). Up to 3 probes, spread over the second
 * half of that time, so one lost probe fails nothing.
 */
void ft__sock_keepalive_for(int dead_ms, struct ft__sock_keepalive *k);

/*
 * Where a rank listens and what it publishes, chosen once per communicator
 * (docs/launchers.md, "Across hosts") and given to the transports and the control
 * links alike. bind_host (FTCC_BIND_HOST) is:
 *   ""            loopback when every rank is on this host (local), else
 *                 the address of the interface that reaches the peers:
 *                 the source address the kernel picks toward the first of
 *                 `toward` that routes (a connected UDP socket: nothing is
 *                 sent), else toward the default route, else the first up
 *                 non-loopback interface's IPv4 address;
 *   a wildcard    ("0.0.0.0", "::", "*"): listen on every interface, publish
 *                 the address "" would choose, never the wildcard;
 *   an interface  (e.g. "eth0"): its IPv4 address, else its first IPv6
 *                 address that is not link-local;
 *   anything else an address or host name, as given.
 * local: 1 every rank is on this host, 0 not, -1 not known (then: local
 * when every entry of toward is a loopback address, or toward is empty).
 * toward: comma-separated host:port ("[v6]:port") of peers or of the
 * launcher, most telling first; NULL or "" for none.
 * 0, or -FT_ECONFIG (with an error logged) when bind_host names an
 * interface without a usable address or a wildcard nothing can replace.
 */
struct ft__sock_host {
	char listen[64];        /* to bind: an address, a host name or a wildcard */
	char publish[64];       /* the concrete address peers reach; "": the bound one */
	const char *why;        /* how it was chosen, for the log (a static string) */
};
int ft__sock_choose_host(const char *bind_host, int local, const char *toward,
			 struct ft__sock_host *out);
/* Whether a host text (no port) is a wildcard address ("0.0.0.0", "::", "*"). */
bool ft__sock_is_wildcard(const char *host);
/*
 * Listens on bind_host (NULL or "": 127.0.0.1) at a port the kernel picks
 * and writes the address to publish into addr: publish_host with that port,
 * or (publish_host NULL or "") the bound address. who names the caller in
 * the error it logs. -FT_EINVAL: bind_host does not resolve, or a wildcard
 * with no publish_host; -FT_EIO otherwise.
 */
int ft__sock_listen(const char *who, const char *bind_host, const char *publish_host, int backlog,
		    int *fd, char *addr, size_t addrlen);
/* The same at a given port ("0": the kernel picks); -FT_EBUSY: the port is taken.
 * The listeners and ft__sock_connect's sockets are the caller's to register
 * with ft__fd_own (fdreg.h): the library's own, a server's not. */
int ft__sock_listen_port(const char *who, const char *bind_host, const char *publish_host,
			 const char *port, int backlog, int *fd, char *addr, size_t addrlen);
/*
 * Hands fd, a socket bound and listening, to the next ft__sock_listen_port
 * asked for its very address (host and given port), which takes it over
 * instead of binding a new one; -FT_EBUSY if one is held already. unhold
 * takes it back if nothing took it (-1 if something did).
 */
int ft__sock_hold(int fd);
int ft__sock_unhold(void);
/*
 * Listens on host (NULL or "": every IPv4 interface, publishing this host's
 * name) at port (a number; "0": the kernel picks); for a server whose port
 * is given (ftcc-run --store).
 */
int ft__sock_listen_at(const char *who, const char *host, const char *port, int backlog, int *fd,
		       char *addr, size_t addrlen);
/* Splits "host:port" or "[v6]:port" (brackets removed); -FT_EINVAL if malformed or too long. */
int ft__sock_split(const char *addr, char *host, size_t hlen, char *port, size_t plen);
/* Resolves a numeric-port address; -FT_EINVAL when it is malformed or does not resolve. */
int ft__sock_resolve(const char *addr, struct ft__sock_addr *out);
/*
 * One connection attempt to `to`, tuned with opts before connecting (buffer
 * sizes must precede the handshake to take effect), waiting for the kernel
 * up to deadline_ms (a ft__now_ms() value). 0 and *fd; -FT_ECONNREFUSED,
 * -FT_ETIMEDOUT, -FT_EPEERFAILED when the peer cannot be reached; -FT_EIO
 * when no socket could be made (retrying will not help).
 */
int ft__sock_connect(const struct ft__sock_addr *to, const struct ft__sock_opts *opts,
		     int64_t deadline_ms, int *fd);
void ft__sock_tune(int fd, const struct ft__sock_opts *opts);
/* Writes all of buf to a nonblocking socket before deadline_ms (SIGPIPE never raised). */
int ft__sock_write_full(int fd, const void *buf, size_t len, int64_t deadline_ms);
/* The FT_E* code (negative) for a socket errno. */
int ft__sock_error(int err);

#endif
