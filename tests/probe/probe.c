/*
 * sandbox-probe: run inside a sandbox by the integration tests to check the hardening from the
 * inside. Every subcommand performs one tiny, direct action (raw syscalls where libc has no
 * wrapper) and prints exactly one line:
 *
 *   ok [key=value ...]            the action succeeded (or the values that were read)
 *   errno NAME [key=value ...]    the action failed with errno NAME (e.g. EPERM, EROFS)
 *   timeout [key=value ...]       the action did not finish in time (connect)
 *
 * Exit status: 0 when the subcommand ran (whatever its outcome), 2 on a usage error, or the
 * requested status for `exit N`. A process killed by a signal (OOM, SIGXFSZ, SIGKILL) prints
 * nothing, and its exit status tells what happened.
 *
 * Built with `gcc -static` by the tests crate's build.rs, so it runs in an image without libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define USAGE_EXIT 2

static const char *errname(int e)
{
	const char *name = strerrorname_np(e);
	return name ? name : "EUNKNOWN";
}

/* Prints the outcome line: "ok" or "errno NAME", then the optional key=value details. */
static void report(long rc, int err, const char *fmt, ...)
{
	if (rc < 0)
		printf("errno %s", errname(err));
	else
		printf("ok");
	if (fmt && *fmt) {
		va_list ap;
		va_start(ap, fmt);
		putchar(' ');
		vprintf(fmt, ap);
		va_end(ap);
	}
	putchar('\n');
	fflush(stdout);
}

/* Reports the result of a single syscall that returns -1 and sets errno on failure. */
static void report_call(long rc)
{
	report(rc, errno, NULL);
}

static long parse_long(const char *s, const char *what)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || *end || end == s) {
		fprintf(stderr, "sandbox-probe: bad %s: %s\n", what, s);
		exit(USAGE_EXIT);
	}
	return v;
}

