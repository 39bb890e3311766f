/* test_auth.c: SHA-256 and HMAC-SHA256 against FIPS 180 and RFC 4231 vectors, nonces, the replay cache; the token never on the wire. */
/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ftcc.h"
#include "internal.h"
#include "transport.h"

/* ---------------------------------------------------------------------- */
/* Part one: the primitives */

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	cr_assert_eq(strlen(hex), 2 * n, "vector of %zu hex digits, want %zu", strlen(hex), 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

static void expect_digest(const uint8_t *got, const char *hex, size_t n, const char *what)
{
	uint8_t want[FT__SHA256_BYTES];

	unhex(hex, want, n);
	cr_expect_eq(memcmp(got, want, n), 0, "%s", what);
}

static void expect_sha(const void *msg, size_t len, const char *hex, const char *what)
{
	uint8_t d[FT__SHA256_BYTES];

	cr_assert_eq(ft__sha256(msg, len, d), 0);
	expect_digest(d, hex, sizeof(d), what);
}

/* FIPS 180-2 appendix B and the NIST example values. */
Test(sha256, fips180_vectors, .timeout = 20)
{
	const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
			   "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";

	expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		   "abc");
	expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		   "empty");
	expect_sha(m448, strlen(m448),
		   "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "448 bits");
	expect_sha(m896, strlen(m896),
		   "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1", "896 bits");
}

/* Our use of libcrypto in pieces (as the MACs hash a handshake's fields):
 * pieces of every size from 1 to 1000 bytes, across block boundaries. */
Test(sha256, million_a_in_pieces, .timeout = 20)
{
	static struct iovec iov[2100];
	uint8_t d[FT__SHA256_BYTES];
	static char a[1000];
	size_t done = 0, step = 1;
	int n = 0;

	memset(a, 'a', sizeof(a));
	while (done < 1000000) {
		size_t k = 1000000 - done < step ? 1000000 - done : step;
		cr_assert_lt(n, 2100);
		iov[n++] = (struct iovec){a, k};
		done += k;
		step = step % 1000 + 1;
	}
	cr_assert_eq(ft__sha256_iov(iov, n, d), 0);
	expect_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
		      sizeof(d), "one million a");
}

/* Padding edges: lengths around 55, 56 and 64 bytes, one shot against byte by byte. */
Test(sha256, split_matches_one_shot, .timeout = 20)
{
	uint8_t msg[200];
	static struct iovec iov[200];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 131 + 7);
	for (size_t len = 0; len <= sizeof(msg); len++) {
		uint8_t one[FT__SHA256_BYTES], bytes[FT__SHA256_BYTES];
		cr_assert_eq(ft__sha256(msg, len, one), 0);
		for (size_t i = 0; i < len; i++)
			iov[i] = (struct iovec){msg + i, 1};
		cr_assert_eq(ft__sha256_iov(iov, (int)len, bytes), 0);
		cr_expect_eq(memcmp(one, bytes, sizeof(one)), 0, "length %zu", len);
	}
}

struct hmac_case {
	const char *key_hex;
	const char *data;       /* text, or hex when data_hex */
	bool data_hex;
	const char *mac_hex;    /* may be truncated (case 5) */
};

static void fill(char *hex, size_t bytes, const char *byte)
{
	for (size_t i = 0; i < bytes; i++)
		memcpy(hex + 2 * i, byte, 2);
	hex[2 * bytes] = '\0';
}

