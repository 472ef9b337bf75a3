/* sandbox-probe: identity, privileges, namespaces and kernel interfaces. */
#include "probe.h"
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- identity and privileges ------------------------------------------------------------ */

int cmd_caps(int argc, char **argv)
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

int cmd_nnp(int argc, char **argv)
{
	(void)argc; (void)argv;
	long v = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
	report(v, errno, v < 0 ? NULL : "nnp=%ld", v);
	return 0;
}

int cmd_seccomp(int argc, char **argv)
{
	(void)argc; (void)argv;
	long v = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
	report(v, errno, v < 0 ? NULL : "seccomp=%ld", v);
	return 0;
}

int cmd_ids(int argc, char **argv)
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

int cmd_rlimits(int argc, char **argv)
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

int cmd_setrlimit(int argc, char **argv)
{
	static const struct { const char *name; int res; } lims[] = {
		{ "NOFILE", RLIMIT_NOFILE }, { "FSIZE", RLIMIT_FSIZE }, { "CORE", RLIMIT_CORE },
		{ "NPROC", RLIMIT_NPROC }, { "AS", RLIMIT_AS },
	};
	int res = -1;
	(void)argc;
	for (size_t i = 0; i < sizeof lims / sizeof lims[0]; i++)
		if (!strcmp(argv[0], lims[i].name))
			res = lims[i].res;
	if (res < 0) {
		fprintf(stderr, "sandbox-probe: unknown rlimit %s\n", argv[0]);
		exit(USAGE_EXIT);
	}
	struct rlimit rl;
	rl.rlim_cur = strcmp(argv[1], "unlimited") ? (rlim_t)parse_long(argv[1], "soft") : RLIM_INFINITY;
	rl.rlim_max = strcmp(argv[2], "unlimited") ? (rlim_t)parse_long(argv[2], "hard") : RLIM_INFINITY;
	report_call(setrlimit(res, &rl));
	return 0;
}

int cmd_setuid(int argc, char **argv)
{
	long uid = argc > 0 ? parse_long(argv[0], "uid") : 0;
	/* Raw syscall: glibc's setuid() broadcasts to all threads; we want the one direct call. */
	long rc = syscall(SYS_setuid, uid);
	report(rc, errno, rc < 0 ? NULL : "uid=%u euid=%u", getuid(), geteuid());
	return 0;
}

int cmd_setgid(int argc, char **argv)
{
	long gid = argc > 0 ? parse_long(argv[0], "gid") : 0;
	long rc = syscall(SYS_setgid, gid);
	report(rc, errno, rc < 0 ? NULL : "gid=%u egid=%u", getgid(), getegid());
	return 0;
}

int cmd_setgroups(int argc, char **argv)
{
	(void)argc; (void)argv;
	gid_t zero = 0;
	report_call(syscall(SYS_setgroups, 1, &zero));
	return 0;
}

int cmd_chown(int argc, char **argv)
{
	(void)argc;
	report_call(chown(argv[0], parse_long(argv[1], "uid"), parse_long(argv[2], "gid")));
	return 0;
}

int cmd_sethostname(int argc, char **argv)
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

int cmd_unshare(int argc, char **argv)
{
	report_call(unshare(ns_flag(argc > 0 ? argv[0] : "user")));
	return 0;
}

int cmd_clone_userns(int argc, char **argv)
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

int cmd_ptrace_attach(int argc, char **argv)
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

int cmd_keyctl(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "gvh-probe", 0, 0, 0));
	return 0;
}

int cmd_add_key(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_add_key, "user", "gvh-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
	return 0;
}

int cmd_bpf(int argc, char **argv)
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

int cmd_perf_event_open(int argc, char **argv)
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

int cmd_userfaultfd(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_userfaultfd, O_CLOEXEC));
	return 0;
}

int cmd_init_module(int argc, char **argv)
{
	(void)argc; (void)argv;
	/* Not a valid module: a permitted call fails with ENOEXEC, a denied one with EPERM/ENOSYS. */
	static char image[64];
	report_call(syscall(SYS_init_module, image, sizeof image, ""));
	return 0;
}

int cmd_finit_module(int argc, char **argv)
{
	int fd = open(argc > 0 ? argv[0] : "/bin/busybox", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		report(-1, errno, "step=open");
		return 0;
	}
	report_call(syscall(SYS_finit_module, fd, "", 0));
	return 0;
}

int cmd_kexec_load(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(syscall(SYS_kexec_load, 0, 0, NULL, 0));
	return 0;
}
