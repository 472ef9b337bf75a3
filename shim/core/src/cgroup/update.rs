//! Applying new resource limits to the sandbox's cgroups, for runsc releases without
//! `runsc update` (20221219). The caller passes limits already clamped by the policy; this only
//! writes them, in an order the kernel accepts.

use std::path::Path;

use serde::Deserialize;

use super::files;
use super::{CgroupError, SandboxCgroup};

/// The limits the shim can change at run time (from OCI `LinuxResources`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Limits {
    /// Bytes; `None` leaves it unchanged, `Some(-1)` removes the limit.
    pub memory_limit: Option<i64>,
    /// Memory + swap in bytes (OCI semantics).
    pub memory_swap: Option<i64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpu_shares: Option<u64>,
    /// Number of host tasks; `<= 0` removes the limit (OCI semantics).
    pub pids_limit: Option<i64>,
}

impl Limits {
    /// From OCI `LinuxResources` JSON (`{"memory":{"limit":..},"cpu":{..},"pids":{..}}`).
    pub fn from_linux_resources(value: &serde_json::Value) -> Result<Limits, CgroupError> {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Memory {
            limit: Option<i64>,
            swap: Option<i64>,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Cpu {
            quota: Option<i64>,
            period: Option<u64>,
            shares: Option<u64>,
        }
        #[derive(Deserialize)]
        struct Pids {
            limit: i64,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Resources {
            memory: Option<Memory>,
            cpu: Option<Cpu>,
            pids: Option<Pids>,
        }
        let r: Resources = serde_json::from_value(value.clone())
            .map_err(|e| CgroupError::InvalidLimit(format!("LinuxResources: {e}")))?;
        let memory = r.memory.unwrap_or_default();
        let cpu = r.cpu.unwrap_or_default();
        Ok(Limits {
            memory_limit: memory.limit,
            memory_swap: memory.swap,
            cpu_quota: cpu.quota,
            cpu_period: cpu.period,
            cpu_shares: cpu.shares,
            pids_limit: r.pids.map(|p| p.limit),
        })
    }

    fn validate(&self) -> Result<(), CgroupError> {
        let bad = |what: &str, v: i64| Err(CgroupError::InvalidLimit(format!("{what} = {v}")));
        if let Some(v) = self.memory_limit.filter(|v| *v == 0 || *v < -1) {
            return bad("memory limit", v);
        }
        if let Some(v) = self.memory_swap.filter(|v| *v == 0 || *v < -1) {
            return bad("memory+swap limit", v);
        }
        if let (Some(m), Some(s)) = (self.memory_limit, self.memory_swap) {
            if m > 0 && s > 0 && s < m {
                return bad("memory+swap limit below memory limit", s);
            }
        }
        if let Some(v) = self.cpu_quota.filter(|v| *v == 0 || *v < -1) {
            return bad("cpu quota", v);
        }
        Ok(())
    }
}

/// Writes `limits` to the sandbox's cgroups.
pub fn update(cgroup: &SandboxCgroup, limits: &Limits) -> Result<(), CgroupError> {
    limits.validate()?;
    match cgroup {
        SandboxCgroup::V1 { .. } => update_v1(cgroup, limits),
        SandboxCgroup::V2 { dir } => update_v2(dir, limits),
    }
}

fn update_v1(cgroup: &SandboxCgroup, l: &Limits) -> Result<(), CgroupError> {
    if l.memory_limit.is_some() || l.memory_swap.is_some() {
        let dir = cgroup.dir("memory")?;
        let mem = dir.join("memory.limit_in_bytes");
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        // The kernel keeps memory <= memory+swap at every step: when raising, widen memsw first;
        // when lowering, shrink memory first.
        let current = files::read_u64(&mem)?;
        let raising = l.memory_limit.is_some_and(|m| m < 0 || m as u64 > current);
        let write_mem = || match l.memory_limit {
            Some(m) => files::write(&mem, &m.to_string()),
            None => Ok(()),
        };
        let write_memsw = || match l.memory_swap {
            Some(s) => files::write(&memsw, &s.to_string()),
            None => Ok(()),
        };
        if raising {
            write_memsw()?;
            write_mem()?;
        } else {
            write_mem()?;
            write_memsw()?;
        }
    }
    if l.cpu_period.is_some() || l.cpu_quota.is_some() || l.cpu_shares.is_some() {
        let dir = cgroup.dir("cpu")?;
        // Period before quota: the quota is checked against the current period.
        if let Some(period) = l.cpu_period {
            files::write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
        }
        if let Some(quota) = l.cpu_quota {
            files::write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        if let Some(shares) = l.cpu_shares {
            files::write(&dir.join("cpu.shares"), &shares.to_string())?;
        }
    }
    if let Some(pids) = l.pids_limit {
        files::write(&cgroup.dir("pids")?.join("pids.max"), &pids_value(pids))?;
    }
    Ok(())
}

fn update_v2(dir: &Path, l: &Limits) -> Result<(), CgroupError> {
    if let Some(m) = l.memory_limit {
        files::write(&dir.join("memory.max"), &max_or(m))?;
    }
    if let Some(s) = l.memory_swap {
        // OCI gives memory+swap; v2 limits swap alone.
        let swap = match (s, l.memory_limit) {
            (-1, _) => "max".to_string(),
            (s, Some(m)) if m > 0 => (s - m).to_string(),
            _ => {
                return Err(CgroupError::InvalidLimit(
                    "a memory+swap limit needs a memory limit on cgroup v2".into(),
                ))
            }
        };
        files::write(&dir.join("memory.swap.max"), &swap)?;
    }
    if l.cpu_quota.is_some() || l.cpu_period.is_some() {
        let current = files::read(&dir.join("cpu.max"))?;
        let mut parts = current.split_whitespace();
        let (cur_quota, cur_period) = (
            parts.next().unwrap_or("max"),
            parts.next().unwrap_or("100000"),
        );
        let quota = l.cpu_quota.map_or(cur_quota.to_string(), max_or);
        let period = l
            .cpu_period
            .map_or(cur_period.to_string(), |p| p.to_string());
        files::write(&dir.join("cpu.max"), &format!("{quota} {period}"))?;
    }
    if let Some(shares) = l.cpu_shares {
        files::write(
            &dir.join("cpu.weight"),
            &shares_to_weight(shares).to_string(),
        )?;
    }
    if let Some(pids) = l.pids_limit {
        files::write(&dir.join("pids.max"), &pids_value(pids))?;
    }
    Ok(())
}

fn max_or(v: i64) -> String {
    if v < 0 {
        "max".into()
    } else {
        v.to_string()
    }
}

fn pids_value(limit: i64) -> String {
    if limit <= 0 {
        "max".into()
    } else {
        limit.to_string()
    }
}

/// The conversion runc and crun use: shares 2..262144 onto weight 1..10000.
fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 100;
    }
    1 + (shares.clamp(2, 262144) - 2) * 9999 / 262142
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    fn fake_v1(root: &Path) -> SandboxCgroup {
        let mut dirs = BTreeMap::new();
        for c in ["memory", "cpu", "pids"] {
            let d = root.join(c);
            std::fs::create_dir_all(&d).unwrap();
            dirs.insert(c.to_string(), d);
        }
        std::fs::write(dirs["memory"].join("memory.limit_in_bytes"), "67108864\n").unwrap();
        SandboxCgroup::V1 { dirs }
    }

    #[test]
    fn oci_resources_parse_into_limits() {
        let v = serde_json::json!({
            "memory": {"limit": 134217728},
            "cpu": {"quota": 50000, "period": 100000},
            "pids": {"limit": 256}
        });
        assert_eq!(
            Limits::from_linux_resources(&v).unwrap(),
            Limits {
                memory_limit: Some(134217728),
                cpu_quota: Some(50000),
                cpu_period: Some(100000),
                pids_limit: Some(256),
                ..Limits::default()
            }
        );
        assert!(Limits::from_linux_resources(&serde_json::json!({"pids": {}})).is_err());
    }

    #[test]
    fn v1_writes_memory_cpu_and_pids_files() {
        let dir = tempfile::tempdir().unwrap();
        let cg = fake_v1(dir.path());
        let limits = Limits {
            memory_limit: Some(33554432),
            cpu_quota: Some(50000),
            cpu_period: Some(100000),
            pids_limit: Some(0),
            ..Limits::default()
        };
        update(&cg, &limits).unwrap();
        let d = |c| cg.dir(c).unwrap().to_path_buf();
        assert_eq!(read(&d("memory").join("memory.limit_in_bytes")), "33554432");
        assert_eq!(read(&d("cpu").join("cpu.cfs_quota_us")), "50000");
        assert_eq!(read(&d("cpu").join("cpu.cfs_period_us")), "100000");
        // OCI: a pids limit <= 0 means unlimited.
        assert_eq!(read(&d("pids").join("pids.max")), "max");
    }

    #[test]
    fn v2_writes_unified_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("cpu.max"), "max 100000\n").unwrap();
        let cg = SandboxCgroup::V2 { dir: d.into() };
        let limits = Limits {
            memory_limit: Some(1 << 20),
            memory_swap: Some(2 << 20),
            cpu_quota: Some(20000),
            cpu_shares: Some(1024),
            pids_limit: Some(64),
            ..Limits::default()
        };
        update(&cg, &limits).unwrap();
        assert_eq!(read(&d.join("memory.max")), "1048576");
        assert_eq!(read(&d.join("memory.swap.max")), "1048576");
        assert_eq!(read(&d.join("cpu.max")), "20000 100000");
        assert_eq!(read(&d.join("cpu.weight")), "39");
        assert_eq!(read(&d.join("pids.max")), "64");
    }

    #[test]
    fn invalid_limits_are_refused_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let cg = fake_v1(dir.path());
        for limits in [
            Limits {
                memory_limit: Some(0),
                ..Limits::default()
            },
            Limits {
                memory_limit: Some(100),
                memory_swap: Some(50),
                ..Limits::default()
            },
            Limits {
                cpu_quota: Some(-5),
                ..Limits::default()
            },
        ] {
            assert!(matches!(
                update(&cg, &limits),
                Err(CgroupError::InvalidLimit(_))
            ));
        }
        assert!(!cg.dir("cpu").unwrap().join("cpu.cfs_quota_us").exists());
    }

    #[test]
    fn a_missing_controller_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let cg = SandboxCgroup::V1 {
            dirs: BTreeMap::from([("memory".into(), dir.path().into())]),
        };
        let err = update(
            &cg,
            &Limits {
                pids_limit: Some(10),
                ..Limits::default()
            },
        )
        .unwrap_err();
        assert!(matches!(
            err,
            CgroupError::NoController {
                controller: "pids",
                ..
            }
        ));
    }

    #[test]
    fn shares_map_onto_weights_like_runc() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(262144), 10000);
        assert_eq!(shares_to_weight(1024), 39);
    }
}
