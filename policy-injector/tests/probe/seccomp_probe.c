/* Probes what the injected seccomp profile does inside a runsc sandbox. One line per check:
 * "<check>: r=<return> errno=<errno>". Built static so the bundle's rootfs needs nothing else. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static void *thread_main(void *arg) { return arg; }

static void report(const char *what, long r) {
    printf("%s: r=%ld errno=%d\n", what, r < 0 ? -1L : r, r < 0 ? errno : 0);
    fflush(stdout);
}

int main(void) {
    uint64_t clone_args[11] = {0}; /* struct clone_args, all zero: a plain fork */
    errno = 0;
    long r = syscall(435 /* clone3 */, clone_args, sizeof(clone_args));
    if (r == 0) _exit(0);
    report("clone3", r);

    errno = 0;
    r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (r == 0) _exit(0);
    report("clone_newuser", r);

    errno = 0;
    report("unshare_newuser", unshare(CLONE_NEWUSER));

    errno = 0;
    report("unshare_newns", unshare(CLONE_NEWNS));

    errno = 0;
    report("unshare_newcgroup", unshare(CLONE_NEWCGROUP));

    errno = 0;
    report("mknod_block", mknod("/tmp/blk", S_IFBLK | 0600, makedev(8, 0)));

    errno = 0;
    report("mknodat_char", mknodat(AT_FDCWD, "/tmp/chr", S_IFCHR | 0600, makedev(1, 1)));

    errno = 0;
    report("mkfifo", mkfifo("/tmp/fifo", 0600));

    errno = 0;
    report("ptrace", syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));

    errno = 0;
    report("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));

    pthread_t t;
    int e = pthread_create(&t, NULL, thread_main, NULL);
    if (e == 0) pthread_join(t, NULL);
    printf("pthread_create: r=%d errno=0\n", e);

    pid_t p = fork();
    if (p == 0) _exit(7);
    int status = 0;
    waitpid(p, &status, 0);
    printf("fork_child_exit: r=%d errno=0\n", p > 0 ? WEXITSTATUS(status) : -1);
    return 0;
}
