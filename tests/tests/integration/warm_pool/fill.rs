//! Filling: what the filler boots, replaces, keeps apart and stops at.

use std::time::Duration;

use super::*;

#[test]
fn a_warm_sandbox_that_died_is_never_claimed_and_is_replaced() {
    let cri = start("size = 2\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 2);

    // The oldest warm sandbox, the next to be claimed, dies.
    let dead = ready[0]["id"].as_str().unwrap().to_string();
    let pid = ready[0]["pid"].as_i64().unwrap();
    assert!(
        entry_alive(&ready[0]),
        "{dead} died before the test killed it"
    );
    // SAFETY: kill(2) of the warm sandbox's process, checked by its start time just above.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    poll_until(
        "the killed sandbox to exit",
        Duration::from_secs(10),
        || (!inspect::is_alive(pid as i32)).then_some(()),
    )
    .unwrap();

    // The next pod passes over it and takes the other one.
    let warm = cri.run_pod("warm", handler).unwrap();
    let claim = cri
        .pool_claim_of(&warm.id)
        .unwrap_or_else(|| panic!("pod {} claimed nothing:\n{}", warm.id, pool_state(&cri)));
    assert_ne!(
        claim["pool"]["sandbox"],
        dead.as_str(),
        "a dead sandbox was claimed"
    );
    assert_eq!(claim["pool"]["sandbox"], ready[1]["id"], "{claim}");

    // The filler deletes the dead one (runsc state, cgroups, processes, bundle) and refills.
    let mut last = Vec::new();
    poll_until("two live warm sandboxes again", FILL_TIMEOUT, || {
        last = entries(&key.join("ready"));
        (last.len() == 2
            && last
                .iter()
                .all(|e| e["id"] != dead.as_str() && entry_alive(e)))
        .then_some(())
    })
    .unwrap_or_else(|_| panic!("{last:#?}\n{}", pool_state(&cri)));
    assert_warm_sandbox_gone(&cri, &key, &dead);
    // Only a filler deletes a dead entry here (no drain ran), and each pass writes its line once
    // its boots are done: after the new entry is ready, so the line is waited for, not assumed.
    let mut log = String::new();
    poll_until("the filler's line for the dead one", FILL_TIMEOUT, || {
        log = std::fs::read_to_string(key.join("fill.log")).unwrap_or_default();
        log.contains("removed 1 dead").then_some(())
    })
    .unwrap_or_else(|_| panic!("{log}"));

    remove_pods(&cri, &[(warm, Vec::new()), (cold, Vec::new())]);
    let ids = ids_of(&wait_ready(&cri, handler, 2));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn policies_with_other_flags_never_share_a_pool() {
    let pool = "size = 1\nrefill_per_minute = 600";
    let cri = start(pool, pool);
    let handlers = [HARDENED_HANDLER, HARDENED_TOOL_HANDLER];
    let cold: Vec<Pod> = handlers
        .iter()
        .map(|h| cri.run_pod(&format!("cold-{h}"), h).unwrap())
        .collect();
    let ready: Vec<Vec<serde_json::Value>> =
        handlers.iter().map(|h| wait_ready(&cri, h, 1)).collect();
    let keys: Vec<PathBuf> = handlers
        .iter()
        .map(|h| cri.pool_key_dir(h).unwrap())
        .collect();
    assert_ne!(keys[0], keys[1], "two policies share a pool");
    let templates: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::from_slice(&std::fs::read(k.join("template.json")).unwrap()).unwrap())
        .collect();
    // The tool policy boots runsc with the default's flags but is another policy with another
    // resource shape (memory, CPUs, processes), which the sentry sizes itself by at boot.
    assert_ne!(templates[0]["policy_sha256"], templates[1]["policy_sha256"]);
    assert_ne!(
        templates[0]["spec"]["linux"]["resources"],
        templates[1]["spec"]["linux"]["resources"]
    );

    // Each handler's pod claims from its own key's pool and nothing the other pool ever held.
    let mut pods = Vec::new();
    for (i, h) in handlers.iter().enumerate() {
        let other = 1 - i;
        let pod = cri.run_pod(&format!("warm-{h}"), h).unwrap();
        let claim = cri
            .pool_claim_of(&pod.id)
            .unwrap_or_else(|| panic!("{h}: claimed nothing:\n{}", pool_state(&cri)));
        let sandbox = claim["pool"]["sandbox"].as_str().unwrap();
        let key_name = keys[i].file_name().unwrap().to_str().unwrap();
        assert_eq!(sandbox, ready[i][0]["id"], "{h}: {claim}");
        assert_eq!(claim["pool"]["key"], key_name, "{h}: {claim}");
        let boots: Vec<serde_json::Value> = records(&cri, "pool-sandbox-booted")
            .into_iter()
            .filter(|b| b["container_id"] == sandbox)
            .collect();
        assert_eq!(boots.len(), 1, "{boots:#?}");
        assert_eq!(boots[0]["pool"]["key"], key_name);
        let other_held: Vec<String> = ["ready", "claimed", "dead"]
            .iter()
            .flat_map(|d| ids_of(&entries(&keys[other].join(d))))
            .chain(ids_of(&ready[other]))
            .collect();
        assert!(!other_held.contains(&sandbox.to_string()), "{other_held:?}");
        pods.push((pod, Vec::new()));
    }

    pods.extend(cold.into_iter().map(|p| (p, Vec::new())));
    remove_pods(&cri, &pods);
    // One drain empties both pools.
    let ids: Vec<Vec<String>> = handlers
        .iter()
        .map(|h| ids_of(&wait_ready(&cri, h, 1)))
        .collect();
    drain_and_check(&cri, &keys[0], &ids[0]);
    for id in &ids[1] {
        assert_warm_sandbox_gone(&cri, &keys[1], id);
    }
    assert_clean_cri_shutdown(cri);
}