/* RFC 4231, test cases 1 to 7. */
Test(hmac_sha256, rfc4231_vectors, .timeout = 20)
{
	static char k0b[41], kaa20[41], kaa131[263], k0c[41], ddd[101], dcd[101];
	fill(k0b, 20, "0b");
	fill(kaa20, 20, "aa");
	fill(kaa131, 131, "aa");
	fill(k0c, 20, "0c");
	fill(ddd, 50, "dd");
	fill(dcd, 50, "cd");
	const struct hmac_case cases[] = {
		{k0b, "Hi There", false,
		 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"4a656665", "what do ya want for nothing?", false,
		 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{kaa20, ddd, true, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{"0102030405060708090a0b0c0d0e0f10111213141516171819", dcd, true,
		 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{k0c, "Test With Truncation", false, "a3b6167473100ee06e0c796c2955552b"},
		{kaa131, "Test Using Larger Than Block-Size Key - Hash Key First", false,
		 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{kaa131,
		 "This is a test using a larger than block-size key and a larger than block-size "
		 "data. The key needs to be hashed before being used by the HMAC algorithm.",
		 false, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	};

	for (size_t i = 0; i < FT__ARRAY_SIZE(cases); i++) {
		const struct hmac_case *c = &cases[i];
		uint8_t key[131], data[200], mac[FT__SHA256_BYTES];
		size_t klen = strlen(c->key_hex) / 2, dlen;
		char what[32];
		unhex(c->key_hex, key, klen);
		if (c->data_hex) {
			dlen = strlen(c->data) / 2;
			unhex(c->data, data, dlen);
		} else {
			dlen = strlen(c->data);
			memcpy(data, c->data, dlen);
		}
		ft__hmac_sha256(key, klen, data, dlen, mac);
		snprintf(what, sizeof(what), "RFC 4231 case %zu", i + 1);
		expect_digest(mac, c->mac_hex, strlen(c->mac_hex) / 2, what);
	}
}

Test(hmac_sha256, empty_key_is_a_key, .timeout = 20)
{
	uint8_t a[FT__SHA256_BYTES], b[FT__SHA256_BYTES];

	ft__hmac_sha256("", 0, "hello", 5, a);
	ft__hmac_sha256("\0", 1, "hello", 5, b);
	/* HMAC pads the key with zeros: the empty key and one zero byte agree */
	cr_expect_eq(memcmp(a, b, sizeof(a)), 0);
	ft__hmac_sha256("x", 1, "hello", 5, b);
	cr_expect_neq(memcmp(a, b, sizeof(a)), 0);
}

Test(auth, mac_covers_label_pieces_and_token, .timeout = 20)
{
	uint8_t base[FT__AUTH_MAC], other[FT__AUTH_MAC];
	char a[] = "first", b[] = "second";
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};

	ft__auth_mac("tok", "label", iov, 2, base);
	cr_expect(ft__auth_mac_ok("tok", "label", iov, 2, base));
	cr_expect(!ft__auth_mac_ok("tok2", "label", iov, 2, base), "another token");
	cr_expect(!ft__auth_mac_ok("", "label", iov, 2, base), "the empty token");
	cr_expect(!ft__auth_mac_ok("tok", "labe", iov, 2, base), "another label");
	b[0] = 'S';
	cr_expect(!ft__auth_mac_ok("tok", "label", iov, 2, base), "another byte");
	b[0] = 's';
	ft__auth_mac("tok", "label", iov, 1, other);
	cr_expect_neq(memcmp(base, other, sizeof(base)), 0, "a piece left out");
	base[31] ^= 1;
	cr_expect(!ft__auth_mac_ok("tok", "label", iov, 2, base), "a flipped MAC bit");
}

Test(auth, equal_compares_every_byte, .timeout = 20)
{
	uint8_t x[32], y[32];

	for (size_t i = 0; i < sizeof(x); i++)
		x[i] = y[i] = (uint8_t)i;
	cr_expect(ft__auth_equal(x, y, sizeof(x)));
	cr_expect(ft__auth_equal(x, y, 0));
	for (size_t i = 0; i < sizeof(x); i++) {
		y[i] ^= 0x80;
		cr_expect(!ft__auth_equal(x, y, sizeof(x)), "byte %zu differs", i);
		y[i] ^= 0x80;
	}
}

Test(auth, nonces_are_fresh, .timeout = 20)
{
	uint8_t n[8][FT__AUTH_NONCE];

	for (int i = 0; i < 8; i++)
		cr_assert_eq(ft__auth_random(n[i], sizeof(n[i])), 0);
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < i; j++)
			cr_expect_neq(memcmp(n[i], n[j], FT__AUTH_NONCE), 0, "nonces %d and %d", i, j);
}

Test(auth, seen_refuses_a_replay, .timeout = 20)
{
	static struct ft__auth_seen s;
	uint8_t n[FT__AUTH_SEEN + 1][FT__AUTH_NONCE];

	memset(n, 0, sizeof(n));
	for (int i = 0; i <= FT__AUTH_SEEN; i++)
		n[i][0] = (uint8_t)i, n[i][15] = 0xee;
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), 0);
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), -FT_EAUTH, "the same nonce twice");
	for (int i = 1; i < FT__AUTH_SEEN; i++)
		cr_expect_eq(ft__auth_seen_add(&s, n[i]), 0, "nonce %d", i);
	for (int i = 0; i < FT__AUTH_SEEN; i++)
		cr_expect_eq(ft__auth_seen_add(&s, n[i]), -FT_EAUTH, "nonce %d again", i);
	/* a full cache forgets its oldest */
	cr_expect_eq(ft__auth_seen_add(&s, n[FT__AUTH_SEEN]), 0);
	cr_expect_eq(ft__auth_seen_add(&s, n[0]), 0, "the oldest was forgotten");
	cr_expect_eq(ft__auth_seen_add(&s, n[FT__AUTH_SEEN]), -FT_EAUTH);
}

