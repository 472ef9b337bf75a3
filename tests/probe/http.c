/*
 * sandbox-probe: an HTTP client for egress proxies, timed from the inside. The benchmark runs
 * the same client through each proxy path, so the sandbox's process start and the exec that
 * launched it are outside every figure.
 *
 *   http-get PROXY HOST PORT PATH N        N absolute-URI GETs through PROXY, one connection each
 *   http-connect PROXY HOST PORT PATH N    N CONNECT tunnels, each: a TLS ClientHello naming HOST
 *                                          (what a proxy's SNI check reads), then a GET of PATH
 *   http-hold PROXY HOST PORT N SECS       opens N such tunnels, prints a line, holds them until a
 *                                          line (or EOF) on stdin or SECS, whichever comes first
 *   http-stall PROXY HOST PORT N           opens N tunnels, writes into each until it would block
 *   http-send-close PROXY HOST PORT N      opens N tunnels, sends a short request on each, exits
 *                                          (an upstream that never reads), then exits: all close
 *   http-flood PROXY HOST PORT N SECS      opens N connections one after another, closing none,
 *                                          each sends CONNECT HOST:PORT; then waits up to SECS
 *                                          for each one's first answer (see cmd_http_flood)
 *
 * PROXY is HOST:PORT or http://HOST:PORT/ (an http_proxy value), an IPv4 address. The upstream (net-scan: data)
 * behind an http-connect tunnel must skip one TLS record before the request: the ClientHello is
 * a real one's shape with nothing else (no key share), enough for an SNI check, not for TLS.
 *
 * Output: "ok requests=N bytes=B us=T1,T2,..." (body bytes in total; each request's time from
 * connect() to the end of the response), or "errno NAME step=... i=..." for the first request
 * that failed (EPROTO with status=... for a response that is not 200 or is cut short).
 */
#include "probe.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define BODY_BUF (256 * 1024)
/* A proxy or upstream that stops answering must not hang the bench. */
#define IO_TIMEOUT_SECS 60

struct target {
	struct sockaddr_in proxy;
	const char *host;
	long port;
	const char *path;
};

struct failure {
	const char *step;
	int err;
	int status;
};

static void parse_proxy(const char *s, struct sockaddr_in *sa)
{
	char buf[128];
	if (!strncmp(s, "http://", 7)) /* the scheme only; net-scan: data */
		s += 7;
	snprintf(buf, sizeof buf, "%s", s);
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = 0;
	char *colon = strrchr(buf, ':');
	if (!colon) {
		fprintf(stderr, "sandbox-probe: proxy %s has no port\n", s);
		exit(USAGE_EXIT);
	}
	*colon = 0;
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons(parse_long(colon + 1, "proxy port"));
	if (inet_pton(AF_INET, buf, &sa->sin_addr) != 1) {
		fprintf(stderr, "sandbox-probe: proxy address %s is not IPv4\n", buf);
		exit(USAGE_EXIT);
	}
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= w;
	}
	return 0;
}

