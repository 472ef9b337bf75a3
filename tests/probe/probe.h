/*
 * sandbox-probe: shared declarations. See probe.c for the output format.
 */
#ifndef SANDBOX_PROBE_H
#define SANDBOX_PROBE_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Exit status of a usage error (bad arguments, unknown command). */
#define USAGE_EXIT 2

const char *errname(int e);
/* Prints the outcome line: "ok" when rc >= 0, else "errno NAME(err)"; then the details. */
void report(long rc, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reports a single syscall result: rc < 0 means failure with the current errno. */
void report_call(long rc);
/* Parses an integer argument or exits with USAGE_EXIT naming `what`. */
long parse_long(const char *s, const char *what);
double now_monotonic(void);
void sleep_seconds(double secs);

/* Subcommands: argc/argv are the arguments after the subcommand name. */
int cmd_caps(int argc, char **argv);
int cmd_nnp(int argc, char **argv);
int cmd_seccomp(int argc, char **argv);
int cmd_ids(int argc, char **argv);
int cmd_rlimits(int argc, char **argv);
int cmd_setrlimit(int argc, char **argv);
int cmd_setuid(int argc, char **argv);
int cmd_setgid(int argc, char **argv);
int cmd_setgroups(int argc, char **argv);
int cmd_chown(int argc, char **argv);
int cmd_sethostname(int argc, char **argv);
int cmd_unshare(int argc, char **argv);
int cmd_clone_userns(int argc, char **argv);
int cmd_ptrace_attach(int argc, char **argv);
int cmd_keyctl(int argc, char **argv);
int cmd_add_key(int argc, char **argv);
int cmd_bpf(int argc, char **argv);
int cmd_perf_event_open(int argc, char **argv);
int cmd_userfaultfd(int argc, char **argv);
int cmd_init_module(int argc, char **argv);
int cmd_finit_module(int argc, char **argv);
int cmd_kexec_load(int argc, char **argv);
int cmd_write(int argc, char **argv);
int cmd_read(int argc, char **argv);
int cmd_fill(int argc, char **argv);
int cmd_files(int argc, char **argv);
int cmd_write_at(int argc, char **argv);
int cmd_fds(int argc, char **argv);
int cmd_mount_tmpfs(int argc, char **argv);
int cmd_mount_proc(int argc, char **argv);
int cmd_remount_root_rw(int argc, char **argv);
int cmd_chroot(int argc, char **argv);
int cmd_mknod(int argc, char **argv);
int cmd_statfs(int argc, char **argv);
int cmd_socket_raw(int argc, char **argv);
int cmd_socket_packet(int argc, char **argv);
int cmd_bind(int argc, char **argv);
int cmd_listen(int argc, char **argv);
int cmd_ifaces(int argc, char **argv);
int cmd_connect(int argc, char **argv);
int cmd_connect_unix(int argc, char **argv);
int cmd_http_get(int argc, char **argv);
int cmd_http_connect(int argc, char **argv);
int cmd_http_hold(int argc, char **argv);
int cmd_http_flood(int argc, char **argv);
int cmd_http_stall(int argc, char **argv);
int cmd_http_send_close(int argc, char **argv);
int cmd_fork(int argc, char **argv);
int cmd_mem(int argc, char **argv);
int cmd_spin(int argc, char **argv);
int cmd_sleep(int argc, char **argv);
int cmd_uname(int argc, char **argv);
int cmd_exit(int argc, char **argv);

#endif