static double now_monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_seconds(double secs)
{
	struct timespec ts = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- identity and privileges ------------------------------------------------------------ */

static int cmd_caps(int argc, char **argv)
{
	(void)argc; (void)argv;
	static const char *keys[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" };
	char found[5][32] = { "missing", "missing", "missing", "missing", "missing" };
	FILE *f = fopen("/proc/self/status", "r");
	if (!f) {
		report(-1, errno, "step=open-status");
		return 0;
	}
	char line[256];
	while (fgets(line, sizeof line, f)) {
		for (int i = 0; i < 5; i++) {
			size_t n = strlen(keys[i]);
			if (!strncmp(line, keys[i], n) && line[n] == ':') {
				char *v = line + n + 1;
				v += strspn(v, " \t");
				v[strcspn(v, "\n")] = 0;
				snprintf(found[i], sizeof found[i], "%s", v);
			}
		}
	}
	fclose(f);
	report(0, 0, "CapInh=%s CapPrm=%s CapEff=%s CapBnd=%s CapAmb=%s",
	       found[0], found[1], found[2], found[3], found[4]);
	return 0;
}

static int cmd_nnp(int argc, char **argv)
{
	(void)argc; (void)argv;
	long v = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
	report(v, errno, v < 0 ? NULL : "nnp=%ld", v);
	return 0;
}

static int cmd_seccomp(int argc, char **argv)
{
	(void)argc; (void)argv;
	long v = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
	report(v, errno, v < 0 ? NULL : "seccomp=%ld", v);
	return 0;
}

static int cmd_ids(int argc, char **argv)
{
	(void)argc; (void)argv;
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	gid_t groups[256];
	getresuid(&ru, &eu, &su);
	getresgid(&rg, &eg, &sg);
	int n = getgroups(256, groups);
	char list[2048] = "";
	size_t off = 0;
	for (int i = 0; i < n && off < sizeof list - 16; i++)
		off += snprintf(list + off, sizeof list - off, "%s%u", i ? "," : "", groups[i]);
	report(0, 0, "uid=%u euid=%u suid=%u gid=%u egid=%u sgid=%u groups=%s",
	       ru, eu, su, rg, eg, sg, n > 0 ? list : "none");
	return 0;
}

static int cmd_rlimits(int argc, char **argv)
{
	(void)argc; (void)argv;
	static const struct { const char *name; int res; } lims[] = {
		{ "CPU", RLIMIT_CPU }, { "FSIZE", RLIMIT_FSIZE }, { "DATA", RLIMIT_DATA },
		{ "STACK", RLIMIT_STACK }, { "CORE", RLIMIT_CORE }, { "RSS", RLIMIT_RSS },
		{ "NPROC", RLIMIT_NPROC }, { "NOFILE", RLIMIT_NOFILE }, { "MEMLOCK", RLIMIT_MEMLOCK },
		{ "AS", RLIMIT_AS }, { "LOCKS", RLIMIT_LOCKS }, { "SIGPENDING", RLIMIT_SIGPENDING },
		{ "MSGQUEUE", RLIMIT_MSGQUEUE }, { "NICE", RLIMIT_NICE }, { "RTPRIO", RLIMIT_RTPRIO },
		{ "RTTIME", RLIMIT_RTTIME },
	};
	printf("ok");
	for (size_t i = 0; i < sizeof lims / sizeof lims[0]; i++) {
		struct rlimit rl;
		if (getrlimit(lims[i].res, &rl) < 0) {
			printf(" %s=errno:%s", lims[i].name, errname(errno));
			continue;
		}
		printf(" %s=", lims[i].name);
		if (rl.rlim_cur == RLIM_INFINITY)
			printf("unlimited");
		else
			printf("%llu", (unsigned long long)rl.rlim_cur);
		if (rl.rlim_max == RLIM_INFINITY)
			printf(":unlimited");
		else
			printf(":%llu", (unsigned long long)rl.rlim_max);
	}
	putchar('\n');
	fflush(stdout);
	return 0;
}

static int cmd_setuid(int argc, char **argv)
{
	long uid = argc > 0 ? parse_long(argv[0], "uid") : 0;
	/* Raw syscall: glibc's setuid() broadcasts to all threads; we want the one direct call. */
	long rc = syscall(SYS_setuid, uid);
	report(rc, errno, rc < 0 ? NULL : "uid=%u euid=%u", getuid(), geteuid());
	return 0;
}

static int cmd_setgid(int argc, char **argv)
{
	long gid = argc > 0 ? parse_long(argv[0], "gid") : 0;
	long rc = syscall(SYS_setgid, gid);
	report(rc, errno, rc < 0 ? NULL : "gid=%u egid=%u", getgid(), getegid());
	return 0;
}

static int cmd_setgroups(int argc, char **argv)
{
	(void)argc; (void)argv;
	gid_t zero = 0;
	report_call(syscall(SYS_setgroups, 1, &zero));
	return 0;
}

static int cmd_chown(int argc, char **argv)
{
	(void)argc;
	report_call(chown(argv[0], parse_long(argv[1], "uid"), parse_long(argv[2], "gid")));
	return 0;
}

static int cmd_sethostname(int argc, char **argv)
{
	const char *name = argc > 0 ? argv[0] : "gvh-probe";
	report_call(sethostname(name, strlen(name)));
	return 0;
}

/* ---- namespaces, ptrace, kernel interfaces ------------------------------------------------ */

static int ns_flag(const char *name)
{
	static const struct { const char *name; int flag; } table[] = {
		{ "user", CLONE_NEWUSER }, { "mount", CLONE_NEWNS }, { "net", CLONE_NEWNET },
		{ "pid", CLONE_NEWPID }, { "uts", CLONE_NEWUTS }, { "ipc", CLONE_NEWIPC },
		{ "cgroup", CLONE_NEWCGROUP },
	};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (!strcmp(name, table[i].name))
			return table[i].flag;
	fprintf(stderr, "sandbox-probe: unknown namespace %s\n", name);
	exit(USAGE_EXIT);
}

static int cmd_unshare(int argc, char **argv)
{
	report_call(unshare(ns_flag(argc > 0 ? argv[0] : "user")));
	return 0;
}

static int cmd_clone_userns(int argc, char **argv)
{
	(void)argc; (void)argv;
	/* Raw clone without a new stack behaves like fork: the child just exits. */
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0)
		_exit(0);
	if (pid < 0) {
		report_call(-1);
		return 0;
	}
	int status;
	waitpid(pid, &status, 0);
	report(0, 0, "child_status=%d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return 0;
}

static int cmd_ptrace_attach(int argc, char **argv)
{
	pid_t target;
	pid_t child = 0;
	if (argc > 0 && !strcmp(argv[0], "child")) {
		child = fork();
		if (child == 0) {
			for (;;)
				pause();
		}
		target = child;
	} else {
		target = argc > 0 ? parse_long(argv[0], "pid") : 1;
	}
	long rc = ptrace(PTRACE_ATTACH, target, 0, 0);
	int err = errno;
	if (rc == 0) {
		int status;
		waitpid(target, &status, __WALL);
		ptrace(PTRACE_DETACH, target, 0, 0);
	}
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	report(rc, err, "pid=%d", target);
	return 0;
}

static int cmd_keyctl(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "gvh-probe", 0, 0, 0));
	return 0;
}