#[test]
fn the_filler_stops_at_the_memory_bound() {
    let cri = start(
        "size = 8\nmemory_limit = \"64Mi\"\nrefill_per_minute = 600",
        "size = 1",
    );
    let handler = HARDENED_HANDLER;
    let cold = cri.run_pod("cold", handler).unwrap();
    let mut log = String::new();
    let key = poll_until(
        "the filler to stop at the memory bound",
        FILL_TIMEOUT,
        || {
            let key = cri.pool_key_dir(handler)?;
            log = std::fs::read_to_string(key.join("fill.log")).unwrap_or_default();
            log.contains("memory bound").then_some(key)
        },
    )
    .unwrap_or_else(|_| panic!("fill.log:\n{log}"));

    let ready = entries(&key.join("ready"));
    assert!(
        !ready.is_empty() && ready.len() < 8,
        "{} ready\n{log}",
        ready.len()
    );
    let pss: Vec<u64> = ready
        .iter()
        .map(|e| sandbox_pss_kib(e["pid"].as_i64().unwrap()))
        .collect();
    // The filler boots the next sandbox while the ready ones plus their average fit under the
    // bound, so the last one booted may take the total past it by what it costs itself beyond
    // that average: at most the dearest sandbox's PSS.
    let total: u64 = pss.iter().sum();
    let dearest = pss.iter().copied().max().unwrap();
    println!(
        "{} warm sandboxes, PSS {pss:?} KiB, {total} KiB in all",
        ready.len()
    );
    assert!(
        total <= 64 * 1024 + dearest,
        "{total} KiB of PSS in {} warm sandboxes ({pss:?})\n{log}",
        ready.len()
    );

    remove_pods(&cri, &[(cold, Vec::new())]);
    drain_and_check(&cri, &key, &ids_of(&ready));
    assert_clean_cri_shutdown(cri);
}

#[test]
fn an_empty_pool_is_a_cold_start() {
    let cri = start("size = 1\nrefill_per_minute = 1", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 1);

    // Pod A takes the one warm sandbox; at one boot a minute, none is ready for pod B.
    let a = cri.run_pod("a", handler).unwrap();
    let claim = cri
        .pool_claim_of(&a.id)
        .unwrap_or_else(|| panic!("pod a claimed nothing:\n{}", pool_state(&cri)));
    assert_eq!(claim["pool"]["sandbox"], ready[0]["id"]);
    let b = cri.run_pod("b", handler).unwrap();
    assert!(
        cri.pool_claim_of(&b.id).is_none(),
        "pod b claimed from an empty pool:\n{}",
        pool_state(&cri)
    );
    assert!(
        records(&cri, "pool-sandbox-booted")
            .iter()
            .all(|r| Some(r["pid"].as_i64().unwrap() as i32) != b.pid),
        "pod b runs in a warm sandbox"
    );
    let app = cri.run_container(&b, &sleeper("app")).unwrap();
    let id = cri.client().exec_sync(&app, &["id", "-u"], 10).unwrap();
    assert_eq!(id.stdout.trim(), "65534", "{id:?}");

    // Nor was one booted behind pod A: the filler its claim started waits out the minute.
    assert_eq!(
        records(&cri, "pool-sandbox-booted").len(),
        1,
        "{}",
        pool_state(&cri)
    );
    remove_pods(&cri, &[(a, Vec::new()), (b, vec![app]), (cold, Vec::new())]);
    assert_warm_sandbox_gone(&cri, &key, ready[0]["id"].as_str().unwrap());
    // The drain stops that waiting filler; nothing of the pool is left.
    drain(&cri);
    assert!(!key.exists(), "{}", pool_state(&cri));
    assert_clean_cri_shutdown(cri);
}

