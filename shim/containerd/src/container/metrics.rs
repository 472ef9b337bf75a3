//! Cgroup metrics in the form containerd expects from a shim's Stats call (so they live with
//! the containerd front end, not in the sandbox core, which only says where the cgroups are): an `Any` holding
//! `io.containerd.cgroups.v1.Metrics` or `io.containerd.cgroups.v2.Metrics`, which `ctr task
//! metrics` decodes and prints. The numbers describe the whole sandbox (sentry, gofer, stubs),
//! which is what the host pays for.

use std::path::Path;

use containerd_shim_protos::cgroups::metrics as v1;
use containerd_shim_protos::cgroups_v2::metrics as v2;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::MessageField;

use gvisor_hardened_core::cgroup::files::{self, optional};
use gvisor_hardened_core::cgroup::{CgroupError, SandboxCgroup};

/// USER_HZ: the unit of `cpuacct.stat`. 100 on every Linux ABI the shim targets.
const USER_HZ: u64 = 100;

/// Reads the sandbox's metrics and packs them for containerd.
pub fn metrics_any(cgroup: &SandboxCgroup) -> Result<Any, CgroupError> {
    match cgroup {
        SandboxCgroup::V1 { .. } => pack(&v1_metrics(cgroup)?),
        SandboxCgroup::V2 { dir } => pack(&v2_metrics(dir)?),
    }
}

fn pack<M: crate::packed::Named>(message: &M) -> Result<Any, CgroupError> {
    // containerd resolves the bare message name (as the containerd-shim crate sends it).
    crate::packed::pack(message).map_err(|e| CgroupError::Encode(e.to_string()))
}

/// A pod's later container has no host cgroup of its own that holds its processes (they run in
/// the pod's sentry): its numbers come from the sentry's accounting, `runsc events --stats`,
/// repacked as v1 metrics so containerd and CRI read them like any other. What the sentry does
/// not account per container (CPU throttling, kernel memory, swap, OOM kills) comes from the
/// sandbox's cgroup (`sandbox`, cgroup v1) and is the whole sandbox's: without it containerd's
/// ListPodSandboxMetrics left those metrics out (24 names against runc's 30).
pub fn sentry_metrics_any(
    event: &serde_json::Value,
    sandbox: Option<&SandboxCgroup>,
) -> Result<Any, CgroupError> {
    let mut m = sentry_metrics(event);
    if let Some(cgroup @ SandboxCgroup::V1 { .. }) = sandbox {
        let whole = v1_metrics(cgroup)?;
        m.cpu.mut_or_insert_default().throttling = whole.cpu.throttling.clone();
        let memory = m.memory.mut_or_insert_default();
        memory.kernel = whole.memory.kernel.clone();
        memory.swap = whole.memory.swap.clone();
        m.memory_oom_control = whole.memory_oom_control.clone();
    }
    pack(&m)
}