static int dial(const struct sockaddr_in *sa, struct failure *f)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*f = (struct failure){ "socket", errno, 0 };
		return -1;
	}
	struct timeval tv = { IO_TIMEOUT_SECS, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
		*f = (struct failure){ "connect", errno, 0 };
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * Reads a response head into head[] (NUL-terminated); returns its length, the bytes read past
 * it stay in head[len..*got). The status code goes to *status.
 */
static long read_head(int fd, char *head, size_t *got, int *status, struct failure *f)
{
	*got = 0;
	for (;;) {
		char *end = memmem(head, *got, "\r\n\r\n", 4);
		if (end) {
			long len = end + 4 - head;
			if (sscanf(head, "HTTP/%*d.%*d %d", status) != 1)
				*status = -1;
			return len;
		}
		if (*got >= HEAD_MAX - 1) {
			*f = (struct failure){ "head-too-long", EPROTO, 0 };
			return -1;
		}
		ssize_t n = read(fd, head + *got, HEAD_MAX - 1 - *got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*f = (struct failure){ "read-head", n < 0 ? errno : EPROTO, 0 };
			return -1;
		}
		*got += n;
		head[*got] = 0;
	}
}

/* Content-Length of a head, or -1 when it has none. */
static long content_length(const char *head, long len)
{
	const char *p = head;
	while (p < head + len) {
		const char *eol = memmem(p, head + len - p, "\r\n", 2);
		if (!eol)
			break;
		if (!strncasecmp(p, "content-length:", 15))
			return strtol(p + 15, NULL, 10);
		p = eol + 2;
	}
	return -1;
}

/* Reads a 200 response to the end; returns its body's length, or -1. */
static long read_response(int fd, char *buf, struct failure *f)
{
	size_t got;
	int status;
	long head = read_head(fd, buf, &got, &status, f);
	if (head < 0)
		return -1;
	if (status != 200) {
		*f = (struct failure){ "status", EPROTO, status };
		return -1;
	}
	long want = content_length(buf, head);
	long body = got - head;
	for (;;) {
		ssize_t n = read(fd, buf, BODY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*f = (struct failure){ "read-body", errno, 0 };
			return -1;
		}
		if (n == 0)
			break;
		body += n;
	}
	if (want >= 0 && body != want) {
		*f = (struct failure){ "short-body", EPROTO, 200 };
		return -1;
	}
	return body;
}

/* A ClientHello record: TLS 1.2 framing, one cipher suite, no compression, SNI only. */
static size_t client_hello(unsigned char *out, const char *host)
{
	size_t hl = strlen(host), i = 0;
	size_t ext_len = 4 + 2 + 3 + hl;
	size_t body = 2 + 32 + 1 + 2 + 2 + 1 + 1 + 2 + ext_len;
	size_t record = 4 + body;
	out[i++] = 22;
	out[i++] = 3;
	out[i++] = 1;
	out[i++] = record >> 8;
	out[i++] = record & 0xff;
	out[i++] = 1;
	out[i++] = 0;
	out[i++] = body >> 8;
	out[i++] = body & 0xff;
	out[i++] = 3;
	out[i++] = 3;
	for (int r = 0; r < 32; r++)
		out[i++] = r;
	out[i++] = 0;
	out[i++] = 0;
	out[i++] = 2;
	out[i++] = 0x13;
	out[i++] = 0x01;
	out[i++] = 1;
	out[i++] = 0;
	out[i++] = ext_len >> 8;
	out[i++] = ext_len & 0xff;
	out[i++] = 0;
	out[i++] = 0;
	out[i++] = (5 + hl) >> 8;
	out[i++] = (5 + hl) & 0xff;
	out[i++] = (3 + hl) >> 8;
	out[i++] = (3 + hl) & 0xff;
	out[i++] = 0;
	out[i++] = hl >> 8;
	out[i++] = hl & 0xff;
	memcpy(out + i, host, hl);
	return i + hl;
}

/* CONNECT through the proxy, then the ClientHello: an open tunnel, or -1. */
static int open_tunnel(const struct target *t, char *buf, struct failure *f)
{
	int fd = dial(&t->proxy, f);
	if (fd < 0)
		return -1;
	int n = snprintf(buf, HEAD_MAX, "CONNECT %s:%ld HTTP/1.1\r\nHost: %s:%ld\r\n\r\n", t->host,
			 t->port, t->host, t->port);
	if (write_all(fd, buf, n) < 0) {
		*f = (struct failure){ "write-connect", errno, 0 };
		close(fd);
		return -1;
	}
	size_t got;
	int status;
	long head = read_head(fd, buf, &got, &status, f);
	if (head < 0 || status != 200 || (long)got != head) {
		if (head >= 0)
			*f = (struct failure){ "connect-status", EPROTO, status };
		close(fd);
		return -1;
	}
	unsigned char hello[600];
	size_t hlen = client_hello(hello, t->host);
	if (write_all(fd, hello, hlen) < 0) {
		*f = (struct failure){ "write-hello", errno, 0 };
		close(fd);
		return -1;
	}
	return fd;
}

/* One request; returns the body's length, or -1 with *f set. */
static long one_request(const struct target *t, int tunnel, char *buf, struct failure *f)
{
	int fd;
	int n;
	if (tunnel) {
		fd = open_tunnel(t, buf, f);
		if (fd < 0)
			return -1;
		n = snprintf(buf, HEAD_MAX, "GET %s HTTP/1.1\r\nHost: %s:%ld\r\nConnection: close\r\n\r\n",
			     t->path, t->host, t->port);
	} else {
		fd = dial(&t->proxy, f);
		if (fd < 0)
			return -1;
		n = snprintf(buf, HEAD_MAX,
			     "GET http://%s:%ld%s HTTP/1.1\r\nHost: %s:%ld\r\nConnection: close\r\n\r\n", /* net-scan: data */
			     t->host, t->port, t->path, t->host, t->port);
	}
	if (write_all(fd, buf, n) < 0) {
		*f = (struct failure){ "write-request", errno, 0 };
		close(fd);
		return -1;
	}
	long body = read_response(fd, buf, f);
	close(fd);
	return body;
}

static void report_failure(const struct failure *f, long i)
{
	report(-1, f->err, "step=%s i=%ld status=%d", f->step, i, f->status);
}

static int run_requests(char **argv, int tunnel)
{
	struct target t = { .host = argv[1], .path = argv[3] };
	parse_proxy(argv[0], &t.proxy);
	t.port = parse_long(argv[2], "port");
	long count = parse_long(argv[4], "count");
	if (count < 1) {
		fprintf(stderr, "sandbox-probe: count must be positive\n");
		return USAGE_EXIT;
	}
	char *buf = malloc(BODY_BUF);
	long *us = malloc(count * sizeof *us);
	if (!buf || !us) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	long total = 0;
	for (long i = 0; i < count; i++) {
		struct failure f = { 0 };
		double start = now_monotonic();
		long body = one_request(&t, tunnel, buf, &f);
		if (body < 0) {
			report_failure(&f, i);
			return 0;
		}
		us[i] = (long)((now_monotonic() - start) * 1e6);
		total += body;
	}
	printf("ok requests=%ld bytes=%ld us=", count, total);
	for (long i = 0; i < count; i++)
		printf("%s%ld", i ? "," : "", us[i]);
	putchar('\n');
	fflush(stdout);
	return 0;
}

int cmd_http_get(int argc, char **argv)
{
	(void)argc;
	return run_requests(argv, 0);
}

int cmd_http_connect(int argc, char **argv)
{
	(void)argc;
	return run_requests(argv, 1);
}

int cmd_http_hold(int argc, char **argv)
{
	(void)argc;
	struct target t = { .host = argv[1], .path = "/" };
	parse_proxy(argv[0], &t.proxy);
	t.port = parse_long(argv[2], "port");
	long count = parse_long(argv[3], "count");
	long secs = parse_long(argv[4], "secs");
	char *buf = malloc(HEAD_MAX);
	if (!buf) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	for (long i = 0; i < count; i++) {
		struct failure f = { 0 };
		/* Left open on purpose: the process's exit closes them all at once. */
		if (open_tunnel(&t, buf, &f) < 0) {
			report_failure(&f, i);
			return 0;
		}
	}
	report(0, 0, "tunnels=%ld", count);
	struct pollfd in = { .fd = 0, .events = POLLIN };
	poll(&in, 1, secs * 1000);
	return 0;
}

/* One flooding connection: its socket and the first bytes of its answer. */
struct flood_conn {
	int fd;
	size_t got;
	char head[16];
};

enum flood_class { F_PENDING, F_200, F_429, F_503, F_OTHER, F_CLOSED };

static enum flood_class flood_status(const struct flood_conn *c)
{
	int status;
	char line[sizeof c->head + 1];
	memcpy(line, c->head, c->got);
	line[c->got] = 0;
	if (sscanf(line, "HTTP/%*d.%*d %d", &status) != 1)
		return F_OTHER;
	return status == 200 ? F_200 : status == 429 ? F_429 : status == 503 ? F_503 : F_OTHER;
}

/*
 * Every connection must be answered: a status line, or a close the client sees at once. One
 * that stays silent is what a proxy or forwarder that stops accepting leaves behind (the kernel
 * completed the handshake, nobody serves it). Output: "ok n=N s200=.. s429=.. s503=.. other=..
 * closed=.. silent=.. unconnected=.." (unconnected: connect() itself failed or timed out).
 */
int cmd_http_flood(int argc, char **argv)
{
	(void)argc;
	struct target t = { .host = argv[1], .path = "/" };
	parse_proxy(argv[0], &t.proxy);
	t.port = parse_long(argv[2], "port");
	long n = parse_long(argv[3], "count");
	long secs = parse_long(argv[4], "secs");
	struct flood_conn *conns = calloc(n > 0 ? n : 1, sizeof *conns);
	enum flood_class *cls = calloc(n > 0 ? n : 1, sizeof *cls);
	if (!conns || !cls || n < 1) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	char req[512];
	int len = snprintf(req, sizeof req, "CONNECT %s:%ld HTTP/1.1\r\nHost: %s:%ld\r\n\r\n", t.host,
			   t.port, t.host, t.port);
	long unconnected = 0;
	for (long i = 0; i < n; i++) {
		struct failure f = { 0 };
		conns[i].fd = dial(&t.proxy, &f);
		if (conns[i].fd < 0) {
			unconnected++;
			cls[i] = F_OTHER;
			continue;
		}
		/* A connection closed at once may refuse the write: that is its answer. */
		if (send(conns[i].fd, req, len, MSG_NOSIGNAL) != len)
			cls[i] = F_CLOSED;
	}
	double deadline = now_monotonic() + secs;
	struct pollfd *pfds = calloc(n, sizeof *pfds);
	long *which = calloc(n, sizeof *which);
	if (!pfds || !which) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	for (;;) {
		long k = 0;
		for (long i = 0; i < n; i++) {
			if (cls[i] != F_PENDING)
				continue;
			pfds[k] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
			which[k++] = i;
		}
		double left = deadline - now_monotonic();
		if (k == 0 || left <= 0)
			break;
		int r = poll(pfds, k, (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		for (long j = 0; j < k; j++) {
			if (!pfds[j].revents)
				continue;
			struct flood_conn *c = &conns[which[j]];
			ssize_t got = read(c->fd, c->head + c->got, sizeof c->head - c->got);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				cls[which[j]] = c->got ? flood_status(c) : F_CLOSED;
				continue;
			}
			c->got += got;
			if (c->got >= 12) /* "HTTP/1.1 503" */
				cls[which[j]] = flood_status(c);
		}
	}
	long count[F_CLOSED + 1] = { 0 };
	for (long i = 0; i < n; i++)
		count[cls[i]]++;
	printf("ok n=%ld s200=%ld s429=%ld s503=%ld other=%ld closed=%ld silent=%ld unconnected=%ld\n",
	       n, count[F_200], count[F_429], count[F_503], count[F_OTHER] - unconnected,
	       count[F_CLOSED], count[F_PENDING], unconnected);
	fflush(stdout);
	return 0;
}

/*
 * Uploads stuck on an upstream that never reads: each tunnel is written into (non-blocking)
 * until the write would block, so the proxy holds an upload it cannot deliver on every one;
 * then the process exits and the kernel closes them all. Output: "ok tunnels=N bytes=B".
 */
int cmd_http_stall(int argc, char **argv)
{
	(void)argc;
	struct target t = { .host = argv[1], .path = "/" };
	parse_proxy(argv[0], &t.proxy);
	t.port = parse_long(argv[2], "port");
	long n = parse_long(argv[3], "count");
	char *buf = malloc(HEAD_MAX);
	static char chunk[64 * 1024];
	memset(chunk, 'u', sizeof chunk);
	if (!buf) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	long long total = 0;
	for (long i = 0; i < n; i++) {
		struct failure f = { 0 };
		int fd = open_tunnel(&t, buf, &f);
		if (fd < 0) {
			report_failure(&f, i);
			return 0;
		}
		/* Left open on purpose: the process's exit closes them all at once. */
		for (;;) {
			ssize_t w = send(fd, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w > 0) {
				total += w;
				continue;
			}
			if (w < 0 && errno == EINTR)
				continue;
			break;
		}
	}
	printf("ok tunnels=%ld bytes=%lld\n", n, total);
	fflush(stdout);
	return 0;
}

/*
 * Requests sent whole to an upstream that never reads or answers, then closed: each tunnel gets
 * a short request and the process exits, closing them all. Output: "ok tunnels=N bytes=B".
 */
int cmd_http_send_close(int argc, char **argv)
{
	(void)argc;
	struct target t = { .host = argv[1], .path = "/" };
	parse_proxy(argv[0], &t.proxy);
	t.port = parse_long(argv[2], "port");
	long n = parse_long(argv[3], "count");
	char *buf = malloc(HEAD_MAX);
	static const char request[] = "GET / HTTP/1.1\r\nHost: upstream\r\n\r\n";
	if (!buf) {
		report(-1, ENOMEM, "step=alloc");
		return 0;
	}
	long long total = 0;
	for (long i = 0; i < n; i++) {
		struct failure f = { 0 };
		int fd = open_tunnel(&t, buf, &f);
		if (fd < 0) {
			report_failure(&f, i);
			return 0;
		}
		ssize_t w = send(fd, request, sizeof request - 1, MSG_NOSIGNAL);
		if (w != (ssize_t)(sizeof request - 1)) {
			report(-1, w < 0 ? errno : EIO, "step=send");
			return 0;
		}
		total += w;
		/* Left open on purpose: the process's exit closes them all at once. */
	}
	printf("ok tunnels=%ld bytes=%lld\n", n, total);
	fflush(stdout);
	return 0;
}