static int cmd_add_key(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_add_key, "user", "gvh-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
	return 0;
}

static int cmd_bpf(int argc, char **argv)
{
	(void)argc; (void)argv;
	union bpf_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.map_type = BPF_MAP_TYPE_ARRAY;
	attr.key_size = 4;
	attr.value_size = 4;
	attr.max_entries = 1;
	report_call(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
	return 0;
}

static int cmd_perf_event_open(int argc, char **argv)
{
	(void)argc; (void)argv;
	struct perf_event_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.disabled = 1;
	report_call(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
	return 0;
}

static int cmd_userfaultfd(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_userfaultfd, O_CLOEXEC));
	return 0;
}

static int cmd_init_module(int argc, char **argv)
{
	(void)argc; (void)argv;
	/* Not a valid module: a permitted call fails with ENOEXEC, a denied one with EPERM/ENOSYS. */
	static char image[64];
	report_call(syscall(SYS_init_module, image, sizeof image, ""));
	return 0;
}

static int cmd_finit_module(int argc, char **argv)
{
	int fd = open(argc > 0 ? argv[0] : "/bin/busybox", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		report(-1, errno, "step=open");
		return 0;
	}
	report_call(syscall(SYS_finit_module, fd, "", 0));
	return 0;
}

static int cmd_kexec_load(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_kexec_load, 0, 0, NULL, 0));
	return 0;
}

/* ---- filesystem ---------------------------------------------------------------------------- */

static int cmd_write(int argc, char **argv)
{
	const char *text = argc > 1 ? argv[1] : "gvh-probe\n";
	int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		report(-1, errno, "step=open");
		return 0;
	}
	ssize_t n = write(fd, text, strlen(text));
	int err = errno;
	close(fd);
	report(n, err, n < 0 ? "step=write" : "bytes=%zd", n);
	return 0;
}

static int cmd_read(int argc, char **argv)
{
	long want = argc > 1 ? parse_long(argv[1], "bytes") : 1;
	int fd = open(argv[0], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		report(-1, errno, "step=open");
		return 0;
	}
	char buf[4096];
	if (want > (long)sizeof buf)
		want = sizeof buf;
	ssize_t n = read(fd, buf, want);
	int err = errno;
	close(fd);
	report(n, err, n < 0 ? "step=read" : "bytes=%zd", n);
	return 0;
}

static volatile sig_atomic_t got_sigxfsz;

static void on_sigxfsz(int sig)
{
	(void)sig;
	got_sigxfsz = 1;
}

static int cmd_fill(int argc, char **argv)
{
	long long target = parse_long(argv[1], "bytes");
	/* Catch SIGXFSZ so that a write past RLIMIT_FSIZE returns EFBIG and we can say so. */
	signal(SIGXFSZ, on_sigxfsz);
	int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		report(-1, errno, "step=open written=0 sigxfsz=0");
		return 0;
	}
	static char chunk[65536];
	memset(chunk, 'x', sizeof chunk);
	long long written = 0;
	long rc = 0;
	int err = 0;
	while (written < target) {
		long long left = target - written;
		size_t len = left < (long long)sizeof chunk ? (size_t)left : sizeof chunk;
		ssize_t n = write(fd, chunk, len);
		if (n < 0) {
			rc = -1;
			err = errno;
			break;
		}
		written += n;
	}
	if (rc == 0 && fsync(fd) < 0 && errno != EINVAL) {
		rc = -1;
		err = errno;
	}
	close(fd);
	(void)argc;
	report(rc, err, "written=%lld sigxfsz=%d", written, (int)got_sigxfsz);
	return 0;
}