fn sentry_metrics(event: &serde_json::Value) -> v1::Metrics {
    let data = event.get("data").unwrap_or(event);
    let num = |path: &str| {
        data.pointer(path)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let mut m = v1::Metrics::new();
    let mut usage = v1::CPUUsage::new();
    usage.total = num("/cpu/usage/total");
    usage.kernel = num("/cpu/usage/kernel");
    usage.user = num("/cpu/usage/user");
    usage.per_cpu = data
        .pointer("/cpu/usage/percpu")
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    let mut cpu = v1::CPUStat::new();
    cpu.usage = MessageField::some(usage);
    m.cpu = MessageField::some(cpu);
    let mut entry = v1::MemoryEntry::new();
    entry.usage = num("/memory/usage/usage");
    entry.limit = num("/memory/usage/limit");
    entry.max = num("/memory/usage/max");
    entry.failcnt = num("/memory/usage/failcnt");
    let mut memory = v1::MemoryStat::new();
    memory.cache = num("/memory/cache");
    memory.usage = MessageField::some(entry);
    m.memory = MessageField::some(memory);
    let mut pids = v1::PidsStat::new();
    pids.current = num("/pids/current");
    pids.limit = num("/pids/limit");
    m.pids = MessageField::some(pids);
    // The sentry keeps no block I/O account; an empty one, as for the sandbox's own cgroups.
    m.blkio = MessageField::some(v1::BlkIOStat::new());
    m
}

/// cgroup v1 metrics from the memory, cpu, cpuacct and pids controllers.
pub fn v1_metrics(cgroup: &SandboxCgroup) -> Result<v1::Metrics, CgroupError> {
    let mut m = v1::Metrics::new();
    if let Ok(dir) = cgroup.dir("memory") {
        let (memory, oom) = v1_memory(dir)?;
        m.memory = MessageField::some(memory);
        m.memory_oom_control = MessageField::from_option(oom);
    }
    let mut cpu = v1::CPUStat::new();
    if let Ok(dir) = cgroup.dir("cpuacct") {
        cpu.usage = MessageField::some(v1_cpu_usage(dir)?);
    }
    if let Ok(dir) = cgroup.dir("cpu") {
        if let Some(stat) = optional(files::read_keyed(&dir.join("cpu.stat")))? {
            let mut t = v1::Throttle::new();
            t.periods = stat.get("nr_periods").copied().unwrap_or(0);
            t.throttled_periods = stat.get("nr_throttled").copied().unwrap_or(0);
            t.throttled_time = stat.get("throttled_time").copied().unwrap_or(0);
            cpu.throttling = MessageField::some(t);
        }
    }
    m.cpu = MessageField::some(cpu);
    // Always present, empty where the controller is not: nerdctl stats reads its entries
    // without a check (a missing one panicked it).
    let mut blkio = v1::BlkIOStat::new();
    if let Ok(dir) = cgroup.dir("blkio") {
        blkio.io_service_bytes_recursive = v1_blkio_entries(dir, "io_service_bytes_recursive")?;
        blkio.io_serviced_recursive = v1_blkio_entries(dir, "io_serviced_recursive")?;
    }
    m.blkio = MessageField::some(blkio);
    if let Ok(dir) = cgroup.dir("pids") {
        let mut pids = v1::PidsStat::new();
        pids.current = files::read_u64(&dir.join("pids.current"))?;
        // "max" (no limit) is 0 in containerd's metrics.
        pids.limit = files::read_limit(&dir.join("pids.max"))?.unwrap_or(0);
        m.pids = MessageField::some(pids);
    }
    Ok(m)
}

fn v1_memory(dir: &Path) -> Result<(v1::MemoryStat, Option<v1::MemoryOomControl>), CgroupError> {
    let entry = |prefix: &str| -> Result<Option<v1::MemoryEntry>, CgroupError> {
        let file = |name: &str| dir.join(format!("{prefix}{name}"));
        let Some(usage) = optional(files::read_u64(&file("usage_in_bytes")))? else {
            return Ok(None);
        };
        let mut e = v1::MemoryEntry::new();
        e.usage = usage;
        e.limit = files::read_u64(&file("limit_in_bytes"))?;
        e.max = files::read_u64(&file("max_usage_in_bytes"))?;
        e.failcnt = files::read_u64(&file("failcnt"))?;
        Ok(Some(e))
    };
    let mut mem = v1::MemoryStat::new();
    mem.usage = MessageField::from_option(entry("memory.")?);
    mem.swap = MessageField::from_option(entry("memory.memsw.")?);
    mem.kernel = MessageField::from_option(entry("memory.kmem.")?);
    mem.kernel_tcp = MessageField::from_option(entry("memory.kmem.tcp.")?);
    let stat = files::read_keyed(&dir.join("memory.stat"))?;
    let g = |k: &str| stat.get(k).copied().unwrap_or(0);
    mem.cache = g("cache");
    mem.rss = g("rss");
    mem.rss_huge = g("rss_huge");
    mem.mapped_file = g("mapped_file");
    mem.dirty = g("dirty");
    mem.writeback = g("writeback");
    mem.pg_pg_in = g("pgpgin");
    mem.pg_pg_out = g("pgpgout");
    mem.pg_fault = g("pgfault");
    mem.pg_maj_fault = g("pgmajfault");
    mem.inactive_anon = g("inactive_anon");
    mem.active_anon = g("active_anon");
    mem.inactive_file = g("inactive_file");
    mem.active_file = g("active_file");
    mem.unevictable = g("unevictable");
    mem.hierarchical_memory_limit = g("hierarchical_memory_limit");
    mem.hierarchical_swap_limit = g("hierarchical_memsw_limit");
    mem.total_cache = g("total_cache");
    mem.total_rss = g("total_rss");
    mem.total_rss_huge = g("total_rss_huge");
    mem.total_mapped_file = g("total_mapped_file");
    mem.total_dirty = g("total_dirty");
    mem.total_writeback = g("total_writeback");
    mem.total_pg_pg_in = g("total_pgpgin");
    mem.total_pg_pg_out = g("total_pgpgout");
    mem.total_pg_fault = g("total_pgfault");
    mem.total_pg_maj_fault = g("total_pgmajfault");
    mem.total_inactive_anon = g("total_inactive_anon");
    mem.total_active_anon = g("total_active_anon");
    mem.total_inactive_file = g("total_inactive_file");
    mem.total_active_file = g("total_active_file");
    mem.total_unevictable = g("total_unevictable");
    let oom = optional(files::read_keyed(&dir.join("memory.oom_control")))?.map(|o| {
        let mut c = v1::MemoryOomControl::new();
        c.oom_kill_disable = o.get("oom_kill_disable").copied().unwrap_or(0);
        c.under_oom = o.get("under_oom").copied().unwrap_or(0);
        c.oom_kill = o.get("oom_kill").copied().unwrap_or(0);
        c
    });
    Ok((mem, oom))
}

/// The entries of `blkio.NAME` (kept by the CFQ and BFQ schedulers), or where those are empty
/// (any other scheduler), of `blkio.throttle.NAME`, as containerd's own v1 reader takes them:
/// `MAJOR:MINOR Op Value` lines, the `Total` line left out.
fn v1_blkio_entries(dir: &Path, name: &str) -> Result<Vec<v1::BlkIOEntry>, CgroupError> {
    for file in [format!("blkio.{name}"), format!("blkio.throttle.{name}")] {
        let Some(text) = optional(files::read(&dir.join(&file)))? else {
            continue;
        };
        let entries = parse_blkio(&text);
        if !entries.is_empty() {
            return Ok(entries);
        }
    }
    Ok(Vec::new())
}

fn parse_blkio(text: &str) -> Vec<v1::BlkIOEntry> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (dev, op, value) = (f.next()?, f.next()?, f.next()?);
            let (major, minor) = dev.split_once(':')?;
            let mut e = v1::BlkIOEntry::new();
            e.major = major.parse().ok()?;
            e.minor = minor.parse().ok()?;
            e.op = op.to_string();
            e.value = value.parse().ok()?;
            Some(e)
        })
        .collect()
}

