/* tcp_info.c: what the kernel knows of a TCP link that its reader cannot see (kept apart: <linux/tcp.h> and <netinet/tcp.h> cannot share a file). */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/in.h>
#include <linux/tcp.h>

#include "sock.h"

int ft__sock_rcv_ooo(int fd, uint32_t *count)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
		return -errno;
	/* a kernel before 5.4 fills less: no count, no evidence */
	if (len < offsetof(struct tcp_info, tcpi_rcv_ooopack) + sizeof(ti.tcpi_rcv_ooopack))
		return -ENOTSUP;
	*count = ti.tcpi_rcv_ooopack;
	return 0;
}