/* ---------------------------------------------------------------------- */
/* Part two: the token never crosses a socket */

/*
 * Real jobs (ftcc-run and examples/allreduce_check, built by make) run under
 * strace, which records every byte the launcher and the ranks write to any
 * file descriptor (write, send*, writev, pwrite*), in hexadecimal (-xx). The
 * token must appear nowhere, neither as its bytes nor as hex text; the job
 * id, which every hello carries in clear, must appear (else the trace saw
 * no handshake and proves nothing). The shrink policy opens control links
 * too, and so does in-band membership (with ftcc-run's address store).
 * Skipped, and said so, without strace or where ptrace is refused.
 */

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB_DEADLINE_S 150

extern char **environ;

static const char *build_dir(void)
{
	const char *dir = getenv("FTCC_BUILD_DIR");

	return dir != NULL && *dir != '\0' ? dir : "build";
}

/* Runs argv with the environment minus FTCC_* plus env (NAME=VALUE, NULL
 * ended), stdout and stderr into out; its exit status, or -1 at the deadline. */
static int run(char *const *argv, const char *const *env, const char *out)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		setpgid(0, 0);
		for (size_t i = 0; environ[i] != NULL;) {
			char name[256];
			const char *eq = strchr(environ[i], '=');
			if (strncmp(environ[i], "FTCC_", 5) != 0 || eq == NULL ||
			    (size_t)(eq - environ[i]) >= sizeof(name)) {
				i++;
				continue;
			}
			snprintf(name, sizeof(name), "%.*s", (int)(eq - environ[i]), environ[i]);
			unsetenv(name);
		}
		for (const char *const *e = env; *e != NULL; e++)
			putenv((char *)*e);
		execvp(argv[0], argv);
		_exit(127);
	}
	for (long waited = 0; waited < JOB_DEADLINE_S * 100L; waited++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
	kill(-pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	cr_assert_not_null(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_geq(n, 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* s as strace -xx prints it: every byte \xHH. */
static char *escaped(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(4 * n + 1);

	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++)
		snprintf(out + 4 * i, 5, "\\x%02x", (unsigned char)s[i]);
	out[4 * n] = '\0';
	return out;
}

/* s's bytes as hex text, in lower or upper case. */
static char *hex_text(const char *s, bool upper)
{
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	size_t n = strlen(s);
	char *out = malloc(2 * n + 1);

	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[(unsigned char)s[i] >> 4];
		out[2 * i + 1] = digits[(unsigned char)s[i] & 15];
	}
	out[2 * n] = '\0';
	return out;
}

/* Neither the token nor its hex text, raw or as strace prints them. */
static void expect_absent(const char *trace, const char *token, const char *what)
{
	char *forms[6] = {strdup(token), escaped(token), hex_text(token, false),
			  hex_text(token, true)};

	forms[4] = escaped(forms[2]);
	forms[5] = escaped(forms[3]);
	for (int i = 0; i < 6; i++) {
		cr_assert_not_null(forms[i]);
		cr_expect_null(strstr(trace, forms[i]), "%s: the token (form %d) was written: %s",
			       what, i, forms[i]);
		free(forms[i]);
	}
}

static void skip_without_strace(void)
{
	char *argv[] = {"strace", "-f", "-qq", "-o", "/dev/null", "true", NULL};
	const char *none[] = {NULL};
	char out[] = "/tmp/ftcc-auth-strace-XXXXXX";
	int fd = mkstemp(out), rc;

	cr_assert_geq(fd, 0);
	close(fd);
	rc = run(argv, none, out);
	unlink(out);
	if (rc != 0) {
		fprintf(stderr, "SKIPPED: strace is missing or cannot trace here (status %d); "
				"install it (scripts/deps.sh)\n", rc);
		cr_skip_test("strace is missing or cannot trace here");
	}
}

static void skip_without_fabric(const char *prov)
{
	char cmd[128];

	if (ft__transport_lookup("fabric") == NULL) {
		fprintf(stderr, "SKIPPED: this build has no libfabric transport\n");
		cr_skip_test("no libfabric transport in this build");
	}
	snprintf(cmd, sizeof(cmd), "fi_info -p '%s' >/dev/null 2>&1", prov);
	if (system(cmd) != 0) {
		fprintf(stderr, "SKIPPED: libfabric provider '%s' is not available\n", prov);
		cr_skip_test("libfabric provider %s is not available", prov);
	}
}

struct traced {
	char dir[128];
	char *trace, *out;
	int status;
};

/*
 * A job of n ranks of allreduce_check under strace. transport: "tcp" or a
 * libfabric provider; policy: FTCC_POLICY; membership: FTCC_MEMBERSHIP
 * ("inband": over control links, its book from ftcc-run's store); wrong:
 * NULL, or the token rank 1 holds instead of token (through a wrapper).
 */
static void traced_job(struct traced *t, const char *transport, const char *policy,
		       const char *membership, int n, const char *token, const char *wrong)
{
	static char env[9][256];
	const char *envp[10];
	char ftrun[512], check[512], trace[256], out[256], wrap[256], nstr[8];
	const char *b = build_dir();
	int k = 0;

	skip_without_strace();
	snprintf(ftrun, sizeof(ftrun), "%s/ftcc-run", b);
	snprintf(check, sizeof(check), "%s/examples/allreduce_check", b);
	cr_assert_eq(access(ftrun, X_OK), 0, "%s is not built (make all)", ftrun);
	cr_assert_eq(access(check, X_OK), 0, "%s is not built (make all)", check);
	snprintf(t->dir, sizeof(t->dir), "%s/ftcc-auth-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(t->dir));
	snprintf(trace, sizeof(trace), "%s/trace", t->dir);
	snprintf(out, sizeof(out), "%s/out", t->dir);
	snprintf(wrap, sizeof(wrap), "%s/wrong-token-for-rank-1.sh", t->dir);
	snprintf(nstr, sizeof(nstr), "%d", n);

	snprintf(env[k++], sizeof(env[0]), "FTCC_TOKEN=%s", token);
	snprintf(env[k++], sizeof(env[0]), "FTCC_JOB_ID=auth-wire-%d-%s-%s-%s", (int)getpid(),
		 strcmp(transport, "tcp") == 0 ? "tcp" : "fabric", policy, membership);
	snprintf(env[k++], sizeof(env[0]), "FTCC_POLICY=%s", policy);
	snprintf(env[k++], sizeof(env[0]), "FTCC_MEMBERSHIP=%s", membership);
	snprintf(env[k++], sizeof(env[0]), "FTCC_TRANSPORT=%s",
		 strcmp(transport, "tcp") == 0 ? "tcp" : "fabric");
	if (strcmp(transport, "tcp") != 0)
		snprintf(env[k++], sizeof(env[0]), "FI_PROVIDER=%s", transport);
	snprintf(env[k++], sizeof(env[0]), "FTCC_CONNECT_TIMEOUT_MS=%d",
		 wrong != NULL ? 3000 : 30000);
	if (wrong != NULL) {
		FILE *f = fopen(wrap, "w");
		cr_assert_not_null(f);
		fprintf(f, "#!/bin/sh\nif [ \"$FTCC_RANK\" = 1 ]; then FTCC_TOKEN=\"$AUTH_WRONG\"; "
			   "export FTCC_TOKEN; fi\nexec \"$@\"\n");
		fclose(f);
		cr_assert_eq(chmod(wrap, 0700), 0);
		snprintf(env[k++], sizeof(env[0]), "AUTH_WRONG=%s", wrong);
	}
	for (int i = 0; i < k; i++)
		envp[i] = env[i];
	envp[k] = NULL;

	char *argv[20] = {"strace", "-f", "-qq", "-e",
			  "trace=write,sendto,sendmsg,sendmmsg,writev,pwrite64,pwritev,pwritev2",
			  "-s", "1000000", "-xx", "-o", trace, ftrun, "-n", nstr};
	int a = 13;
	if (wrong != NULL)
		argv[a++] = wrap;
	argv[a++] = check;
	argv[a++] = "1024";
	argv[a++] = "3";
	argv[a] = NULL;
	t->status = run(argv, envp, out);
	cr_assert_neq(t->status, -1, "the job did not end within %d s", JOB_DEADLINE_S);
	t->trace = slurp(trace);
	t->out = slurp(out);
	/* the hellos went out, and the trace saw them */
	char *job = escaped(env[1] + strlen("FTCC_JOB_ID="));
	cr_expect_not_null(strstr(t->trace, job), "no hello in the trace; output:\n%s", t->out);
	free(job);
	expect_absent(t->trace, token, "the job's token");
	if (wrong != NULL)
		expect_absent(t->trace, wrong, "rank 1's wrong token");
}

static void traced_done(struct traced *t)
{
	char cmd[200];

	free(t->trace);
	free(t->out);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", t->dir);
}

#define SECRET "ftcc-secret-\x01\xfe-Zq7w"

static void good_job(const char *transport, const char *membership)
{
	struct traced t;

	traced_job(&t, transport, "shrink", membership, 3, SECRET, NULL);
	cr_expect_eq(t.status, 0, "the job failed:\n%s", t.out);
	cr_expect_not_null(strstr(t.out, "correct"), "output:\n%s", t.out);
	traced_done(&t);
}

/* Rank 1 holds another token: under abort, ft_init fails with FT_EAUTH on
 * both ends of each link; under shrink rank 1's ft_init fails with FT_EAUTH
 * (its every neighbour refused it) and the others go on without it; with
 * two ranks under shrink both fail with FT_EAUTH (neither may run alone). Rank 1
 * once settled a view of its own instead and returned its own buffer as
 * the sum ("on 1 ranks: correct", status 0 for it). */
static void wrong_token_job(const char *transport, const char *policy, int n)
{
	bool goes_on = strcmp(policy, "abort") != 0 && n > 2;
	struct traced t;
	char want[160];

	traced_job(&t, transport, policy, "file", n, SECRET, "not-the-" SECRET);
	cr_expect_neq(t.status, 0, "the job passed with a wrong token:\n%s", t.out);
	for (int r = 0; r < 2; r++) {
		if (goes_on && r == 0)
			continue;
		snprintf(want, sizeof(want), "[%d] ft_init: %s", r, ft_strerror(-FT_EAUTH));
		cr_expect_not_null(strstr(t.out, want), "no '%s' in:\n%s", want, t.out);
	}
	cr_expect_null(strstr(t.out, "on 1 ranks"), "a rank ran alone:\n%s", t.out);
	if (goes_on) {
		cr_expect_not_null(strstr(t.out, "[0] allreduce of 1024 floats on 2 ranks: correct"),
				   "ranks 0 and 2 did not go on together:\n%s", t.out);
	}
	traced_done(&t);
}

TestSuite(token_on_wire, .timeout = 2 * JOB_DEADLINE_S);

Test(token_on_wire, tcp)
{
	good_job("tcp", "file");
}

/* membership over control links too, and ftcc-run's address store */
Test(token_on_wire, tcp_inband)
{
	good_job("tcp", "inband");
}

Test(token_on_wire, fabric_rxm)
{
	skip_without_fabric("tcp;ofi_rxm");
	good_job("tcp;ofi_rxm", "file");
}

Test(token_on_wire, wrong_token_tcp)
{
	wrong_token_job("tcp", "abort", 2);
	wrong_token_job("tcp", "shrink", 3);
	/* two ranks, two tokens: neither is the odd one, both fail */
	wrong_token_job("tcp", "shrink", 2);
}

/* In-band membership under ftcc-run's store: the rank with another token is
 * refused by the store at once (FT_EAUTH) and exits; ftcc-run saw it die
 * before the book went out, so the book marks it gone and the ranks with
 * the job's token start without it (shrink), never one of them alone. */
Test(token_on_wire, wrong_token_tcp_inband)
{
	struct traced t;
	char want[64];

	traced_job(&t, "tcp", "shrink", "inband", 3, SECRET, "not-the-" SECRET);
	cr_expect_neq(t.status, 0, "the job passed with a wrong token:\n%s", t.out);
	snprintf(want, sizeof(want), "[1] ft_init: %s", ft_strerror(-FT_EAUTH));
	cr_expect_not_null(strstr(t.out, want), "no '%s' in:\n%s", want, t.out);
	cr_expect_null(strstr(t.out, "[1] allreduce"), "the rank with another token ran:\n%s",
		       t.out);
	cr_expect_null(strstr(t.out, "on 1 ranks"), "a rank ran alone:\n%s", t.out);
	cr_expect_not_null(strstr(t.out, "[0] allreduce of 1024 floats on 2 ranks: correct"),
			   "ranks 0 and 2 did not go on together:\n%s", t.out);
	traced_done(&t);
}

Test(token_on_wire, wrong_token_fabric_rxm)
{
	skip_without_fabric("tcp;ofi_rxm");
	wrong_token_job("tcp;ofi_rxm", "abort", 2);
}