fn v1_cpu_usage(dir: &Path) -> Result<v1::CPUUsage, CgroupError> {
    let mut usage = v1::CPUUsage::new();
    usage.total = files::read_u64(&dir.join("cpuacct.usage"))?;
    if let Some(stat) = optional(files::read_keyed(&dir.join("cpuacct.stat")))? {
        // Ticks of USER_HZ; containerd reports nanoseconds.
        let ns = |k: &str| stat.get(k).copied().unwrap_or(0) * (1_000_000_000 / USER_HZ);
        usage.user = ns("user");
        usage.kernel = ns("system");
    }
    if let Some(text) = optional(files::read(&dir.join("cpuacct.usage_percpu")))? {
        usage.per_cpu = text
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
    }
    Ok(usage)
}

/// cgroup v2 metrics from the unified directory.
pub fn v2_metrics(dir: &Path) -> Result<v2::Metrics, CgroupError> {
    let mut m = v2::Metrics::new();

    let mut pids = v2::PidsStat::new();
    if let Some(current) = optional(files::read_u64(&dir.join("pids.current")))? {
        pids.current = current;
        pids.limit = files::read_limit(&dir.join("pids.max"))?.unwrap_or(0);
        m.pids = MessageField::some(pids);
    }

    if let Some(stat) = optional(files::read_keyed(&dir.join("cpu.stat")))? {
        let g = |k: &str| stat.get(k).copied().unwrap_or(0);
        let mut cpu = v2::CPUStat::new();
        cpu.usage_usec = g("usage_usec");
        cpu.user_usec = g("user_usec");
        cpu.system_usec = g("system_usec");
        cpu.nr_periods = g("nr_periods");
        cpu.nr_throttled = g("nr_throttled");
        cpu.throttled_usec = g("throttled_usec");
        cpu.nr_bursts = g("nr_bursts");
        cpu.burst_usec = g("burst_usec");
        m.cpu = MessageField::some(cpu);
    }

    if let Some(stat) = optional(files::read_keyed(&dir.join("memory.stat")))? {
        let g = |k: &str| stat.get(k).copied().unwrap_or(0);
        let mut mem = v2::MemoryStat::new();
        mem.anon = g("anon");
        mem.file = g("file");
        mem.kernel_stack = g("kernel_stack");
        mem.slab = g("slab");
        mem.sock = g("sock");
        mem.shmem = g("shmem");
        mem.file_mapped = g("file_mapped");
        mem.file_dirty = g("file_dirty");
        mem.file_writeback = g("file_writeback");
        mem.anon_thp = g("anon_thp");
        mem.inactive_anon = g("inactive_anon");
        mem.active_anon = g("active_anon");
        mem.inactive_file = g("inactive_file");
        mem.active_file = g("active_file");
        mem.unevictable = g("unevictable");
        mem.slab_reclaimable = g("slab_reclaimable");
        mem.slab_unreclaimable = g("slab_unreclaimable");
        mem.pgfault = g("pgfault");
        mem.pgmajfault = g("pgmajfault");
        mem.workingset_refault = g("workingset_refault");
        mem.workingset_activate = g("workingset_activate");
        mem.workingset_nodereclaim = g("workingset_nodereclaim");
        mem.pgrefill = g("pgrefill");
        mem.pgscan = g("pgscan");
        mem.pgsteal = g("pgsteal");
        mem.pgactivate = g("pgactivate");
        mem.pgdeactivate = g("pgdeactivate");
        mem.pglazyfree = g("pglazyfree");
        mem.pglazyfreed = g("pglazyfreed");
        mem.thp_fault_alloc = g("thp_fault_alloc");
        mem.thp_collapse_alloc = g("thp_collapse_alloc");
        mem.usage = files::read_u64(&dir.join("memory.current"))?;
        mem.usage_limit = limit_or_zero(&dir.join("memory.max"))?;
        // memory.peak and the swap files only exist on some kernels/configs.
        mem.max_usage = optional(files::read_u64(&dir.join("memory.peak")))?.unwrap_or(0);
        mem.swap_usage = optional(files::read_u64(&dir.join("memory.swap.current")))?.unwrap_or(0);
        mem.swap_limit = optional(limit_or_zero(&dir.join("memory.swap.max")))?.unwrap_or(0);
        mem.swap_max_usage = optional(files::read_u64(&dir.join("memory.swap.peak")))?.unwrap_or(0);
        m.memory = MessageField::some(mem);
    }

    if let Some(events) = optional(files::read_keyed(&dir.join("memory.events")))? {
        let g = |k: &str| events.get(k).copied().unwrap_or(0);
        let mut e = v2::MemoryEvents::new();
        e.low = g("low");
        e.high = g("high");
        e.max = g("max");
        e.oom = g("oom");
        e.oom_kill = g("oom_kill");
        e.oom_group_kill = g("oom_group_kill");
        m.memory_events = MessageField::some(e);
    }
    Ok(m)
}