static int cmd_fds(int argc, char **argv)
{
	long want = parse_long(argv[0], "count");
	long opened = 0;
	(void)argc;
	while (opened < want) {
		if (open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) < 0) {
			report(-1, errno, "opened=%ld", opened);
			return 0;
		}
		opened++;
	}
	report(0, 0, "opened=%ld", opened);
	return 0;
}

static int cmd_mount_tmpfs(int argc, char **argv)
{
	report_call(mount("tmpfs", argc > 0 ? argv[0] : "/mnt", "tmpfs", 0, "size=1m"));
	return 0;
}

static int cmd_mount_proc(int argc, char **argv)
{
	report_call(mount("proc", argc > 0 ? argv[0] : "/mnt", "proc", 0, NULL));
	return 0;
}

static int cmd_remount_root_rw(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(mount(NULL, "/", NULL, MS_REMOUNT, NULL));
	return 0;
}

static int cmd_chroot(int argc, char **argv)
{
	report_call(chroot(argc > 0 ? argv[0] : "/tmp"));
	return 0;
}

static int cmd_mknod(int argc, char **argv)
{
	mode_t type;
	(void)argc;
	if (!strcmp(argv[1], "b"))
		type = S_IFBLK;
	else if (!strcmp(argv[1], "c"))
		type = S_IFCHR;
	else {
		fprintf(stderr, "sandbox-probe: mknod type must be b or c\n");
		exit(USAGE_EXIT);
	}
	dev_t dev = makedev(parse_long(argv[2], "major"), parse_long(argv[3], "minor"));
	report_call(mknod(argv[0], type | 0600, dev));
	return 0;
}

static const char *fs_name(long type)
{
	switch (type) {
	case 0x01021994: return "tmpfs";
	case 0x794c7630: return "overlay";
	case 0xef53: return "ext4";
	case 0x9fa0: return "proc";
	case 0x62656572: return "sysfs";
	case 0x1cd1: return "devpts";
	default: return "other";
	}
}

static int cmd_statfs(int argc, char **argv)
{
	struct statfs st;
	(void)argc;
	if (statfs(argv[0], &st) < 0) {
		report_call(-1);
		return 0;
	}
	report(0, 0, "fstype=%s type=0x%lx bsize=%ld blocks=%llu bfree=%llu bavail=%llu flags=0x%lx",
	       fs_name(st.f_type), (long)st.f_type, (long)st.f_bsize,
	       (unsigned long long)st.f_blocks, (unsigned long long)st.f_bfree,
	       (unsigned long long)st.f_bavail, (long)st.f_flags);
	return 0;
}

/* ---- network ------------------------------------------------------------------------------- */

static int cmd_socket_raw(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
	return 0;
}

static int cmd_socket_packet(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x0003 /* ETH_P_ALL */)));
	return 0;
}

static int cmd_bind(int argc, char **argv)
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

static int cmd_connect(int argc, char **argv)
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

/* ---- resources ----------------------------------------------------------------------------- */

static int cmd_fork(int argc, char **argv)
{
	long want = parse_long(argv[0], "count");
	double hold = argc > 1 ? parse_long(argv[1], "hold_secs") : 0;
	pid_t *pids = calloc(want > 0 ? want : 1, sizeof *pids);
	long forked = 0;
	long rc = 0;
	int err = 0;
	while (forked < want) {
		pid_t pid = fork();
		if (pid == 0) {
			for (;;)
				pause();
		}
		if (pid < 0) {
			rc = -1;
			err = errno;
			break;
		}
		pids[forked++] = pid;
	}
	report(rc, err, "forked=%ld", forked);
	sleep_seconds(hold);
	for (long i = 0; i < forked; i++)
		kill(pids[i], SIGKILL);
	for (long i = 0; i < forked; i++)
		waitpid(pids[i], NULL, 0);
	return 0;
}

static int cmd_mem(int argc, char **argv)
{
	long mib = parse_long(argv[0], "mib");
	double hold = argc > 1 ? parse_long(argv[1], "hold_secs") : 0;
	long touched = 0;
	for (; touched < mib; touched++) {
		char *p = malloc(1 << 20);
		if (!p) {
			report(-1, ENOMEM, "touched_mib=%ld", touched);
			return 0;
		}
		/* Touch every page so the memory is really committed, not just reserved. */
		for (size_t off = 0; off < (1 << 20); off += 4096)
			p[off] = 1;
	}
	report(0, 0, "touched_mib=%ld", touched);
	sleep_seconds(hold);
	return 0;
}

