//! What a pod left behind, and the processes that serve it.

use std::fmt;
use std::fs;
use std::path::PathBuf;

use super::{CriContainerd, Pod};
use crate::containerd::SHIM_BINARY_NAME;
use crate::inspect::{self, ProcInfo};
use crate::leaks::{Leaks, LEAK_GRACE};
use crate::poll::poll_until;

/// A pod's leftovers: the generic ones (processes, mounts, cgroups, runtime state, files) and
/// the pod-level ones CRI and CNI own.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodLeaks {
    pub leaks: Leaks,
    /// The pod's network namespace (a bind mount under /var/run/netns).
    pub netns: Option<PathBuf>,
    /// The pod's cgroup parent, in any hierarchy, after the harness removed it as the kubelet
    /// would (it stays when a runtime left a child cgroup in it).
    pub cgroup_parents: Vec<PathBuf>,
    /// host-local IPAM leases still held for the pod.
    pub ip_leases: Vec<PathBuf>,
    /// Containers or the sandbox still known to CRI.
    pub cri_objects: Vec<String>,
}

impl PodLeaks {
    pub fn is_empty(&self) -> bool {
        self.leaks.is_empty()
            && self.netns.is_none()
            && self.cgroup_parents.is_empty()
            && self.ip_leases.is_empty()
            && self.cri_objects.is_empty()
    }
}

impl fmt::Display for PodLeaks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "nothing left");
        }
        if !self.leaks.is_empty() {
            write!(f, "{}", self.leaks)?;
        }
        if let Some(n) = &self.netns {
            writeln!(f, "  netns {}", n.display())?;
        }
        for c in &self.cgroup_parents {
            writeln!(f, "  pod cgroup {}", c.display())?;
        }
        for l in &self.ip_leases {
            writeln!(f, "  ip lease {}", l.display())?;
        }
        for o in &self.cri_objects {
            writeln!(f, "  CRI still lists {o}")?;
        }
        Ok(())
    }
}

fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| p.exists()).collect()
}

/// Everything on the host that still mentions `id` (the sandbox or a container): processes,
/// mounts, cgroups named after it, runsc/runc state, the task bundle, CRI's sandbox and
/// container directories, the shim socket of the pod group.
fn id_leaks(cri: &CriContainerd, id: &str) -> Leaks {
    let c = cri.containerd();
    let mut runtime_state = inspect::runsc_state_files(&cri.runsc_root(), Some(id));
    runtime_state.extend(inspect::runsc_state_files(&cri.runc_root(), Some(id)));
    let cri_root = c.root().join("io.containerd.grpc.v1.cri");
    let cri_state = c.state().join("io.containerd.grpc.v1.cri");
    let files = existing([
        c.bundle_dir(id),
        c.shim_socket(id),
        cri_root.join("sandboxes").join(id),
        cri_root.join("containers").join(id),
        cri_state.join("sandboxes").join(id),
        cri_state.join("containers").join(id),
    ]);
    Leaks {
        processes: inspect::processes_mentioning(id),
        mounts: inspect::mounts_mentioning(id),
        cgroups: inspect::cgroups_named(id),
        runtime_state,
        files,
    }
}

fn merge(into: &mut Leaks, more: Leaks) {
    into.processes.extend(more.processes);
    into.mounts.extend(more.mounts);
    into.cgroups.extend(more.cgroups);
    into.runtime_state.extend(more.runtime_state);
    into.files.extend(more.files);
}

/// What `pod` and its containers (`containers`: every id ever created in it) left right now.
pub fn pod_leaks(cri: &CriContainerd, pod: &Pod, containers: &[String]) -> PodLeaks {
    let mut leaks = id_leaks(cri, &pod.id);
    for id in containers {
        merge(&mut leaks, id_leaks(cri, id));
    }
    // host-local names each lease file after the IP and writes the owner's id into it.
    let ip_leases = fs::read_dir(cri.layout().ipam_dir().join(cri.layout().network_name()))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| fs::read_to_string(e.path()).is_ok_and(|s| s.contains(&pod.id)))
        .map(|e| e.path())
        .collect();
    let mut cri_objects = Vec::new();
    match cri.client().list_pod_sandboxes() {
        Ok(pods) if pods.iter().any(|p| p.id == pod.id) => {
            cri_objects.push(format!("pod sandbox {}", pod.id))
        }
        Ok(_) => {}
        Err(e) => cri_objects.push(format!("(ListPodSandbox failed: {e})")),
    }
    match cri.client().list_containers(None) {
        Ok(list) => cri_objects.extend(
            list.iter()
                .filter(|c| c.pod_sandbox_id == pod.id || containers.contains(&c.id))
                .map(|c| format!("container {}", c.id)),
        ),
        Err(e) => cri_objects.push(format!("(ListContainers failed: {e})")),
    }
    PodLeaks {
        leaks,
        netns: pod.netns.clone().filter(|p| p.exists()),
        cgroup_parents: pod
            .cgroup_parent()
            .map(inspect::cgroup_dirs)
            .unwrap_or_default(),
        ip_leases,
        cri_objects,
    }
}

/// Waits (up to [`LEAK_GRACE`]) until `pod` and `containers` left nothing behind; panics with
/// the list otherwise. Call it after [`CriContainerd::remove_pod`].
#[track_caller]
pub fn assert_pod_gone(cri: &CriContainerd, pod: &Pod, containers: &[String]) {
    let mut last = PodLeaks::default();
    let clean = poll_until("the pod's leftovers to go", LEAK_GRACE, || {
        // As the kubelet's housekeeping does for a removed pod, until it works: a runtime may
        // still be removing its containers' cgroups when RemovePodSandbox returns (containerd
        // 1.6 does not wait for a dead shim's delete action). A parent that still holds
        // anything is not removed and stays a leak.
        for dir in pod
            .cgroup_parent()
            .map(inspect::cgroup_dirs)
            .unwrap_or_default()
        {
            let _ = std::fs::remove_dir(dir);
        }
        last = pod_leaks(cri, pod, containers);
        last.is_empty().then_some(())
    });
    if clean.is_err() {
        panic!(
            "pod {} ({:?}) left this behind after {LEAK_GRACE:?}:\n{last}\ncontainerd log: {}",
            pod.id,
            pod.handler,
            cri.containerd().log_path().display()
        );
    }
}

/// Shim processes of this containerd serving pod `pod_id` (`-id <pod_id>`), of the hardened
/// shim or of containerd's runc shim.
pub fn shim_processes(cri: &CriContainerd, pod_id: &str) -> Vec<ProcInfo> {
    let address = cri.containerd().address().display().to_string();
    inspect::processes()
        .into_iter()
        .filter(|p| {
            let argv0 = p.cmdline.split(' ').next().unwrap_or_default();
            (argv0.ends_with(SHIM_BINARY_NAME) || argv0.ends_with("containerd-shim-runc-v2"))
                && p.cmdline.contains(&address)
                && p.cmdline.contains(pod_id)
        })
        .collect()
}

/// runsc sandbox processes (`runsc-sandbox ... boot ...`) of pod `pod_id`: runsc renames its
/// sandbox process `runsc-sandbox` and puts the sandbox id on its command line.
pub fn runsc_sandbox_processes(pod_id: &str) -> Vec<ProcInfo> {
    inspect::processes_mentioning(pod_id)
        .into_iter()
        .filter(|p| p.cmdline.starts_with("runsc-sandbox"))
        .collect()
}