fn limit_or_zero(path: &Path) -> Result<u64, CgroupError> {
    Ok(files::read_limit(path)?.unwrap_or(0))
}

#[cfg(test)]
mod sentry_tests {
    use super::*;
    use containerd_shim_protos::protobuf::Message;

    #[test]
    fn sentry_stats_event_becomes_v1_metrics() {
        let event = serde_json::json!({"type": "stats", "id": "c1", "data": {
            "cpu": {"usage": {"total": 900, "kernel": 200, "user": 700, "percpu": [400, 500]}},
            "memory": {"cache": 10, "usage": {"usage": 4096, "limit": 1024000, "max": 8192, "failcnt": 0}},
            "pids": {"current": 3, "limit": 0}
        }});
        let any = sentry_metrics_any(&event, None).unwrap();
        assert_eq!(any.type_url, "io.containerd.cgroups.v1.Metrics");
        let m = v1::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(m.cpu.usage.total, 900);
        assert_eq!(m.cpu.usage.per_cpu, vec![400, 500]);
        assert_eq!(m.memory.usage.usage, 4096);
        assert_eq!(m.memory.usage.limit, 1024000);
        assert_eq!(m.pids.current, 3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::protobuf::Message;
    use std::collections::BTreeMap;

    fn write(dir: &Path, name: &str, content: &str) {
        std::fs::write(dir.join(name), content).unwrap();
    }

    fn fake_v1(root: &Path) -> SandboxCgroup {
        let mut dirs = BTreeMap::new();
        for c in ["memory", "cpu", "cpuacct", "pids"] {
            let d = root.join(c);
            std::fs::create_dir_all(&d).unwrap();
            dirs.insert(c.to_string(), d);
        }
        let mem = &dirs["memory"];
        write(mem, "memory.usage_in_bytes", "1000\n");
        write(mem, "memory.limit_in_bytes", "67108864\n");
        write(mem, "memory.max_usage_in_bytes", "67112960\n");
        write(mem, "memory.failcnt", "53\n");
        write(
            mem,
            "memory.stat",
            "cache 10\nrss 20\ntotal_rss 30\npgfault 4\n",
        );
        write(
            mem,
            "memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        );
        let acct = &dirs["cpuacct"];
        write(acct, "cpuacct.usage", "101395047\n");
        write(acct, "cpuacct.stat", "user 7\nsystem 3\n");
        write(acct, "cpuacct.usage_percpu", "60000000 41395047 \n");
        write(
            &dirs["cpu"],
            "cpu.stat",
            "nr_periods 5\nnr_throttled 2\nthrottled_time 900\n",
        );
        write(&dirs["pids"], "pids.current", "25\n");
        write(&dirs["pids"], "pids.max", "max\n");
        SandboxCgroup::V1 { dirs }
    }

    #[test]
    fn v1_metrics_carry_memory_cpu_and_pids() {
        let dir = tempfile::tempdir().unwrap();
        let m = v1_metrics(&fake_v1(dir.path())).unwrap();
        let usage = m.memory.usage.as_ref().unwrap();
        assert_eq!(
            (usage.usage, usage.limit, usage.max, usage.failcnt),
            (1000, 67108864, 67112960, 53)
        );
        // No memsw files on this host: no swap entry rather than an error.
        assert!(m.memory.swap.is_none());
        assert_eq!(
            (m.memory.cache, m.memory.rss, m.memory.total_rss),
            (10, 20, 30)
        );
        assert_eq!(m.memory_oom_control.oom_kill, 1);
        let cpu = m.cpu.usage.as_ref().unwrap();
        assert_eq!(cpu.total, 101395047);
        assert_eq!((cpu.user, cpu.kernel), (70_000_000, 30_000_000));
        assert_eq!(cpu.per_cpu, [60000000, 41395047]);
        assert_eq!(m.cpu.throttling.throttled_periods, 2);
        assert_eq!((m.pids.current, m.pids.limit), (25, 0));
    }

    #[test]
    fn v1_metrics_always_carry_blkio_and_read_the_throttle_files_when_the_scheduler_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        // No blkio controller: an empty entry, never none (nerdctl stats dereferences it).
        let m = v1_metrics(&fake_v1(dir.path())).unwrap();
        assert!(m.blkio.is_some());
        assert!(m.blkio.io_service_bytes_recursive.is_empty());
        let mut cg = fake_v1(dir.path());
        let SandboxCgroup::V1 { dirs } = &mut cg else {
            unreachable!()
        };
        let blkio = dir.path().join("blkio");
        std::fs::create_dir_all(&blkio).unwrap();
        write(&blkio, "blkio.io_service_bytes_recursive", "Total 0\n");
        write(
            &blkio,
            "blkio.throttle.io_service_bytes_recursive",
            "254:0 Read 4096\n254:0 Write 8192\nTotal 12288\n",
        );
        dirs.insert("blkio".into(), blkio);
        let m = v1_metrics(&cg).unwrap();
        let e = &m.blkio.io_service_bytes_recursive;
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            (e[1].major, e[1].minor, e[1].op.as_str(), e[1].value),
            (254, 0, "Write", 8192)
        );
        assert!(m.blkio.io_serviced_recursive.is_empty());
    }

    #[test]
    fn a_pod_members_metrics_take_what_the_sentry_does_not_count_from_the_sandboxs_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        let cg = fake_v1(dir.path());
        let event = serde_json::json!({"data": {"memory": {"usage": {"usage": 4096}}}});
        let m =
            v1::Metrics::parse_from_bytes(&sentry_metrics_any(&event, Some(&cg)).unwrap().value)
                .unwrap();
        // The sentry's own numbers stay the container's.
        assert_eq!(m.memory.usage.usage, 4096);
        // Throttling and OOM kills are the whole sandbox's.
        assert_eq!(
            (m.cpu.throttling.periods, m.cpu.throttling.throttled_periods),
            (5, 2)
        );
        assert_eq!(m.memory_oom_control.oom_kill, 1);
        let alone = v1::Metrics::parse_from_bytes(&sentry_metrics_any(&event, None).unwrap().value)
            .unwrap();
        assert!(alone.cpu.throttling.is_none());
    }

