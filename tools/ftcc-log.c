/* ftcc-log.c: prints pairwise log journals in human form and verifies them and their payloads. */
/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftcc.h"
#include "jnl.h"

#define JOURNAL_MAX ((size_t)256 << 20)

enum { OK = 0, BAD = 1, FAILED = 2 };

static bool quiet;

static void usage(FILE *f)
{
	fprintf(f, "usage: ftcc-log [-q] JOURNAL.log...\n"
		   "       ftcc-log [-q] --dir DIR --rank R\n"
		   "Prints each record of a pairwise log journal, verifies every record and,\n"
		   "when the .in file beside it exists, the payload against the INPUT record.\n"
		   "-q: only the summary and problems. Exit: 0 all good, 1 corrupt or torn,\n"
		   "2 usage or I/O error. --version: print the version.\n");
}

static const char *type_name(unsigned type)
{
	static const char *const names[] = {"?", "FILE", "BEGIN", "SEND", "RECV", "INPUT", "END"};

	return type < sizeof(names) / sizeof(names[0]) ? names[type] : "?";
}

struct ctx {
	uint64_t at;            /* offset of the record being printed */
	void *regs;             /* a copy of the INPUT body */
	size_t nreg;
	bool nomem;
};

static void print_rec(void *arg, const struct ft__logrec *h, const void *body)
{
	struct ctx *c = arg;
	size_t blen = h->len - sizeof(*h);

	if (h->type == FT__JNL_INPUT) {
		free(c->regs);
		c->regs = malloc(blen ? blen : 1);
		if (c->regs == NULL)
			c->nomem = true;
		else
			memcpy(c->regs, body, blen);
		c->nreg = blen / sizeof(struct ft__logreg);
	}
	if (!quiet) {
		printf("@%-8llu %-5s op=%llu gen=%u", (unsigned long long)c->at, type_name(h->type),
		       (unsigned long long)h->op_seq, h->gen);
		switch (h->type) {
		case FT__JNL_FILE: {
			struct ft__logfile f;
			memcpy(&f, body, sizeof(f));
			printf(" job_hash=%016llx rank=%d world_size=%d slot=%u",
			       (unsigned long long)f.job_hash, f.rank, f.world_size, f.slot);
			break;
		}
		case FT__JNL_BEGIN: {
			struct ft__logop o;
			memcpy(&o, body, sizeof(o));
			printf(" kind=%u dtype=%u op=%u in_place=%u root=%d count=%llu bytes=%llu",
			       o.kind, o.dtype, o.op, o.in_place, o.root, (unsigned long long)o.count,
			       (unsigned long long)h->bytes);
			break;
		}
		case FT__JNL_SEND:
		case FT__JNL_RECV:
			printf(" step=%u seg=%u peer=%d off=%llu len=%llu crc=%08x", h->step, h->seg,
			       h->peer, (unsigned long long)h->off, (unsigned long long)h->bytes,
			       h->data_crc);
			break;
		case FT__JNL_INPUT:
			printf(" bytes=%llu regions=%zu", (unsigned long long)h->bytes,
			       blen / sizeof(struct ft__logreg));
			break;
		}
		printf("\n");
		if (h->type == FT__JNL_INPUT) {
			for (size_t i = 0; i < blen / sizeof(struct ft__logreg); i++) {
				struct ft__logreg r;
				memcpy(&r, (const char *)body + i * sizeof(r), sizeof(r));
				printf("          region off=%llu len=%llu crc=%08x\n",
				       (unsigned long long)r.off, (unsigned long long)r.len, r.crc);
			}
		}
	}
	c->at += h->len;
}

static int read_journal(const char *path, unsigned char **out, size_t *len)
{
	struct stat st;
	unsigned char *buf;
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = S_ISREG(st.st_mode) ? errno : EINVAL;
		close(fd);
		return -e;
	}
	if ((uint64_t)st.st_size > JOURNAL_MAX) {
		close(fd);
		return -EFBIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		close(fd);
		return -ENOMEM;
	}
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return -e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	*out = buf;
	*len = n;
	return 0;
}

