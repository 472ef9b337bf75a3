//! Credentials that never enter the sandbox, with real parts:
//!
//! - Through the real forwarder (on the host, so stock TLS clients can drive it) and the shim's
//!   proxy with the sandbox's CA: curl, Python's `urllib` and git (a clone over dumb HTTP),
//!   trusting only the CA bundle the shim writes, reach a TLS upstream in a network namespace
//!   the test creates (Python's `ssl`, a certificate of the test's own CA given as
//!   `upstream_ca`), which answers only when the planted key arrived in `x-api-key`; the
//!   workload's own `x-api-key` never arrives; a method outside the rules is refused with the
//!   reason in the status line; the key is in no record and not in the bundle.
//! - From inside a real sandbox, through `ctr` with the shim and runsc, a CRI pod, and Docker
//!   and Podman with runsc-hardened: curl and git (over HTTPS) in the sandbox reach the same
//!   upstream through the allowlist, trusting the CA bundle the sandbox gets read-only through
//!   the CA variables; the upstream saw the key on every request and never the workload's own;
//!   afterwards the sandbox's processes' environments, the bundle and its files hold no key,
//!   and the bundle's host file goes with the sandbox.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gvisor_hardened_core::egress::audit::{EgressEvent, MemorySink, SandboxRef, Verdict};
use gvisor_hardened_core::egress::credentials::{write_bundle, SandboxCa};
use gvisor_hardened_core::egress::guard::Guard;
use gvisor_hardened_core::egress::net::{NetnsDialer, SystemResolver};
use gvisor_hardened_core::egress::supervisor::{ForwarderIo, ForwarderPipes, ForwarderSpawner};
use gvisor_hardened_core::egress::{EgressSupervisor, Proxy, SupervisorOptions};
use gvisor_hardened_tests::audit_tools::validate_against_schema;
use gvisor_hardened_tests::cri::{container_config, CriContainerd, CriOptions, HARDENED_HANDLER};
use gvisor_hardened_tests::docker::{assert_clean_docker_shutdown, DockerOptions, Dockerd};
use gvisor_hardened_tests::egress::{
    egress_section, forwarder_binary, on_default_forwarder, UpstreamNetns,
};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::inspect::processes_mentioning;
use gvisor_hardened_tests::podman::{assert_clean_podman_shutdown, Podman};
use gvisor_hardened_tests::*;
use policy_injector::{EgressPlan, Policy};

const WAIT: Duration = Duration::from_secs(20);
const HOST: &str = "api.example.test";
const SECRET: &str = "sk-planted-credential-9c41e7";

/// Standard base64, so the key is not on the sandbox's command line in the clear.
fn base64_of(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in s.as_bytes().chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The forwarder as a plain host process listening on `listen`.
struct HostForwarder {
    listen: String,
}

#[async_trait]
impl ForwarderSpawner for HostForwarder {
    async fn spawn(&self) -> std::io::Result<ForwarderIo> {
        let mut child = tokio::process::Command::new(forwarder_binary())
            .args(["--listen", &self.listen])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let pid = child.id().unwrap() as i32;
        Ok(ForwarderIo {
            pipes: ForwarderPipes::Streams {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
            },
            exited: Box::pin(async move { format!("{:?}", child.wait().await) }),
            kill: Box::new(move || {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                Box::pin(async {})
            }),
        })
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (hack/lib.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The upstream's CA and its leaf for [`HOST`], in `dir`: ca.pem, leaf.pem, leaf.key.
fn upstream_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=gvh test upstream CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=api.example.test"];
    csr.extend(ec);
    csr.extend(["-keyout", "leaf.key", "-out", "leaf.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:api.example.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ],
    );
}

/// The upstream: Python's `ssl` inside the test's namespace; answers 200 "key ok" when the
/// request's `x-api-key` equals the key file's value, 401 otherwise; appends every head it got
/// to `heads`; serves the bare repository under `root` as files; creates `ready` once it listens.
const UPSTREAM: &str = r#"
import socket, ssl, sys
import os
addr, port, cert, key, keyfile, heads, root, ready = sys.argv[1:9]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, int(port)))
s.listen(64)
open(ready, "w").close()
while True:
    c, _ = s.accept()
    try:
        t = ctx.wrap_socket(c, server_side=True)
        data = b""
        while b"\r\n\r\n" not in data:
            d = t.recv(4096)
            if not d:
                break
            data += d
        head = data.split(b"\r\n\r\n")[0].decode()
        with open(heads, "a") as f:
            f.write(head + "\n----\n")
        want = open(keyfile).read().strip()
        got = [l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if l.lower().startswith("x-api-key:")]
        ok = got == [want]
        path = head.split(" ")[1].split("?")[0]
        status, body = (200, b"key ok") if ok else (401, b"key missing")
        if ok and path.startswith("/repo.git/"):
            # A bare repository served as files: git's dumb HTTP protocol.
            f = os.path.normpath(os.path.join(root, path.lstrip("/")))
            if f.startswith(root + "/") and os.path.isfile(f):
                body = open(f, "rb").read()
            else:
                status, body = 404, b"no such file"
        t.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(body)) + body)
        t.close()
    except Exception as e:
        print(e, file=sys.stderr, flush=True)
