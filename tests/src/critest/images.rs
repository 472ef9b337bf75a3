//! Stand-ins for the images the CRI validation suite pulls, built from the host's busybox and
//! served by the test registry under the suite's own repository paths (the test containerd
//! sends `gcr.io/k8s-staging-cri-tools/x` to it as `k8s-staging-cri-tools/x`). What each suite
//! image must be for its specs is in its config: the user (`test-image-user-*`, the predefined
//! group), distinct contents (three images behind three tags, one image behind three tags), a
//! small static web server in place of nginx and httpd, a setuid program for the
//! no-new-privileges specs, and `pgrep` and `ipcs`, which this busybox lacks. The image the suite names by a digest of the real one cannot be made: that spec
//! fails under every runtime, as the harness's.

use std::process::Command;

use serde_json::json;

use super::registry::Registry;
use crate::error::{HarnessError, Result};
use crate::image::oci::{
    oci_architecture, tar_of, Entry, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE,
};

const BUSYBOX: &str = "/usr/bin/busybox";

/// One image: where the suite looks for it, and what its config says.
struct Image {
    repository: &'static str,
    tags: &'static [&'static str],
    user: &'static str,
    cmd: &'static [&'static str],
    /// Makes otherwise equal images distinct (their config digest is their id).
    label: &'static str,
}

/// The suite's images (pkg/validate/consts.go, pkg/framework/util.go of cri-tools v1.37.0).
fn images() -> Vec<Image> {
    let shell: &[&str] = &["sh"];
    let httpd: &[&str] = &["/usr/sbin/nginx", "80", "master process"];
    let plain = |repository, tags| Image {
        repository,
        tags,
        user: "",
        cmd: shell,
        label: repository,
    };
    let user = |repository, user| Image {
        repository,
        tags: &["latest"],
        user,
        cmd: shell,
        label: repository,
    };
    vec![
        plain("e2e-test-images/busybox", &["1.29-2", "latest"]),
        plain("pause", &["3.9"]),
        Image {
            repository: "e2e-test-images/nginx",
            tags: &["1.14-2"],
            user: "",
            cmd: httpd,
            label: "nginx",
        },
        Image {
            repository: "e2e-test-images/httpd",
            tags: &["2.4.39-4"],
            user: "",
            cmd: httpd,
            label: "httpd",
        },
        Image {
            repository: "e2e-test-images/nonewprivs",
            tags: &["1.3"],
            user: "",
            cmd: &["/usr/local/bin/nnp"],
            label: "nonewprivs",
        },
        Image {
            repository: "k8s-staging-cri-tools/hostnet-nginx-amd64",
            tags: &["latest"],
            user: "",
            // The suite's host-network web server listens on 12003, not on the host's port 80.
            cmd: &["/usr/sbin/nginx", "12003", "master process"],
            label: "hostnet-nginx",
        },
        user("k8s-staging-cri-tools/test-image-user-uid", "1002"),
        user("k8s-staging-cri-tools/test-image-user-username", "www-data"),
        user(
            "k8s-staging-cri-tools/test-image-user-uid-group",
            "1003:1003",
        ),
        user(
            "k8s-staging-cri-tools/test-image-user-username-group",
            "www-data:www-data",
        ),
        user("k8s-staging-cri-tools/test-image-predefined-group", "1000"),
        plain("k8s-staging-cri-tools/test-image-latest", &["latest"]),
        plain("k8s-staging-cri-tools/test-image-tag", &["test", "all"]),
        plain("k8s-staging-cri-tools/test-image-1", &["latest"]),
        plain("k8s-staging-cri-tools/test-image-2", &["latest"]),
        plain("k8s-staging-cri-tools/test-image-3", &["latest"]),
        plain("k8s-staging-cri-tools/test-image-tags", &["1", "2", "3"]),
    ]
}

/// Small static programs the suite runs that this busybox lacks, and the setuid program of its
/// no-new-privileges image: (path in the image, mode, C source).
const PROGRAMS: &[(&str, u32, &str)] = &[
    // `pgrep NAME`: the pids whose comm is NAME (execSync with a timeout checks no sleep is left).
    (
        "bin/pgrep",
        0o755,
        r#"#include <dirent.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        char path[300], comm[256] = "";
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        if (strcmp(comm, argv[1]) == 0) { printf("%s\n", e->d_name); found = 1; }
    }
    return found ? 0 : 1;
}
"#,
    ),
    // `ipcs -m`: the System V shared memory segments (the host IPC namespace spec looks for one).
    (
        "bin/ipcs",
        0o755,
        r#"#include <stdio.h>
int main(void) {
    FILE *f = fopen("/proc/sysvipc/shm", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) fputs(line, stdout);
    return 0;
}
"#,
    ),
    // nginx's and httpd's stand-in, `nginx PORT [WORDS...]`: its pid in /var/run/nginx.pid, a
    // line naming both on stderr, one fixed page for every request. Its name and command line
    // are what the PID namespace specs look for (`pidof nginx`, "master process" in
    // /proc/1/cmdline).
    (
        "usr/sbin/nginx",
        0o755,
        r#"#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 80;
    FILE *pid = fopen("/var/run/nginx.pid", "w");
    if (pid) { fprintf(pid, "%d\n", getpid()); fclose(pid); }
    int s = socket(AF_INET6, SOCK_STREAM, 0), no = 0, yes = 1;
    setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    struct sockaddr_in6 a = {0};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 64)) { perror("nginx"); return 1; }
    /* What the real servers print at start names them (the multi-container log spec). */
    fprintf(stderr, "web server stand-in (nginx, httpd) listening on port %d\n", port);
    const char *page = "<h1>Welcome to nginx (a stand-in)</h1>\n";
    char head[256], buf[4096];
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", strlen(page));
    for (;;) {
        int c = accept(s, 0, 0);
        if (c < 0) continue;
        if (read(c, buf, sizeof buf) >= 0) {
            write(c, head, strlen(head));
            write(c, page, strlen(page));
        }
        close(c);
    }
}
"#,
    ),
    // nonewprivs: a setuid-root program saying its effective uid.
    (
        "usr/local/bin/nnp",
        0o4755,
        r#"#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\n", geteuid()); return 0; }
"#,
    ),
];

