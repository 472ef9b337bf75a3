/* sandbox-probe: filesystem primitives. */
#include "probe.h"
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* ---- filesystem ---------------------------------------------------------------------------- */

int cmd_write(int argc, char **argv)
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

int cmd_read(int argc, char **argv)
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

int cmd_fill(int argc, char **argv)
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

int cmd_write_at(int argc, char **argv)
{
	long long offset = parse_long(argv[1], "offset");
	signal(SIGXFSZ, on_sigxfsz);
	int fd = open(argv[0], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		report(-1, errno, "step=open sigxfsz=0");
		return 0;
	}
	ssize_t n = pwrite(fd, "x", 1, offset);
	int err = errno;
	close(fd);
	(void)argc;
	report(n, err, "offset=%lld sigxfsz=%d", offset, (int)got_sigxfsz);
	return 0;
}

int cmd_fds(int argc, char **argv)
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

int cmd_mount_tmpfs(int argc, char **argv)
{
	report_call(mount("tmpfs", argc > 0 ? argv[0] : "/mnt", "tmpfs", 0, "size=1m"));
	return 0;
}

int cmd_mount_proc(int argc, char **argv)
{
	report_call(mount("proc", argc > 0 ? argv[0] : "/mnt", "proc", 0, NULL));
	return 0;
}

int cmd_remount_root_rw(int argc, char **argv)
{
	(void)argc; (void)argv;
	report_call(mount(NULL, "/", NULL, MS_REMOUNT, NULL));
	return 0;
}

int cmd_chroot(int argc, char **argv)
{
	report_call(chroot(argc > 0 ? argv[0] : "/tmp"));
	return 0;
}

int cmd_mknod(int argc, char **argv)
{
	mode_t type;
	(void)argc;
	if (!strcmp(argv[1], "b"))
		type = S_IFBLK;
	else if (!strcmp(argv[1], "c"))
		type = S_IFCHR;
	else if (!strcmp(argv[1], "p"))
		type = S_IFIFO;
	else {
		fprintf(stderr, "sandbox-probe: mknod type must be b, c or p\n");
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

int cmd_statfs(int argc, char **argv)
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
