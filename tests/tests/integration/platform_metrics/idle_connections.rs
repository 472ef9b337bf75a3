//! The exporter under 1000 idle connections while Debian's Prometheus scrapes it with a bearer
//! token (`authorization: credentials_file`, as deploy/prometheus/ configures it). The idle
//! client connects and never sends a byte; whenever the exporter closes one of its connections
//! (head deadline, or making room for a newer one) it opens another, so 1000 stay open for as
//! long as it runs: the probe that once kept the exporter answering 503.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{free_port, query, start_exporter, Killed};
use gvisor_hardened_tests::poll_until;

const IDLE: usize = 1000;

/// The idle client: its own thread, keeping `IDLE` connections open until told to stop.
struct Idle {
    stop: Arc<AtomicBool>,
    /// Connections open now.
    open: Arc<AtomicUsize>,
    /// Connections the exporter closed (each replaced at once).
    closed_by_exporter: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Idle {
    fn start(target: SocketAddr) -> Idle {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let closed_by_exporter = Arc::new(AtomicUsize::new(0));
        let (s, o, closed) = (stop.clone(), open.clone(), closed_by_exporter.clone());
        let thread = std::thread::spawn(move || {
            let connect = || {
                let c = TcpStream::connect_timeout(&target, Duration::from_secs(5)).ok()?;
                c.set_nonblocking(true).ok()?;
                Some(c)
            };
            let mut conns: Vec<Option<TcpStream>> = (0..IDLE).map(|_| None).collect();
            let mut buf = [0u8; 64];
            while !s.load(Ordering::SeqCst) {
                for slot in conns.iter_mut() {
                    let gone = match slot {
                        None => false,
                        Some(c) => match c.read(&mut buf) {
                            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                            // End-of-file, a reset, or a 503: the exporter let go of it.
                            _ => true,
                        },
                    };
                    if gone {
                        closed.fetch_add(1, Ordering::SeqCst);
                        *slot = None;
                    }
                    if slot.is_none() {
                        *slot = connect();
                    }
                }
                o.store(conns.iter().flatten().count(), Ordering::SeqCst);
                // Pacing, not synchronisation: a sweep over 1000 sockets needs no more than
                // ~100 rounds a second to replace what the exporter closes.
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Idle {
            stop,
            open,
            closed_by_exporter,
            thread: Some(thread),
        }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The test process holds 1000 sockets besides its own descriptors: a soft limit of 1024 is
/// too few, so it is raised to the hard limit. The exporter needs no more than its default:
/// it keeps at most 256 connections (policy-injector/src/cli/metrics/conn.rs).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    assert!(
        lim.rlim_max >= (IDLE + 200) as libc::rlim_t,
        "RLIMIT_NOFILE hard limit {} is below what 1000 connections need",
        lim.rlim_max
    );
    lim.rlim_cur = lim.rlim_max;
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The sample time of the last scrape's `gvh_exporter_files_opened_total`: only a scrape that
/// succeeded gives one (a failed one makes the series stale).
fn last_sample(prom: SocketAddr) -> Option<f64> {
    let v = query(prom, "timestamp(gvh_exporter_files_opened_total)", "")?;
    Some(v.first()?.1)
}

#[test]
fn prometheus_keeps_scraping_the_exporter_while_1000_idle_connections_are_held_open() {
    raise_fd_limit();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, b"").unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "idle-test-token\n").unwrap();
    let (_exporter, target) =
        start_exporter(&log, &["--bearer-token-file", token.to_str().unwrap()]);

    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: gvisor-hardened-audit\n    authorization:\n      credentials_file: {token}\n    static_configs:\n      - targets: ['{target}']\n",
            token = token.display()
        ),
    )
    .unwrap();
    let plog = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prometheus = Killed(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(plog.try_clone().unwrap())
            .stderr(plog)
            .spawn()
            .expect("prometheus (Debian's prometheus package; hack/lib.sh installs it)"),
    );

    // Before: Prometheus scrapes with its token (a 401 would leave `up` at 0).
    poll_until("a first successful scrape", Duration::from_secs(60), || {
        let up = query(prom_addr, "up", "")?;
        (up.first()?.1 == 1.0).then_some(())
    })
    .unwrap();

    let idle = Idle::start(target);
    // Control: the idle connections are really there and really reach the exporter: all 1000
    // connected at once (none seen closed in the same sweep), and the exporter has accepted and
    // let go of at least 1000 of them, each replaced.
    poll_until(
        "1000 idle connections open",
        Duration::from_secs(60),
        || (idle.open.load(Ordering::SeqCst) == IDLE).then_some(()),
    )
    .unwrap_or_else(|e| panic!("{e}: {} open", idle.open.load(Ordering::SeqCst)));
    poll_until(
        "the exporter to have closed 1000 idle connections, each replaced",
        Duration::from_secs(60),
        || (idle.closed_by_exporter.load(Ordering::SeqCst) >= IDLE).then_some(()),
    )
    .unwrap();
    let held_from = now_secs();

    // Under them: fresh samples keep coming, from five scrapes after they were all open.
    let mut seen: Vec<f64> = Vec::new();
    poll_until("five fresh scrapes", Duration::from_secs(60), || {
        let t = last_sample(prom_addr)?;
        if t > held_from && !seen.contains(&t) {
            seen.push(t);
        }
        (seen.len() >= 5).then_some(())
    })
    .unwrap();
    assert_eq!(idle.open.load(Ordering::SeqCst), IDLE, "still held open");
    // And no scrape failed meanwhile: `up` stayed 1 over the whole window.
    let window = (now_secs() - held_from).floor().max(1.0) as u64;
    let min_up = query(prom_addr, &format!("min_over_time(up[{window}s])"), "").unwrap();
    assert_eq!(min_up.first().map(|v| v.1), Some(1.0), "{min_up:?}");
    drop(idle);
}