fn compile(name: &str, source: &str) -> Result<Vec<u8>> {
    let dir = tempfile::tempdir().map_err(|e| HarnessError::io("creating", "a build dir", e))?;
    let (src, out) = (dir.path().join(format!("{name}.c")), dir.path().join(name));
    std::fs::write(&src, source).map_err(|e| HarnessError::io("writing", &src, e))?;
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map_err(|e| HarnessError::io("running", "gcc", e))?;
    if !status.success() {
        return Err(HarnessError::Image(format!(
            "gcc {}: {status}",
            src.display()
        )));
    }
    std::fs::read(&out).map_err(|e| HarnessError::io("reading", &out, e))
}

/// The root filesystem every stand-in shares: busybox with all its applets as hard links (a
/// masked `/bin/ls` must not mask the shell), the programs above, and the users and groups the
/// suite's images have.
fn layer() -> Result<Vec<u8>> {
    let busybox = std::fs::read(BUSYBOX).map_err(|e| HarnessError::io("reading", BUSYBOX, e))?;
    let list = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .map_err(|e| HarnessError::io("running", BUSYBOX, e))?;
    let mut entries = vec![
        Entry::dir("bin", 0o755),
        Entry::dir("dev", 0o755),
        Entry::dir("etc", 0o755),
        Entry::dir("proc", 0o755),
        Entry::dir("root", 0o700),
        Entry::dir("sys", 0o755),
        Entry::dir("tmp", 0o1777),
        Entry::dir("usr", 0o755),
        Entry::dir("usr/local", 0o755),
        Entry::dir("usr/sbin", 0o755),
        Entry::dir("usr/local/bin", 0o755),
        Entry::dir("var", 0o755),
        Entry::dir("var/run", 0o755),

        Entry::file("bin/busybox", 0o755, busybox),
        Entry::file(
            "etc/passwd",
            0o644,
            "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/sh\ndefault-user:x:1000:1000:default-user:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        Entry::file(
            "etc/group",
            0o644,
            "root:x:0:\nwww-data:x:33:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\nnobody:x:65534:\n",
        ),
        Entry::file("etc/hosts", 0o644, "127.0.0.1\tlocalhost\n"),
    ];
    let own: Vec<&str> = PROGRAMS.iter().map(|(p, _, _)| *p).collect();
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        let path = format!("bin/{applet}");
        if applet != "busybox" && !own.contains(&path.as_str()) {
            entries.push(Entry::hardlink(&path, "bin/busybox"));
        }
    }
    for (path, mode, source) in PROGRAMS {
        let name = path.rsplit('/').next().unwrap_or(path);
        entries.push(Entry::file(path, *mode, compile(name, source)?));
    }
    tar_of(&entries).map_err(|e| HarnessError::Image(format!("writing the critest layer: {e}")))
}

/// Builds every stand-in and serves it from `registry`.
pub fn publish(registry: &Registry) -> Result<()> {
    let layer = layer()?;
    let layer_size = layer.len();
    let layer_digest = registry.put_blob(layer, LAYER_MEDIA_TYPE);
    for image in images() {
        let config = serde_json::to_vec(&json!({
            "architecture": oci_architecture(),
            "os": "linux",
            "config": {
                "User": image.user,
                "Env": ["PATH=/bin"],
                "Cmd": image.cmd,
                "WorkingDir": "/",
                "Labels": {"dev.gvisor-hardened.critest.image": image.label},
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }))
        .expect("a JSON value serialises");
        let config_size = config.len();
        let config_digest = registry.put_blob(config, CONFIG_MEDIA_TYPE);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer_size}],
        }))
        .expect("a JSON value serialises");
        let digest = registry.put_blob(manifest, MANIFEST_MEDIA_TYPE);
        for tag in image.tags {
            registry.tag(image.repository, tag, &digest);
        }
    }
    Ok(())
}