static int check_file(const char *path)
{
	struct ft__jnl_scan s;
	struct ctx c = {0};
	unsigned char *buf = NULL;
	char in[PATH_MAX];
	size_t len = 0, plen = strlen(path);
	int rc, status = OK;

	rc = read_journal(path, &buf, &len);
	if (rc < 0) {
		fprintf(stderr, "ftcc-log: %s: %s\n", path, strerror(-rc));
		return FAILED;
	}
	if (!quiet)
		printf("== %s (%zu bytes)\n", path, len);
	rc = ft__jnl_parse(buf, len, &s, print_rec, &c);
	if (rc < 0 && rc != -FT_ECORRUPT) {
		fprintf(stderr, "ftcc-log: %s: %s\n", path, ft_strerror(rc));
		status = FAILED;
		goto out;
	}
	if (s.tail_why != NULL) {
		printf("%s: corrupt or torn tail at byte %llu of %llu: %s\n", path,
		       (unsigned long long)s.valid_bytes, (unsigned long long)s.file_bytes, s.tail_why);
		status = BAD;
	}
	if (s.have_input) {
		if (c.nomem) {
			fprintf(stderr, "ftcc-log: %s: out of memory\n", path);
			status = FAILED;
			goto out;
		}
		if (plen > 4 && strcmp(path + plen - 4, ".log") == 0 && plen - 4 + 4 < sizeof(in)) {
			snprintf(in, sizeof(in), "%.*s.in", (int)(plen - 4), path);
			rc = ft__jnl_check_payload(in, c.regs, c.nreg, s.input_bytes, NULL);
			if (rc == 0) {
				printf("%s: payload %s: %zu regions, %llu bytes checked\n", path, in,
				       c.nreg, (unsigned long long)s.input_bytes);
			} else if (rc == -ENOENT) {
				printf("%s: payload %s absent: not checked\n", path, in);
			} else if (rc == -FT_ECORRUPT) {
				printf("%s: payload %s does not match the INPUT record (short or a CRC "
				       "differs)\n", path, in);
				if (status == OK)
					status = BAD;
				s.have_input = false;
			} else {
				fprintf(stderr, "ftcc-log: %s: %s\n", in, ft_strerror(rc));
				status = FAILED;
			}
		} else {
			printf("%s: no .log suffix: payload not checked\n", path);
		}
	}
	if (len == 0)
		printf("%s: empty journal (no op logged)\n", path);
	else
		printf("%s: %zu records, %llu of %llu bytes valid; op %llu%s%s%s; %zu sent, %zu "
		       "received\n", path, s.records, (unsigned long long)s.valid_bytes,
		       (unsigned long long)s.file_bytes, (unsigned long long)s.op_seq,
		       s.have_op ? "" : " (no BEGIN)", s.have_input ? ", input whole" : c.regs != NULL ? ", input bad" : ", no input",
		       s.ended ? ", ended" : "", s.frames_sent, s.frames_recv);
out:
	free(c.regs);
	free(buf);
	return status;
}

static int parse_int(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0 || v > INT_MAX)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	int rank = -1, status = OK, i;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-q") == 0) {
			quiet = true;
		} else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
			dir = argv[++i];
		} else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
			if (parse_int(argv[++i], &rank) < 0) {
				usage(stderr);
				return FAILED;
			}
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return OK;
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("ftcc-log %s\n", ft_version());
			return fflush(stdout) == 0 ? OK : FAILED;
		} else if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		} else {
			usage(stderr);
			return FAILED;
		}
	}
	if ((dir != NULL) != (rank >= 0) || (dir != NULL && i < argc) || (dir == NULL && i == argc)) {
		usage(stderr);
		return FAILED;
	}
	if (dir != NULL) {
		for (int slot = 0; slot < 2; slot++) {
			char path[PATH_MAX];
			int st;

			if (ft__jnl_path(path, sizeof(path), dir, rank, slot, "log") < 0) {
				fprintf(stderr, "ftcc-log: %s: path too long\n", dir);
				return FAILED;
			}
			if (access(path, F_OK) < 0 && errno == ENOENT) {
				printf("%s: no journal\n", path);
				continue;
			}
			st = check_file(path);
			if (st > status)
				status = st;
		}
		return status;
	}
	for (; i < argc; i++) {
		int st = check_file(argv[i]);
		if (st > status)
			status = st;
	}
	return status;
}