"#;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// [`UPSTREAM`] serving [`HOST`] on `addr:443` inside a network namespace, with its own CA,
/// the planted key's file and a bare repository holding one commit (README: "through the
/// proxy").
struct TlsUpstream {
    dir: tempfile::TempDir,
    server: Option<Server>,
}

impl TlsUpstream {
    /// The CA, the key file and the repository; nothing served yet ([`TlsUpstream::serve`]).
    fn new() -> TlsUpstream {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        upstream_certificates(d);
        std::fs::write(d.join("api-key"), format!("{SECRET}\n")).unwrap();
        let git = |args: &[&str], dir: &Path| {
            let (ok, out) = run(Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.test"]) // net-scan: data
                .args(args)
                .current_dir(dir));
            assert!(ok, "git {args:?}: {out}");
        };
        std::fs::create_dir_all(d.join("src")).unwrap();
        std::fs::write(d.join("src/README"), "through the proxy\n").unwrap();
        git(&["init", "-q", "-b", "main", "."], &d.join("src"));
        git(&["add", "README"], &d.join("src"));
        git(&["commit", "-q", "-m", "one"], &d.join("src"));
        std::fs::create_dir_all(d.join("www")).unwrap();
        git(&["clone", "-q", "--bare", "src", "www/repo.git"], d);
        git(&["update-server-info"], &d.join("www/repo.git"));
        TlsUpstream { dir, server: None }
    }

