//! Secret attacks: the Kubernetes service-account token, and secret-looking environment
//! variables (reported by the default policy, stripped by a policy that says so). Secret values
//! must never reach the audit log or containerd's log.

use std::fs;

use super::lab::{Job, Lab};
use super::{ensure, Attack, Category, Failed, Outcome};
use crate::probe::ProbeLine;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Secrets,
        expected,
        run,
    };
    vec![
        a(
            "read the service-account token mounted into the container",
            "mount removed: ENOENT; audit names the removal",
            service_account_token,
        ),
        a(
            "secret-named env variable (default policy: report)",
            "audit reports GITHUB_TOKEN by name; value in no log",
            secret_env_reported,
        ),
        a(
            "secret-named env variable (policy action strip)",
            "variable absent inside; audit names its removal; value in no log",
            secret_env_stripped,
        ),
    ]
}

fn marker() -> String {
    format!("gvh-secret-{}", crate::ids::random_hex(8))
}

/// Fails if `value` appears in the audit log or containerd's log (the shim logs through it).
fn value_in_no_log(lab: &Lab, value: &str) -> Result<(), Failed> {
    ensure(!lab.audit_text().contains(value), || {
        "the secret value is in the audit log".into()
    })?;
    ensure(!lab.c.log().contains(value), || {
        "the secret value is in containerd's log".into()
    })
}

fn decision<'a>(
    create: &'a serde_json::Value,
    field_part: &str,
    action: &str,
) -> Option<&'a serde_json::Value> {
    create["decisions"].as_array()?.iter().find(|d| {
        d["action"] == action && d["field"].as_str().is_some_and(|f| f.contains(field_part))
    })
}

fn service_account_token(lab: &Lab) -> Outcome {
    let dir = lab
        .dir()
        .join(format!("serviceaccount-{}", crate::ids::random_hex(4)));
    fs::create_dir_all(&dir).map_err(|e| Failed(format!("mkdir: {e}")))?;
    let token = marker();
    fs::write(dir.join("token"), &token).map_err(|e| Failed(format!("token: {e}")))?;
    let mount = format!(
        "type=bind,src={},dst=/var/run/secrets/kubernetes.io/serviceaccount,options=rbind:ro",
        dir.display()
    );
    let ran = lab.run(
        Job::sh(
            "sec-token",
            "/bin/sandbox-probe read /var/run/secrets/kubernetes.io/serviceaccount/token 64; cat /var/run/secrets/kubernetes.io/serviceaccount/token",
        )
        .flags(["--mount", &mount]),
    )?;
    ensure(!ran.out.stdout.contains(&token), || {
        format!("token read: {}", ran.summary())
    })?;
    let line = ProbeLine::parse(ran.out.stdout.lines().next().unwrap_or(""))
        .map_err(|e| Failed(format!("{e}: {}", ran.summary())))?;
    ensure(line.errno() == Some("ENOENT"), || {
        format!("expected ENOENT: {}", ran.summary())
    })?;
    let create = lab.audit_event(&ran.id, "create")?;
    ensure(
        decision(&create, "serviceaccount", "removed").is_some(),
        || format!("no removal decision: {create}"),
    )?;
    Ok("token path ENOENT; audit: mount removed (credential mount)".into())
}

fn secret_env_reported(lab: &Lab) -> Outcome {
    let value = marker();
    let ran = lab.run(
        Job::sh("sec-envrep", "env | grep -c '^GITHUB_TOKEN=' ; true")
            .flags(["--env", &format!("GITHUB_TOKEN={value}")]),
    )?;
    ensure(ran.out.stdout.trim() == "1", || {
        format!("report mode must leave the variable: {}", ran.summary())
    })?;
    let create = lab.audit_event(&ran.id, "create")?;
    ensure(
        decision(&create, "GITHUB_TOKEN", "reported").is_some(),
        || format!("no report decision: {create}"),
    )?;
    value_in_no_log(lab, &value)?;
    Ok(
        "audit: process.env[GITHUB_TOKEN] reported; value in no log; variable kept (report mode)"
            .into(),
    )
}

fn secret_env_stripped(lab: &Lab) -> Outcome {
    let policy = lab.write_policy("strip-secrets", "[environment]\naction = \"strip\"\n")?;
    let value = marker();
    let ran = lab.run(
        Job::sh("sec-envstrip", "env")
            .flags([
                "--env",
                &format!("GITHUB_TOKEN={value}"),
                "--env",
                "HARMLESS=1",
            ])
            .policy(policy),
    )?;
    ensure(
        !ran.out.stdout.contains("GITHUB_TOKEN") && !ran.out.stdout.contains(&value),
        || format!("variable still present: {}", ran.summary()),
    )?;
    ensure(ran.out.stdout.contains("HARMLESS=1"), || {
        format!("other variables must stay: {}", ran.summary())
    })?;
    let create = lab.audit_event(&ran.id, "create")?;
    ensure(
        decision(&create, "GITHUB_TOKEN", "removed").is_some(),
        || format!("no removal decision: {create}"),
    )?;
    value_in_no_log(lab, &value)?;
    Ok("variable absent inside; audit: process.env[GITHUB_TOKEN] removed; value in no log".into())
}
