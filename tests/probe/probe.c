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
 * Built from the .c files beside this one with `gcc -static` by the tests crate's build.rs, so
 * it runs in an image without libc.
 */
#include "probe.h"
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *errname(int e)
{
	const char *name = strerrorname_np(e);
	return name ? name : "EUNKNOWN";
}

/* Prints the outcome line: "ok" or "errno NAME", then the optional key=value details. */
void report(long rc, int err, const char *fmt, ...)
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
void report_call(long rc)
{
	report(rc, errno, NULL);
}

long parse_long(const char *s, const char *what)
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

double now_monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void sleep_seconds(double secs)
{
	struct timespec ts = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

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

/*
 * Waits for a line (or end of file) on stdin, then runs COMMAND (a path and its arguments).
 * Tests use it to hold a workload until the runtime reported it started: a workload that ends
 * before its start is acknowledged tests the runtime's start/exit ordering, not the workload.
 */
static int run_gated(int argc, char **argv)
{
	if (argc < 1) {
		fprintf(stderr, "sandbox-probe gate COMMAND [ARGS]\n");
		return USAGE_EXIT;
	}
	char c;
	ssize_t n;
	while ((n = read(0, &c, 1)) > 0 && c != '\n')
		;
	if (n < 0)
		fprintf(stderr, "sandbox-probe gate: reading stdin: %s\n", errname(errno));
	execv(argv[0], argv);
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
	{ "setrlimit", 3, 3, cmd_setrlimit, "NOFILE|FSIZE|CORE|NPROC|AS SOFT HARD (number or unlimited)" },
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
	{ "files", 2, 3, cmd_files, "DIR N [EVERY=5000] create empty files until N or an error, progress every EVERY" },
	{ "write-at", 2, 2, cmd_write_at, "PATH OFFSET write one byte at OFFSET (EFBIG past RLIMIT_FSIZE)" },
	{ "fds", 1, 1, cmd_fds, "N open N descriptors (EMFILE)" },
	{ "mount-tmpfs", 0, 1, cmd_mount_tmpfs, "[DIR=/mnt]" },
	{ "mount-proc", 0, 1, cmd_mount_proc, "[DIR=/mnt]" },
	{ "remount-root-rw", 0, 0, cmd_remount_root_rw, "mount(MS_REMOUNT) of / without MS_RDONLY" },
	{ "chroot", 0, 1, cmd_chroot, "[DIR=/tmp]" },
	{ "mknod", 4, 4, cmd_mknod, "PATH b|c|p MAJOR MINOR (p: a FIFO, numbers ignored)" },
	{ "statfs", 1, 1, cmd_statfs, "PATH filesystem type and size" },
	{ "socket-raw", 0, 0, cmd_socket_raw, "socket(AF_INET, SOCK_RAW, ICMP)" },
	{ "socket-packet", 0, 0, cmd_socket_packet, "socket(AF_PACKET, SOCK_RAW)" },
	{ "bind", 0, 1, cmd_bind, "[PORT=80] TCP bind on 0.0.0.0" },
	{ "listen", 2, 2, cmd_listen, "PORT SECS listen on 0.0.0.0:PORT, accept for SECS" },
	{ "ifaces", 0, 0, cmd_ifaces, "network interfaces (getifaddrs)" },
	{ "connect", 2, 3, cmd_connect, "IP PORT [TIMEOUT_MS=3000] TCP connect" },
	{ "connect-unix", 1, 1, cmd_connect_unix, "PATH connect to a unix stream socket" },
	{ "http-get", 5, 5, cmd_http_get, "PROXY HOST PORT PATH N absolute-URI GETs via PROXY, timed (http.c)" },
	{ "http-connect", 5, 5, cmd_http_connect, "PROXY HOST PORT PATH N CONNECT + ClientHello + GET, timed" },
	{ "http-hold", 5, 5, cmd_http_hold, "PROXY HOST PORT N SECS hold N CONNECT tunnels open" },
	{ "http-stall", 4, 4, cmd_http_stall, "PROXY HOST PORT N open N tunnels, upload into each until it blocks, exit" },
	{ "http-send-close", 4, 4, cmd_http_send_close, "PROXY HOST PORT N open N tunnels, send a short request on each, exit" },
	{ "http-flood", 5, 5, cmd_http_flood, "PROXY HOST PORT N SECS open N CONNECTs at once, count the answers" },
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
		     "       sandbox-probe as UID GID COMMAND [ARGS]   (drop to UID/GID first)\n"
		     "       sandbox-probe gate PATH [ARGS]            (wait for a line on stdin, then exec PATH)\n");
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
	if (!strcmp(argv[1], "gate"))
		return run_gated(argc - 2, argv + 2);
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