static void spin_until(double deadline)
{
	volatile unsigned long x = 0;
	while (now_monotonic() < deadline)
		for (int i = 0; i < 100000; i++)
			x++;
}

static int cmd_spin(int argc, char **argv)
{
	double secs = parse_long(argv[0], "secs");
	long procs = argc > 1 ? parse_long(argv[1], "procs") : 1;
	double start = now_monotonic();
	double deadline = start + secs;
	for (long i = 1; i < procs; i++) {
		if (fork() == 0) {
			spin_until(deadline);
			_exit(0);
		}
	}
	spin_until(deadline);
	while (wait(NULL) > 0)
		;
	struct rusage self, children;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &children);
	long cpu_ms = (self.ru_utime.tv_sec + self.ru_stime.tv_sec + children.ru_utime.tv_sec +
		       children.ru_stime.tv_sec) * 1000 +
		      (self.ru_utime.tv_usec + self.ru_stime.tv_usec + children.ru_utime.tv_usec +
		       children.ru_stime.tv_usec) / 1000;
	report(0, 0, "wall_ms=%ld cpu_ms=%ld procs=%ld",
	       (long)((now_monotonic() - start) * 1000), cpu_ms, procs);
	return 0;
}

static int cmd_sleep(int argc, char **argv)
{
	(void)argc;
	long secs = parse_long(argv[0], "secs");
	sleep_seconds(secs);
	report(0, 0, "slept=%ld", secs);
	return 0;
}

static int cmd_uname(int argc, char **argv)
{
	(void)argc; (void)argv;
	struct utsname u;
	long rc = uname(&u);
	report(rc, errno, rc < 0 ? NULL : "sysname=%s release=%s machine=%s nodename=%s",
	       u.sysname, u.release, u.machine, u.nodename);
	return 0;
}

static int cmd_exit(int argc, char **argv)
{
	(void)argc;
	exit((int)parse_long(argv[0], "status"));
}

/* Drops to UID/GID (no supplementary groups) and runs the rest of the command line as a new
 * probe command: a non-root workload in runtimes whose `ctr run` has no --user. */
static int run_as(int argc, char **argv, char *self)
{
	if (argc < 3) {
		fprintf(stderr, "sandbox-probe as UID GID COMMAND [ARGS]\n");
		return USAGE_EXIT;
	}
	long uid = parse_long(argv[0], "uid");
	long gid = parse_long(argv[1], "gid");
	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
	    syscall(SYS_setresuid, uid, uid, uid) < 0) {
		report(-1, errno, "step=drop-privileges");
		return 0;
	}
	/* New argv: the GID slot becomes argv[0], followed by COMMAND and its arguments. */
	argv[1] = self;
	execv("/proc/self/exe", argv + 1);
	report(-1, errno, "step=exec");
	return 0;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

struct command {
	const char *name;
	int min_args, max_args;
	int (*run)(int argc, char **argv);
	const char *usage;
};