/// Rewrites `handler`'s policy with `[pool]` as `pool`, starts a pod under it, and checks that
/// the pod claimed nothing of the old pool and that the old key (`old_key`, holding `old`)
/// goes, every sandbox of it deleted. Returns the pod.
fn edit_pool_and_see_the_old_one_go(
    cri: &CriContainerd,
    handler: &str,
    pool: &str,
    old_key: &Path,
    old: &[String],
) -> Pod {
    let policy = cri.policy_path(handler).unwrap();
    let edited = pooled(SHIPPED_DEFAULT_POLICY, pool);
    std::fs::write(&policy, test_policy(&edited, cri.layout()).unwrap()).unwrap();
    let after = cri.run_pod("after", handler).unwrap();
    assert!(
        cri.pool_claim_of(&after.id).is_none(),
        "a pod of the edited policy ({pool}) claimed a sandbox of the old one"
    );
    poll_until(
        "the old key's directory to go",
        Duration::from_secs(15),
        || (!old_key.exists()).then_some(()),
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", pool_state(cri)));
    for id in old {
        assert_warm_sandbox_gone(cri, old_key, id);
    }
    after
}

#[test]
fn a_changed_policy_drains_the_old_pool_when_its_first_pod_starts() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, old_key) = filled(&cri, handler, 1);

    // The operator edits the policy. Warm sandboxes booted under the old one must not serve
    // pods of the new one, nor stay booted for nobody: its filler drains the old key before
    // it boots for the new one.
    let after = edit_pool_and_see_the_old_one_go(
        &cri,
        handler,
        "size = 2\nrefill_per_minute = 600",
        &old_key,
        &ids_of(&ready),
    );
    let fresh = wait_ready(&cri, handler, 2);
    let new_key = cri.pool_key_dir(handler).unwrap();
    assert_ne!(new_key, old_key);
    // The filler writes its line when it ends, after the boots.
    poll_until("the filler's report", FILL_TIMEOUT, || {
        std::fs::read_to_string(new_key.join("fill.log"))
            .ok()
            .filter(|log| log.contains("drained stale key"))
    })
    .unwrap_or_else(|e| panic!("{e}:\n{}", pool_state(&cri)));

    remove_pods(&cri, &[(after, vec![]), (cold, vec![])]);
    drain_and_check(&cri, &new_key, &ids_of(&fresh));
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_pool_turned_off_is_drained_when_its_next_pod_starts() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, old_key) = filled(&cri, handler, 1);

    // The operator turns the pool off. Nobody runs pool-drain: the warm sandbox must not
    // stay booted, holding memory, for pods that will never claim it.
    let after =
        edit_pool_and_see_the_old_one_go(&cri, handler, "size = 0", &old_key, &ids_of(&ready));
    // Nothing boots for the policy as it is now.
    assert_eq!(cri.pool_key_dir(handler), None, "{}", pool_state(&cri));

    remove_pods(&cri, &[(after, vec![]), (cold, vec![])]);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_drain_deletes_the_pool_of_a_policy_whose_file_is_gone() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 1);
    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[]);
    // A RuntimeClass's policy removed before its pool: the drain has the template only.
    let policy = cri.policy_path(handler).unwrap();
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::remove_file(&policy).unwrap();
    drain_and_check(&cri, &key, &ids_of(&ready));
    std::fs::write(&policy, text).unwrap();
    assert_clean_cri_shutdown(cri);
}
