/* sandbox-probe: network primitives. */
#include "probe.h"
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- network ------------------------------------------------------------------------------- */

int cmd_socket_raw(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
	return 0;
}

int cmd_socket_packet(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x0003 /* ETH_P_ALL */)));
	return 0;
}

int cmd_bind(int argc, char **argv)
{
	long port = argc > 0 ? parse_long(argv[0], "port") : 80;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(-1, errno, "step=socket");
		return 0;
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	long rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	report(rc, errno, "port=%ld", port);
	close(fd);
	return 0;
}

int cmd_connect(int argc, char **argv)
{
	long port = parse_long(argv[1], "port");
	long timeout_ms = argc > 2 ? parse_long(argv[2], "timeout_ms") : 3000;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, argv[0], &sa.sin_addr) != 1) {
		fprintf(stderr, "sandbox-probe: bad IPv4 address %s\n", argv[0]);
		exit(USAGE_EXIT);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(-1, errno, "step=socket");
		return 0;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
		report(0, 0, "addr=%s:%ld", argv[0], port);
		return 0;
	}
	if (errno != EINPROGRESS) {
		report(-1, errno, "addr=%s:%ld", argv[0], port);
		return 0;
	}
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int n = poll(&pfd, 1, timeout_ms);
	if (n == 0) {
		printf("timeout addr=%s:%ld timeout_ms=%ld\n", argv[0], port, timeout_ms);
		fflush(stdout);
		return 0;
	}
	int soerr = 0;
	socklen_t len = sizeof soerr;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
	report(soerr ? -1 : 0, soerr, "addr=%s:%ld", argv[0], port);
	close(fd);
	return 0;
}

int cmd_connect_unix(int argc, char **argv)
{
	(void)argc;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(argv[0]) >= sizeof sa.sun_path) {
		fprintf(stderr, "sandbox-probe: socket path too long: %s\n", argv[0]);
		exit(USAGE_EXIT);
	}
	strcpy(sa.sun_path, argv[0]);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(-1, errno, "step=socket");
		return 0;
	}
	long rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	report(rc, errno, "path=%s", argv[0]);
	close(fd);
	return 0;
}

int cmd_listen(int argc, char **argv)
{
	long port = parse_long(argv[0], "port");
	double secs = parse_long(argv[1], "secs");
	(void)argc;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(-1, errno, "step=socket");
		return 0;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		report(-1, errno, "step=bind port=%ld", port);
		return 0;
	}
	if (listen(fd, 16) < 0) {
		report(-1, errno, "step=listen port=%ld", port);
		return 0;
	}
	/* Announce before accepting: whoever watches the output knows the port is open. */
	report(0, 0, "listening=%ld", port);
	long accepted = 0;
	double deadline = now_monotonic() + secs;
	for (;;) {
		double left = deadline - now_monotonic();
		if (left <= 0)
			break;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, (int)(left * 1000) + 1) > 0) {
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0) {
				accepted++;
				close(c);
			}
		}
	}
	report(0, 0, "port=%ld accepted=%ld", port, accepted);
	close(fd);
	return 0;
}

int cmd_ifaces(int argc, char **argv)
{
	(void)argc; (void)argv;
	struct ifaddrs *list;
	if (getifaddrs(&list) < 0) {
		report_call(-1);
		return 0;
	}
	/* Interface names, each once, in the order the kernel lists them. */
	char names[1024] = "";
	size_t off = 0;
	for (struct ifaddrs *i = list; i; i = i->ifa_next) {
		char key[IF_NAMESIZE + 2];
		snprintf(key, sizeof key, ",%s,", i->ifa_name);
		char padded[sizeof names + 2];
		snprintf(padded, sizeof padded, ",%s,", names);
		if (strstr(padded, key))
			continue;
		off += snprintf(names + off, sizeof names - off, "%s%s", off ? "," : "", i->ifa_name);
		if (off >= sizeof names)
			break;
	}
	freeifaddrs(list);
	report(0, 0, "ifaces=%s", off ? names : "none");
	return 0;
}