static const struct command commands[] = {
	{ "caps", 0, 0, cmd_caps, "CapInh/CapPrm/CapEff/CapBnd/CapAmb from /proc/self/status" },
	{ "nnp", 0, 0, cmd_nnp, "prctl(PR_GET_NO_NEW_PRIVS)" },
	{ "seccomp", 0, 0, cmd_seccomp, "prctl(PR_GET_SECCOMP)" },
	{ "ids", 0, 0, cmd_ids, "real/effective/saved uid and gid, supplementary groups" },
	{ "rlimits", 0, 0, cmd_rlimits, "every rlimit as soft:hard" },
	{ "setuid", 0, 1, cmd_setuid, "[UID=0] raw setuid" },
	{ "setgid", 0, 1, cmd_setgid, "[GID=0] raw setgid" },
	{ "setgroups", 0, 0, cmd_setgroups, "setgroups([0])" },
	{ "chown", 3, 3, cmd_chown, "PATH UID GID" },
	{ "sethostname", 0, 1, cmd_sethostname, "[NAME]" },
	{ "unshare", 0, 1, cmd_unshare, "[user|mount|net|pid|uts|ipc|cgroup] (default user)" },
	{ "clone-userns", 0, 0, cmd_clone_userns, "clone(CLONE_NEWUSER)" },
	{ "ptrace-attach", 0, 1, cmd_ptrace_attach, "[PID=1|child] PTRACE_ATTACH" },
	{ "keyctl", 0, 0, cmd_keyctl, "keyctl(KEYCTL_JOIN_SESSION_KEYRING)" },
	{ "add-key", 0, 0, cmd_add_key, "add_key(user) to the process keyring" },
	{ "bpf", 0, 0, cmd_bpf, "bpf(BPF_MAP_CREATE)" },
	{ "perf-event-open", 0, 0, cmd_perf_event_open, "perf_event_open(software cpu clock)" },
	{ "userfaultfd", 0, 0, cmd_userfaultfd, "userfaultfd()" },
	{ "init-module", 0, 0, cmd_init_module, "init_module(garbage image)" },
	{ "finit-module", 0, 1, cmd_finit_module, "[PATH=/bin/busybox] finit_module" },
	{ "kexec-load", 0, 0, cmd_kexec_load, "kexec_load(no segments)" },
	{ "write", 1, 2, cmd_write, "PATH [TEXT] create/truncate and write" },
	{ "read", 1, 2, cmd_read, "PATH [BYTES=1] open and read" },
	{ "fill", 2, 2, cmd_fill, "PATH BYTES write until BYTES or an error (ENOSPC, EFBIG)" },
	{ "fds", 1, 1, cmd_fds, "N open N descriptors (EMFILE)" },
	{ "mount-tmpfs", 0, 1, cmd_mount_tmpfs, "[DIR=/mnt]" },
	{ "mount-proc", 0, 1, cmd_mount_proc, "[DIR=/mnt]" },
	{ "remount-root-rw", 0, 0, cmd_remount_root_rw, "mount(MS_REMOUNT) of / without MS_RDONLY" },
	{ "chroot", 0, 1, cmd_chroot, "[DIR=/tmp]" },
	{ "mknod", 4, 4, cmd_mknod, "PATH b|c MAJOR MINOR" },
	{ "statfs", 1, 1, cmd_statfs, "PATH filesystem type and size" },
	{ "socket-raw", 0, 0, cmd_socket_raw, "socket(AF_INET, SOCK_RAW, ICMP)" },
	{ "socket-packet", 0, 0, cmd_socket_packet, "socket(AF_PACKET, SOCK_RAW)" },
	{ "bind", 0, 1, cmd_bind, "[PORT=80] TCP bind on 0.0.0.0" },
	{ "connect", 2, 3, cmd_connect, "IP PORT [TIMEOUT_MS=3000] TCP connect" },
	{ "fork", 1, 2, cmd_fork, "N [HOLD_SECS=0] fork N sleeping children and hold them" },
	{ "mem", 1, 2, cmd_mem, "MIB [HOLD_SECS=0] allocate and touch MIB MiB" },
	{ "spin", 1, 2, cmd_spin, "SECS [PROCS=1] burn CPU, report consumed CPU time" },
	{ "sleep", 1, 1, cmd_sleep, "SECS" },
	{ "uname", 0, 0, cmd_uname, "uname()" },
	{ "exit", 1, 1, cmd_exit, "STATUS exit with STATUS" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: sandbox-probe COMMAND [ARGS]\n"
		     "       sandbox-probe as UID GID COMMAND [ARGS]   (drop to UID/GID first)\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].usage);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return USAGE_EXIT;
	}
	if (!strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "as"))
		return run_as(argc - 2, argv + 2, argv[0]);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		const struct command *c = &commands[i];
		if (strcmp(argv[1], c->name))
			continue;
		int n = argc - 2;
		if (n < c->min_args || n > c->max_args) {
			fprintf(stderr, "sandbox-probe %s: %s\n", c->name, c->usage);
			return USAGE_EXIT;
		}
		return c->run(n, argv + 2);
	}
	fprintf(stderr, "sandbox-probe: unknown command %s\n", argv[1]);
	usage(stderr);
	return USAGE_EXIT;
}