    #[test]
    fn v1_any_round_trips_under_containerds_type_name() {
        let dir = tempfile::tempdir().unwrap();
        let any = metrics_any(&fake_v1(dir.path())).unwrap();
        assert_eq!(any.type_url, "io.containerd.cgroups.v1.Metrics");
        let back = v1::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(back.pids.current, 25);
    }

    #[test]
    fn v2_metrics_from_unified_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "pids.current", "7\n");
        write(d, "pids.max", "512\n");
        write(
            d,
            "cpu.stat",
            "usage_usec 300\nuser_usec 200\nsystem_usec 100\nnr_periods 0\n",
        );
        write(d, "memory.stat", "anon 4096\nfile 8192\n");
        write(d, "memory.current", "12288\n");
        write(d, "memory.max", "max\n");
        write(
            d,
            "memory.events",
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        );
        let any = metrics_any(&SandboxCgroup::V2 { dir: d.into() }).unwrap();
        assert_eq!(any.type_url, "io.containerd.cgroups.v2.Metrics");
        let m = v2::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!((m.pids.current, m.pids.limit), (7, 512));
        assert_eq!(m.cpu.usage_usec, 300);
        assert_eq!(
            (m.memory.anon, m.memory.usage, m.memory.usage_limit),
            (4096, 12288, 0)
        );
        assert_eq!(m.memory_events.oom_kill, 1);
    }

    #[test]
    fn a_vanished_cgroup_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cg = SandboxCgroup::V1 {
            dirs: BTreeMap::from([("memory".into(), dir.path().join("gone"))]),
        };
        let err = metrics_any(&cg).unwrap_err();
        assert!(err.to_string().contains("gone/memory.stat"), "{err}");
    }
}
