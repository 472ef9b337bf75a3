/* sandbox-probe: resource primitives (processes, memory, CPU) and misc. */
#include "probe.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- resources ----------------------------------------------------------------------------- */

int cmd_fork(int argc, char **argv)
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

int cmd_mem(int argc, char **argv)
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

int cmd_spin(int argc, char **argv)
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

int cmd_sleep(int argc, char **argv)
{
	(void)argc;
	long secs = parse_long(argv[0], "secs");
	sleep_seconds(secs);
	report(0, 0, "slept=%ld", secs);
	return 0;
}

int cmd_uname(int argc, char **argv)
{
	(void)argc; (void)argv;
	struct utsname u;
	long rc = uname(&u);
	report(rc, errno, rc < 0 ? NULL : "sysname=%s release=%s machine=%s nodename=%s",
	       u.sysname, u.release, u.machine, u.nodename);
	return 0;
}

int cmd_exit(int argc, char **argv)
{
	(void)argc;
	exit((int)parse_long(argv[0], "status"));
}

/* Drops to UID/GID (no supplementary groups) and runs the rest of the command line as a new
 * probe command: a non-root workload in runtimes whose `ctr run` has no --user. */