    /// Serves on `addr:443` inside the network namespace at `netns`.
    fn serve(&mut self, netns: &Path, addr: &str) {
        let d = self.dir.path();
        let ready = d.join("ready");
        let server = Server(
            Command::new("nsenter")
                .arg(format!("--net={}", netns.display()))
                .args(["python3", "-c", UPSTREAM, addr, "443"])
                .args([
                    d.join("leaf.pem"),
                    d.join("leaf.key"),
                    d.join("api-key"),
                    d.join("heads.log"),
                    d.join("www"),
                    ready.clone(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        self.server = Some(server);
        poll_until("the TLS upstream listens", WAIT, || {
            ready.exists().then_some(())
        })
        .unwrap();
    }

    fn start(netns: &Path, addr: &str) -> TlsUpstream {
        let mut upstream = TlsUpstream::new();
        upstream.serve(netns, addr);
        upstream
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The policy's `[network.egress]`: [`HOST`] pinned to `addr` (inside `cidr`), the
    /// upstream's CA, and the credential with its rules.
    fn section(&self, addr: &str, cidr: &str) -> String {
        format!(
            "{}upstream_ca = \"{}\"\n\
             credentials = {{ \"{HOST}\" = {{ header = \"x-api-key\", file = \"{}\", rules = [\"GET /v1/models\", \"POST /v1/messages\", \"GET /repo.git/\"] }} }}\n",
            egress_section(&[HOST], &[(HOST, addr.to_string())], &[cidr.to_string()]),
            self.path("ca.pem").display(),
            self.path("api-key").display()
        )
    }

    /// The heads of the requests that arrived, in order.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("heads.log"))
            .unwrap_or_default()
            .split("\n----\n")
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Every request carried the key once and never the workload's own guess; `models` GETs
    /// of /v1/models and at least 3 of the repository's files (git's dumb protocol), nothing
    /// else (a refused request never arrived).
    #[track_caller]
    fn assert_requests(&self, models: usize) {
        let requests = self.requests();
        let count = |prefix: &str| requests.iter().filter(|h| h.starts_with(prefix)).count();
        let git_gets = count("GET /repo.git/");
        assert_eq!(
            (count("GET /v1/models HTTP/1.1\r\n"), requests.len()),
            (models, models + git_gets),
            "{requests:#?}"
        );
        assert!(git_gets >= 3, "{requests:#?}");
        for head in &requests {
            assert_eq!(
                head.to_ascii_lowercase().matches("x-api-key:").count(),
                1,
                "{head}"
            );
            assert!(head.contains(SECRET), "{head}");
            assert!(!head.contains("workload-guess"), "{head}");
        }
    }
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The shim's proxy with the sandbox's CA behind the real forwarder, both on the host: what
/// create and start do for a sandbox whose policy has credentials, for stock clients to drive.
struct HostProxy {
    rt: tokio::runtime::Runtime,
    sup: EgressSupervisor,
    sink: Arc<MemorySink>,
    proxy_url: String,
    /// The CA bundle (node store + the sandbox's CA), as the sandbox gets it.
    bundle: std::path::PathBuf,
}

impl HostProxy {
    /// For `upstream`'s policy section ([`TlsUpstream::section`]) at `addr` in `cidr`; the
    /// bundle goes into `dir`.
    fn start(upstream: &TlsUpstream, addr: &str, cidr: &str, dir: &Path) -> HostProxy {
        let src = upstream.section(addr, cidr);
        let plan = EgressPlan::from_policy(&Policy::from_toml_str(&src).unwrap().network.egress)
            .unwrap()
            .unwrap();
        // What create does for the sandbox: its CA, and the bundle (node store + CA).
        let ca = Arc::new(SandboxCa::new("creds", &[HOST.to_string()]).unwrap());
        let bundle = dir.join("bundle/ca-bundle.pem");
        write_bundle(
            &bundle,
            Path::new(policy_injector::egress::NODE_TRUST_STORE),
            &ca.cert_pem(),
        )
        .unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let sink = Arc::new(MemorySink::default());
        let sup = {
            let _enter = rt.enter();
            let proxy = Proxy::new(
                plan.clone(),
                Guard::new(plan.allow_cidrs.clone(), Vec::new()),
                SandboxRef {
                    sandbox_id: "creds".into(),
                    container_id: "creds".into(),
                    policy: "egress-credentials".into(),
                },
                Arc::new(SystemResolver),
                Arc::new(NetnsDialer::new(None, Duration::from_secs(5))),
                sink.clone(),
            )
            .with_credentials(Some(ca));
            EgressSupervisor::start(
                Arc::new(proxy),
                Arc::new(HostForwarder {
                    listen: listen.clone(),
                }),
                SupervisorOptions::default(),
                Arc::new(|| true),
            )
        };
        rt.block_on(sup.wait_ready(WAIT)).unwrap();
        HostProxy {
            rt,
            sup,
            sink,
            proxy_url: format!("http://{listen}"),
            bundle,
        }
    }

    /// `program` with nothing of the test's environment but the proxy and the bundle.
    fn client(&self, program: &str, home: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("HTTPS_PROXY", &self.proxy_url)
            .env("https_proxy", &self.proxy_url)
            .env("SSL_CERT_FILE", &self.bundle)
            .env("CURL_CA_BUNDLE", &self.bundle);
        c
    }

    fn stop(self) {
        self.rt.block_on(self.sup.stop());
    }
}

#[test]
fn curl_python_and_git_get_the_key_added_by_the_proxy_and_never_hold_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let proxy = HostProxy::start(&upstream, &inside, &ns.cidr(), d);
    let (sink, bundle) = (proxy.sink.clone(), proxy.bundle.clone());
    let client = |program: &str| proxy.client(program, d);
    let url = format!("https://{HOST}/v1/models");

    // curl, with a key of its own that must not arrive; verifying the proxy's leaf against
    // the bundle.
    let (ok, out) = run(client("curl").args([
        "-sS",
        "--fail-with-body",
        "-H",
        "x-api-key: workload-guess",
        &url,
    ]));
    assert!(ok && out == "key ok", "curl: {out}");
    // Python's urllib, trusting the bundle through SSL_CERT_FILE.
    let (ok, out) = run(client("python3").args([
        "-c",
        "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())",
        &url,
    ]));
    assert!(
        ok && out.trim() == "key ok",
        "python: {out}\n{:#?}",
        sink.connections()
    );
    // git over HTTPS (dumb protocol: a GET per file, one per connection), trusting the bundle
    // through GIT_SSL_CAINFO.
    let (ok, out) = run(client("git")
        .env("GIT_SSL_CAINFO", &bundle)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["clone", "-q", &format!("https://{HOST}/repo.git"), "cloned"])
        .current_dir(d));
    assert!(ok, "git clone: {out}");
    assert_eq!(
        std::fs::read_to_string(d.join("cloned/README")).unwrap(),
        "through the proxy\n"
    );
    // Outside the rules: refused with the reason in the status line, never sent.
    let (_, out) = run(client("curl").args([
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-X",
        "DELETE",
        &format!("https://{HOST}/v1/messages"),
    ]));
    assert!(
        // After the proxy's own answer to the CONNECT, the one from inside the tunnel.
        out.contains("\nHTTP/1.1 403 egress denied: DELETE /v1/messages is not allowed with the credential for api.example.test"),
        "{out}"
    );
    // Without the bundle the clients refuse the proxy's certificate: nothing is sent.
    let (ok, out) = run(client("curl")
        .env("CURL_CA_BUNDLE", d.join("ca.pem"))
        .args(["-sS", &url]));
    assert!(!ok && out.contains("certificate"), "{out}");
    proxy.stop();

    // curl and urllib; git's GETs; nothing else (the refused DELETE never arrived).
    upstream.assert_requests(2);
    let events = sink.0.lock().unwrap().clone();
    let records: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    let injected = events
        .iter()
        .filter(|e| {
            matches!(&e.event, EgressEvent::CredentialInjected { host, header, rule: Some(r), .. }
            if host == HOST && header == "x-api-key" && r == "GET /v1/models")
        })
        .count();
    assert_eq!(injected, 2, "{records:#?}");
    let verdicts: Vec<(Verdict, String)> = sink
        .connections()
        .into_iter()
        .map(|c| (c.verdict, c.rule))
        .collect();
    assert!(
        verdicts.contains(&(Verdict::Denied, "credential-rule".to_string())),
        "{verdicts:?}"
    );
    for r in &records {
        assert!(!r.contains(SECRET), "the key is in a record: {r}");
    }
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    assert!(!bundle_text.contains(SECRET) && !bundle_text.contains("PRIVATE KEY"));
}

/// The attacks on the credential's rules from issue 40, through curl, the real forwarder and
/// the proxy (rules: GET /v1/models, POST /v1/messages, GET /repo.git/): a method override, a
/// URL rewrite, a `..;` path and a CONNECT to the host's address by number are refused with a
/// 403 naming the check and never reach the upstream; a workload header `X_Api_Key` never
/// arrives beside the key. The control, the same allowed GET without the attack, gets its key.
#[test]
fn attacks_on_the_credentials_rules_are_refused_and_the_allowed_request_still_gets_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let proxy = HostProxy::start(&upstream, &inside, &ns.cidr(), d);
    let url = |path: &str| format!("https://{HOST}{path}");
    // curl's -D - prints the heads: the proxy's answer to the CONNECT, then the one from inside
    // the tunnel.
    let curl = |args: &[&str]| {
        let (_, out) = run(proxy
            .client("curl", d)
            .args(["-sS", "-o", "/dev/null", "-D", "-"])
            .args(args));
        out
    };
    // The control: the allowed GET, and a workload header a server could read as the key.
    let (ok, out) = run(proxy.client("curl", d).args([
        "-sS",
        "--fail-with-body",
        "-H",
        "X_Api_Key: workload-guess",
        &url("/v1/models"),
    ]));
    assert!(ok && out == "key ok", "control: {out}");
    for (what, args, answer) in [
        (
            "method override",
            vec!["-X", "POST", "-d", "{}", "-H", "X-HTTP-Method-Override: DELETE"],
            "\nHTTP/1.1 403 egress denied: header X-HTTP-Method-Override is refused with the credential for api.example.test",
        ),
        (
            "form method field",
            vec!["-X", "POST", "-d", "model=x&_method=DELETE"],
            "\nHTTP/1.1 403 egress denied: form field _method is refused with the credential for api.example.test",
        ),
        (
            "URL rewrite",
            vec!["-H", "X-Original-URL: /admin/keys"],
            "\nHTTP/1.1 403 egress denied: header X-Original-URL is refused with the credential for api.example.test",
        ),
        (
            "..; path",
            vec!["--path-as-is"],
            "\nHTTP/1.1 403 egress denied: GET /v1/models/..;/admin/keys has a ; parameter",
        ),
    ] {
        let target = if what == "..; path" {
            url("/v1/models/..;/admin/keys")
        } else if what == "method override" || what == "form method field" {
            url("/v1/messages")
        } else {
            url("/v1/models")
        };
        let mut all = args.clone();
        all.push(&target);
        let out = curl(&all);
        assert!(out.contains(answer), "{what}: {out}");
    }
    // The host's address by number (allow_cidrs admits the namespace's range): refused before
    // any tunnel, so no TLS of the workload's own reaches the upstream without the rules.
    let (ok, out) = run(proxy.client("curl", d).args([
        "-sS",
        "-v",
        "-k",
        &format!("https://{inside}/v1/models"),
    ]));
    assert!(
        !ok && out.contains(&format!(
            "403 egress denied: {inside} is an address of {HOST}, which gets a credential from the proxy"
        )),
        "IP literal: {out}"
    );
    let sink = proxy.sink.clone();
    proxy.stop();

    // Only the control arrived, with the key once and never the workload's look-alike.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let head = &requests[0];
    assert!(head.starts_with("GET /v1/models HTTP/1.1\r\n"), "{head}");
    assert_eq!(
        head.to_ascii_lowercase().matches("api_key").count()
            + head.to_ascii_lowercase().matches("api-key").count(),
        1,
        "{head}"
    );
    assert!(
        head.contains(SECRET) && !head.contains("workload-guess"),
        "{head}"
    );
    let rules: Vec<(Verdict, String)> = sink
        .connections()
        .into_iter()
        .map(|c| (c.verdict, c.rule))
        .collect();
    for rule in [
        "credential-override",
        "credential-path",
        "credential-host-address",
    ] {
        assert!(
            rules.contains(&(Verdict::Denied, rule.to_string())),
            "{rule}: {rules:?}"
        );
    }
    assert_eq!(
        rules
            .iter()
            .filter(|(v, r)| *v == Verdict::Denied && r == "credential-override")
            .count(),
        3,
        "{rules:?}"
    );
    for e in sink.0.lock().unwrap().iter() {
        assert!(!serde_json::to_string(e).unwrap().contains(SECRET), "{e:?}");
    }
}

/// A container may not bind-mount the credential's file, nor its directory, nor a link to the
/// file, although all are outside every denied source of the policy: create is refused naming
/// the `mounts` rule. The
/// controls: a sibling file of the same directory binds, and the workload reaches the upstream
/// with the key the proxy adds.
#[test]
fn a_bind_of_the_credentials_file_is_refused_at_create_naming_the_mounts_rule() {
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::git().unwrap();
    c.import(&image).unwrap();
    let policy = TestPolicy::builder(&c, "egress-creds-bind")
        .extra(&upstream.section(&inside, &ns.cidr()))
        .write()
        .unwrap();
    let bind = |src: &Path| {
        [
            "--mount".to_string(),
            format!(
                "type=bind,src={},dst=/mnt/k,options=rbind:ro",
                src.display()
            ),
        ]
    };
    // A link elsewhere to the key file: the shim resolves it before the rule looks.
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("innocent.txt");
    std::os::unix::fs::symlink(upstream.path("api-key"), &link).unwrap();
    for src in [upstream.path("api-key"), upstream.path(""), link.clone()] {
        let id = unique_id("creds-bind");
        let out = c
            .run_output(
                &Run::new(image.reference(), &id)
                    .runtime(policy.runtime())
                    .flags(bind(&src))
                    .sh("cat /mnt/k /mnt/k/api-key"),
            )
            .unwrap();
        assert!(!out.success(), "{}: {out}", src.display());
        assert!(
            out.stderr.contains("rejected by policy: mounts"),
            "{}: {out}",
            src.display()
        );
        assert!(!out.stdout.contains(SECRET), "{out}");
        let _ = c.ctr().args(["container", "delete", &id]).output();
    }
    let rejections: Vec<String> = policy
        .audit_lines()
        .iter()
        .map(|l| l.to_string())
        .filter(|l| l.contains("bind of a credentials file"))
        .collect();
    assert!(
        !rejections.is_empty(),
        "no record names the credentials file"
    );
    assert!(
        rejections.iter().any(|r| r.contains("resolved source")),
        "the link's refusal names its resolved source: {rejections:#?}"
    );
    // Controls: a sibling of the key file binds; the workload still gets the key's effect.
    let id = unique_id("creds-bind");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .flags(bind(&upstream.path("ca.pem")))
                .sh("grep -c 'BEGIN CERTIFICATE' /mnt/k; curl -sS --fail-with-body https://api.example.test/v1/models"),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(out.stdout.trim(), "1\nkey ok", "{out}");
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(requests[0].contains(SECRET), "{requests:#?}");
}

/// Inside the sandbox: curl and git over HTTPS through the proxy (the workload sends a key of
/// its own that must not arrive, and a DELETE the rules refuse); then the bundle, the
/// variables, and no key anywhere the workload can read. The key reaches the script only as a
/// pattern file in /tmp (kept out of the search), never on a command line that /proc would show.
const SCRIPT: &str = r#"
export HOME=/tmp
echo "curl=$(curl -sS --fail-with-body -H 'x-api-key: workload-guess' https://api.example.test/v1/models 2>&1)"
git clone -q https://api.example.test/repo.git /tmp/cloned 2>&1
echo "cloned=$(cat /tmp/cloned/README 2>&1)"
echo "refused=$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE https://api.example.test/v1/messages 2>&1)"
# What a server could read as another method, path or host, each refused before the rules (the
# same requests without it are allowed: the GET above and the POST below).
code() { curl -sS -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; }
echo "override=$(code -X POST -d '{}' -H 'X-HTTP-Method-Override: DELETE' https://api.example.test/v1/messages)"
echo "rewrite=$(code -H 'X-Original-URL: /admin/keys' https://api.example.test/v1/models)"
echo "dotdot=$(code --path-as-is 'https://api.example.test/v1/models/..;/admin/keys')"
echo "form=$(code -X POST -d 'model=x&_method=DELETE' https://api.example.test/v1/messages)"
echo "ip-literal=$(curl -sS -k --noproxy '' -o /dev/null https://{UPSTREAM_ADDRESS}/v1/models 2>&1 | grep -c 'CONNECT tunnel failed, response 403')"
echo "bundle-certs=$(grep -c 'BEGIN CERTIFICATE' /.gvisor-hardened/ca-bundle.pem)"
echo "ssl-cert-file=$SSL_CERT_FILE"
echo "requests=$REQUESTS_CA_BUNDLE pip=$PIP_CERT git=$GIT_SSL_CAINFO node=$NODE_EXTRA_CA_CERTS curl=$CURL_CA_BUNDLE"
(echo x > /.gvisor-hardened/ca-bundle.pem) 2>/dev/null && echo bundle-writable || echo bundle-read-only
echo PATTERN | base64 -d > /tmp/pattern
echo "pattern-lines=$(wc -l < /tmp/pattern)"
# busybox grep stops a line at a NUL: environ and cmdline are split into lines first.
in_procs() { for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f; done 2>/dev/null | grep -cF -f /tmp/pattern; }
echo "procs-read=$(for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f; done 2>/dev/null | grep -c SSL_CERT_FILE)"
echo "secret-hits=$(in_procs) $(grep -rlF -f /tmp/pattern /.gvisor-hardened /etc /root /home /var /tmp/cloned 2>/dev/null | wc -l)"
# Controls: the same search finds the key where it was put (a file, a process's environment).
echo "control-file=$(grep -rlF -f /tmp/pattern /tmp | wc -l)"
# (the probe: a process exec'd with X; busybox's shell runs its applets without an exec,
# so their /proc environ is the shell's)
X="$(cat /tmp/pattern)" sandbox-probe sleep 30 &
ctl=$!
i=0
until [ "$(in_procs)" != 0 ] || [ $i -ge 100 ]; do i=$((i+1)); sleep 0.1; done
echo "control-environ=$(in_procs)"
kill $ctl; wait $ctl
exit 0
"#;

/// [`SCRIPT`] with the key's pattern in it, and the credential host's address as the
/// sandbox would dial it by number.
fn script(upstream_address: &str) -> String {
    SCRIPT
        .replace("PATTERN", &base64_of(&format!("{SECRET}\n")))
        .replace("{UPSTREAM_ADDRESS}", upstream_address)
}

/// The bundle's host files of a sandbox `id`, in any namespace.
fn bundle_host_files(id: &str) -> Vec<std::path::PathBuf> {
    let root = Path::new(policy_injector::egress::credentials::CA_BUNDLE_HOST_DIR);
    std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join(id))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default()
}

/// The git image (curl, git with its HTTPS transport) under the test image's name, for the
/// engines' `run_rm`.
fn import_git_image_as_test_image(engine: gvisor_hardened_tests::engine::EngineCommand) {
    let tar = gvisor_hardened_tests::image::git_rootfs_tar().unwrap();
    engine
        .arg("import")
        .arg(&tar)
        .arg(TEST_IMAGE_REF)
        .checked()
        .unwrap();
}

#[test]
fn a_ctr_sandbox_reaches_the_upstream_with_the_key_it_never_holds() {
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::git().unwrap();
    c.import(&image).unwrap();
    let policy = TestPolicy::builder(&c, "egress-creds")
        .extra(&upstream.section(&inside, &ns.cidr()))
        .write()
        .unwrap();
    let id = unique_id("creds");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh(script(&inside)),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    assert_inside(out.stdout.as_str());
    upstream.assert_requests(1);
    // The bundle's host file goes with the sandbox (ctr run --rm deleted it).
    let host_file = policy_injector::egress::ca_bundle_host_path(c.namespace(), &id);
    assert!(!Path::new(&host_file).exists(), "{host_file} left behind");
    assert!(bundle_host_files(&id).is_empty());
    // The key is in no audit record; the injections are.
    assert_records(&policy.audit_lines());
    validate_against_schema(&[&policy.audit_path]).unwrap();
    let _ = std::io::stdout().flush();
}

#[test]
fn a_cri_pods_container_reaches_the_upstream_with_the_key_it_never_holds() {
    // The proxy dials from the pod's network namespace: the upstream serves there, on
    // 127.0.0.1, once the pod exists.
    let mut upstream = TlsUpstream::new();
    let policy = format!(
        "version = 1\n{}",
        upstream.section("127.0.0.1", "127.0.0.1/32")
    );
    let cri = CriContainerd::start(CriOptions {
        policies: vec![(HARDENED_HANDLER.to_string(), policy)],
        ..CriOptions::with_shim(shim_binary().unwrap())
    })
    .unwrap();
    cri.containerd().import(&TestImage::git().unwrap()).unwrap();
    // CRI learns of an image imported through ctr from containerd's events.
    poll_until("CRI sees the git image", WAIT, || {
        cri.client()
            .image_status(GIT_IMAGE_REF)
            .ok()
            .flatten()
            .map(drop)
    })
    .unwrap();
    let pod = cri.run_pod("creds", HARDENED_HANDLER).unwrap();
    upstream.serve(pod.netns.as_deref().expect("a pod netns"), "127.0.0.1");
    let config = container_config("agent", GIT_IMAGE_REF, &["sleep", "600"]);
    let id = cri.run_container(&pod, &config).unwrap();
    let out = cri
        .client()
        .exec_sync(&id, &["sh", "-c", &script("127.0.0.1")], 60)
        .unwrap();
    assert!(out.success(), "{out}");
    assert_inside(&out.stdout);
    upstream.assert_requests(1);
    // The shim serving the pod holds the key and the CA's private key: it never dumps core.
    let shim = the_one_process(&pod.id, |cmd| {
        cmd.contains("containerd-shim-gvisor-hardened-v1")
    });
    assert_no_core_dumps(shim);
    // Nor its proxy process, which holds the CA's key and each value while it uses it.
    let proxies = gvisor_hardened_tests::inspect::children_named(shim, "gvh-egress");
    assert_eq!(proxies.len(), 1, "{proxies:?}");
    assert_no_core_dumps(proxies[0]);
    cri.remove_pod(&pod).unwrap();
    assert!(bundle_host_files(&pod.id).is_empty(), "bundle left behind");
    let lines: Vec<serde_json::Value> = cri
        .audit_log()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_records(&lines);
}

#[test]
fn a_docker_container_reaches_the_upstream_with_the_key_it_never_holds() {
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let d = Dockerd::start(DockerOptions {
        extra_policies: vec![("creds".into(), upstream.section(&inside, &ns.cidr()))],
    })
    .unwrap();
    import_git_image_as_test_image(d.docker());
    let (out, id) = d
        .run_rm("creds", &["--network", "none"], &script(&inside))
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    assert_inside(out.stdout.as_str());
    upstream.assert_requests(1);
    // The guard made the CA and wrote the bundle; both go with the sandbox.
    assert!(
        bundle_host_files(&id).is_empty(),
        "{id}: bundle left behind"
    );
    assert_records(&d.dir().audit_lines());
    validate_against_schema(&[&d.dir().audit_log()]).unwrap();
    d.assert_container_gone(&id);
    // The guard holds the key and the CA's private key while its container runs: it never
    // dumps core (a running container's guard, looked at from the host).
    let out = d
        .docker()
        .args([
            "run",
            "-d",
            "--runtime",
            "creds",
            "--network",
            "none",
            TEST_IMAGE_REF,
        ])
        .args(["sleep", "600"])
        .checked()
        .unwrap();
    let running = out.stdout.trim().to_string();
    assert_no_core_dumps(the_one_process(&running, |cmd| {
        cmd.starts_with("runsc-hardened guard ")
    }));
    d.docker().args(["rm", "-f", &running]).checked().unwrap();
    d.assert_container_gone(&running);
    assert_clean_docker_shutdown(d);
}

#[test]
fn a_podman_container_reaches_the_upstream_with_the_key_it_never_holds() {
    let ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let upstream = TlsUpstream::start(&ns.path(), &inside);
    let p = Podman::new().unwrap();
    import_git_image_as_test_image(p.podman());
    // The default forwarder path (no `forwarder =`): runsc-hardened writes or finds its own
    // embedded forwarder there, as an install with nothing but the binary would.
    let section = on_default_forwarder(&upstream.section(&inside, &ns.cidr()));
    let policy = p.dir().write_policy("creds.toml", &section).unwrap();
    let (out, id) = p
        .run_rm(&policy, &["--network", "none"], &script(&inside))
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    assert_inside(out.stdout.as_str());
    upstream.assert_requests(1);
    assert!(
        bundle_host_files(&id).is_empty(),
        "{id}: bundle left behind"
    );
    assert_records(&p.dir().audit_lines());
    validate_against_schema(&[&p.dir().audit_log()]).unwrap();
    p.assert_container_gone(&id);
    assert_clean_podman_shutdown(p);
}

/// The pid of the one process whose command line mentions `id` and passes `is`. A child of
/// it with the same command line is one of its forks caught before its exec (the guard
/// spawning the forwarder's `runsc exec` as the container starts), not a second one.
#[track_caller]
fn the_one_process(id: &str, is: impl Fn(&str) -> bool) -> i32 {
    let matching: Vec<_> = processes_mentioning(id)
        .into_iter()
        .filter(|p| is(&p.cmdline))
        .collect();
    let pids: Vec<i32> = matching.iter().map(|p| p.pid).collect();
    let found: Vec<_> = matching
        .into_iter()
        .filter(|p| {
            !gvisor_hardened_tests::inspect::parent_of(p.pid)
                .is_some_and(|parent| pids.contains(&parent))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{:?}",
        found.iter().map(|p| &p.cmdline).collect::<Vec<_>>()
    );
    found[0].pid
}

/// `pid` runs with a core size limit of 0 (soft and hard), as `core_dumps::disable` leaves
/// the shim and runsc-hardened: a crash writes no memory (the key) anywhere.
#[track_caller]
fn assert_no_core_dumps(pid: i32) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let core: Vec<&str> = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max core file size"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(core, ["0", "0", "bytes"], "{limits}");
}

/// The audit log: an injection recorded for the GET that carried the key (by its rule) and
/// for git's GETs, the DELETE refused by the credential's rules, and the key in no record.
#[track_caller]
fn assert_records(lines: &[serde_json::Value]) {
    let injected: Vec<&str> = lines
        .iter()
        .filter(|r| r["event"] == "egress-credential-injected" && r["header"] == "x-api-key")
        .filter_map(|r| r["rule"].as_str())
        .collect();
    assert!(injected.contains(&"GET /v1/models"), "{injected:?}");
    assert!(injected.contains(&"GET /repo.git/"), "{injected:?}");
    assert!(
        lines.iter().any(|r| r["event"] == "egress-connection"
            && r["verdict"] == "denied"
            && r["rule"] == "credential-rule"),
        "no refusal by the credential's rules"
    );
    let denied = |rule: &str| {
        lines
            .iter()
            .filter(|r| {
                r["event"] == "egress-connection" && r["verdict"] == "denied" && r["rule"] == rule
            })
            .count()
    };
    // The override header, the rewrite header, the form field; the `..;` path; the number.
    assert_eq!(denied("credential-override"), 3, "{lines:#?}");
    assert_eq!(denied("credential-path"), 1, "{lines:#?}");
    assert_eq!(denied("credential-host-address"), 1, "{lines:#?}");
    for line in lines {
        assert!(!line.to_string().contains(SECRET), "{line}");
    }
}

/// What [`SCRIPT`] printed: the requests' outcomes, the bundle (the node's store and one CA, read-only), the six
/// variables, and the key found nowhere though the search reads every process and finds it
/// where it was put.
fn assert_inside(text: &str) {
    // The requests: the key added for the workload, the clone over HTTPS, the DELETE refused.
    assert!(text.contains("curl=key ok\n"), "{text}");
    assert!(text.contains("cloned=through the proxy\n"), "{text}");
    assert!(text.contains("refused=403\n"), "{text}");
    for attack in ["override", "rewrite", "dotdot", "form"] {
        assert!(
            text.contains(&format!("{attack}=403\n")),
            "{attack}: {text}"
        );
    }
    assert!(text.contains("ip-literal=1\n"), "{text}");
    let in_sandbox = "/.gvisor-hardened/ca-bundle.pem";
    let node_certs = std::fs::read_to_string(policy_injector::egress::NODE_TRUST_STORE)
        .map(|t| t.matches("BEGIN CERTIFICATE").count())
        .unwrap_or(0);
    assert!(
        text.contains(&format!("bundle-certs={}\n", node_certs + 1)),
        "{text}"
    );
    assert!(
        text.contains(&format!("ssl-cert-file={in_sandbox}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "requests={in_sandbox} pip={in_sandbox} git={in_sandbox} node={in_sandbox} curl={in_sandbox}"
        )),
        "{text}"
    );
    assert!(text.contains("bundle-read-only"), "{text}");
    // The search could find it: the pattern arrived whole.
    assert!(text.contains("pattern-lines=1\n"), "{text}");
    // Every process's environment was read (each holds the CA variables), and none held it.
    assert!(!text.contains("procs-read=0\n"), "{text}");
    assert!(text.contains("secret-hits=0 0\n"), "{text}");
    assert!(text.contains("control-file=1\n"), "{text}");
    assert!(text.contains("control-environ=1\n"), "{text}");
}
