//! The upstreams and the networks that reach them, all on this machine.
//!
//! - [`Upstream`]: the harness's [`UpstreamNetns`] (a network namespace of the bench's own,
//!   joined to the host by a veth pair on a /30 of 10.214.0.0/16) with
//!   `hack/bench/agent/upstream.py serve` inside on port 443: the package index and git over
//!   HTTPS, one certificate for `pypi.test` and `git.test` from a CA made for this run. The
//!   hardened runtime's egress proxy dials it from the host over that veth.
//! - [`ClientNet`]: for plain runsc and runc, which have no proxy: a fresh network namespace per
//!   container, joined straight to the upstream's namespace by a veth pair of its own
//!   (`10.214.N.5` on the upstream's side, `.6` on the container's). runsc's `--network=sandbox`
//!   takes the addresses off the interface it finds in the namespace, so each container gets a
//!   new one; the upstream-side end is deleted with it.
//!
//! Nothing is routed anywhere else: the host forwards nothing, the namespaces have no default
//! route.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gvisor_hardened_tests::egress::UpstreamNetns;
use gvisor_hardened_tests::ids::random_hex;
use gvisor_hardened_tests::poll_until;

pub type BenchResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The names the workload reaches (the certificate's subject alternative names).
pub const NAMES: [&str; 2] = ["pypi.test", "git.test"];

fn run(program: &str, args: &[&str]) -> BenchResult<()> {
    let out = Command::new(program).args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// A CA and a server certificate for [`NAMES`], made with openssl in `dir`: returns
/// (CA certificate, server certificate, server key).
pub fn make_tls(dir: &Path) -> BenchResult<(PathBuf, PathBuf, PathBuf)> {
    fs::create_dir_all(dir)?;
    let p = |name: &str| dir.join(name).display().to_string();
    run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "7",
            "-subj",
            "/CN=gvisor-hardened agent bench CA",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.pem"),
        ],
    )?;
    run(
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=pypi.test",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
        ],
    )?;
    let sans: Vec<String> = NAMES.iter().map(|n| format!("DNS:{n}")).collect();
    fs::write(
        dir.join("ext"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
            sans.join(",")
        ),
    )?;
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-days",
            "7",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-extfile",
            &p("ext"),
            "-out",
            &p("server.pem"),
        ],
    )?;
    Ok((
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    ))
}

/// The upstream namespace with the HTTPS server in it; the server is killed on drop, before
/// the namespace goes.
pub struct Upstream {
    server: Child,
    pub ns: UpstreamNetns,
}

impl Upstream {
    /// Starts `python3 SCRIPT serve SITE CERT KEY 0.0.0.0:443` inside a new namespace and waits
    /// until it accepts on the namespace's address from the host.
    pub fn start(script: &Path, site: &Path, cert: &Path, key: &Path) -> BenchResult<Upstream> {
        let ns = UpstreamNetns::create()?;
        let log = fs::File::create(site.with_extension("server.log"))?;
        let server = Command::new("nsenter")
            .arg(format!("--net={}", ns.path().display()))
            .arg("python3")
            .arg(script)
            .arg("serve")
            .arg(site)
            .arg(cert)
            .arg(key)
            .arg("0.0.0.0:443")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let up = Upstream { server, ns };
        let addr = format!("{}:443", up.ns.inside_addr());
        poll_until(
            "the upstream server to accept",
            Duration::from_secs(20),
            || TcpStream::connect(&addr).ok().map(|_| ()),
        )?;
        Ok(up)
    }

    /// The address the proxy dials (the namespace's end of the host veth).
    pub fn addr(&self) -> String {
        self.ns.inside_addr()
    }

    /// The upstream's address on a [`ClientNet`]'s link: what `/etc/hosts` names for runc and
    /// plain runsc.
    pub fn client_side_addr(&self) -> String {
        format!("10.214.{}.5", self.ns.n)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// A network namespace for one container of runc or plain runsc, linked to the upstream.
pub struct ClientNet {
    name: String,
    upstream_ns: String,
    upstream_if: String,
}

impl ClientNet {
    pub fn create(up: &Upstream) -> BenchResult<ClientNet> {
        let hex = random_hex(3);
        let net = ClientNet {
            name: format!("gvh-agc-{hex}"),
            upstream_ns: up.ns.name.clone(),
            upstream_if: format!("gvhau{hex}"),
        };
        let client_if = format!("gvhac{hex}");
        run("ip", &["netns", "add", &net.name])?;
        let n = up.ns.n;
        let (u, c) = (&net.upstream_ns, &net.name);
        run(
            "ip",
            &[
                "-n",
                u,
                "link",
                "add",
                &net.upstream_if,
                "type",
                "veth",
                "peer",
                "name",
                &client_if,
                "netns",
                c,
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                u,
                "addr",
                "add",
                &format!("10.214.{n}.5/30"),
                "dev",
                &net.upstream_if,
            ],
        )?;
        run("ip", &["-n", u, "link", "set", &net.upstream_if, "up"])?;
        run(
            "ip",
            &[
                "-n",
                c,
                "addr",
                "add",
                &format!("10.214.{n}.6/30"),
                "dev",
                &client_if,
            ],
        )?;
        run("ip", &["-n", c, "link", "set", &client_if, "up"])?;
        run("ip", &["-n", c, "link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// For `ctr run --with-ns network:<path>`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }
}

impl Drop for ClientNet {
    fn drop(&mut self) {
        // Deleting the upstream's end removes the pair even while a runsc still holds the
        // container's namespace open.
        let _ = run(
            "ip",
            &["-n", &self.upstream_ns, "link", "del", &self.upstream_if],
        );
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}
