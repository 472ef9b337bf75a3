/* sandbox-probe: file-count primitives. */
#include "probe.h"
#include <fcntl.h>
#include <unistd.h>

/*
 * files DIR N [EVERY]: create empty files DIR/f0, DIR/f1, ... until N exist or creation fails.
 * Prints "ok progress=1 created=K" every EVERY files (default 5000, flushed, so a sandbox that is
 * killed mid-way still shows how far it got), then "ok created=N" or "errno NAME created=K".
 */
int cmd_files(int argc, char **argv)
{
	const char *dir = argv[0];
	long want = parse_long(argv[1], "count");
	long every = argc > 2 ? parse_long(argv[2], "every") : 5000;
	char path[4096];
	long created = 0;
	for (; created < want; created++) {
		snprintf(path, sizeof path, "%s/f%ld", dir, created);
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0) {
			report(-1, errno, "created=%ld", created);
			return 0;
		}
		close(fd);
		if (every > 0 && (created + 1) % every == 0)
			report(0, 0, "progress=1 created=%ld", created + 1);
	}
	report(0, 0, "created=%ld", created);
	return 0;
}
