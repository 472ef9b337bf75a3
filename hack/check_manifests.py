#!/usr/bin/env python3
"""Validate the gvisor-hardened manifests; see hack/check-manifests.sh.

Schema validation uses kubernetes_validate's Python API in strict mode (its CLI exits 0 on
unknown kinds). Kinds a version does not know are an error, except MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1 exists from 1.36) and CRDs (agent-sandbox's Sandbox), whose
embedded pod spec is validated as a Pod instead. Our own checks cover what the schemas cannot:
DNS-label handlers matching the installer's CRI runtime names, quantities, selectors, references;
Pod Security "restricted" (our reading of the public field rules) for every pod template outside a
namespace that enforces "privileged"; the audit-log exporter in a DaemonSet of its own, without
the installer's rights (no host namespaces, no token, no RBAC, unprivileged, no capabilities, one
read-only hostPath that is not /, the installer's nodes); pods of our RuntimeClasses saying what
the runtime enforces;
images pinned (no `:latest`, no missing tag; the installer's tag is its crate version).
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = [f"1.{m}.0" for m in range(30, 38)]
KUSTOMIZATIONS = [
    "deploy/kustomize/default",
    "deploy/kustomize/base",
    "deploy/kustomize/cleanup",
    "runtimeclass",
    "runtimeclass/admission",
    "runtimeclass/admission-mutating",
    "runtimeclass/examples",
]
# Every manifest file must be rendered by one of the kustomizations above.
MANIFEST_DIRS = ["deploy/kustomize", "runtimeclass"]
INSTALLER_NAMESPACE = "gvisor-hardened-system"
INSTALLER_DAEMONSET = "gvisor-hardened-installer"
METRICS_DAEMONSET = "gvisor-hardened-metrics"
NODE_LABEL = "gvisor-hardened.dev/installed"
ENFORCE_LABEL = "gvisor-hardened.dev/enforce"
POLICIES_CONFIGMAP = "gvisor-hardened-policies"
DEFAULT_HANDLER = "gvisor-hardened"
# (apiVersion, kind) -> first minor version whose schemas know it.
KNOWN_FROM = {
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): 36,
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): 36,
}
CRD_POD_TEMPLATES = {("agents.x-k8s.io/v1beta1", "Sandbox"): ("spec", "podTemplate")}
PSS_LABEL = "pod-security.kubernetes.io/enforce"
INSTALLER_IMAGE = "gvisor-hardened-installer"
CONTAINER_GROUPS = ("initContainers", "containers", "ephemeralContainers")
# Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards/), the
# "baseline" and "restricted" field rules as of Kubernetes 1.30-1.37.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
# What every pod of our RuntimeClasses gets from the shim whatever it asks for (the default
# policy's user, read-only root, no token): examples must say so themselves.
RUNTIME_USER = 65534

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)


class Failures:
    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")


def render(kdir):
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / kdir)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"error: kubectl kustomize {kdir} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def ident(obj):
    md = obj.get("metadata", {})
    ns = md.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def quantity_ok(q):
    return isinstance(q, (str, int)) and QUANTITY.match(str(q)) is not None and not str(q).startswith("-")


def schema_check(obj, where, fails, counts):
    key = (obj.get("apiVersion"), obj.get("kind"))
    targets = [(obj, where)]
    if key in CRD_POD_TEMPLATES:
        node = obj
        for k in CRD_POD_TEMPLATES[key]:
            node = node.get(k, {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": obj["metadata"]["name"], **(node.get("metadata") or {})},
            "spec": node.get("spec"),
        }
        targets = [(pod, f"{where} (embedded podTemplate as a Pod)")]
        counts["crd"] += 1
    for version in VERSIONS:
        minor = int(version.split(".")[1])
        for target, label in targets:
            since = KNOWN_FROM.get(key)
            if since is not None and minor < since:
                # Must really be unknown there: if the schemas knew it, we want to validate.
                try:
                    kubernetes_validate.validate(target, version, strict=True)
                    fails.add(label, f"expected unknown in {version} but it validated")
                except kubernetes_validate.SchemaNotFoundError:
                    counts["unknown-expected"] += 1
                except kubernetes_validate.ValidationError as e:
                    fails.add(label, f"{version}: {e.message}")
                continue
            try:
                kubernetes_validate.validate(target, version, strict=True)
                counts["validated"] += 1
            except kubernetes_validate.SchemaNotFoundError:
                fails.add(label, f"kind not known to Kubernetes {version}")
            except kubernetes_validate.ValidationError as e:
                path = "/".join(str(p) for p in e.path)
                fails.add(label, f"{version}: {path}: {e.message}")


def pod_specs(obj):
    """Yield (path, podspec) for objects that carry pods."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        yield "spec", spec
    elif kind in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        yield "spec.jobTemplate.spec.template.spec", spec["jobTemplate"]["spec"]["template"]["spec"]
    elif (obj.get("apiVersion"), kind) in CRD_POD_TEMPLATES:
        yield "spec.podTemplate.spec", (spec.get("podTemplate") or {}).get("spec") or {}


def own_checks(objs, where, fails):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)

    # Handlers the installer will register: one per policies ConfigMap key.
    installer_handlers = None
    for cm in by_kind.get("ConfigMap", []):
        if cm["metadata"]["name"].startswith(POLICIES_CONFIGMAP):
            keys = sorted((cm.get("data") or {}).keys())
            installer_handlers = set()
            for k in keys:
                if not k.endswith(".toml"):
                    fails.add(f"{where} {ident(cm)}", f"key {k!r} is not a .toml policy")
                    continue
                installer_handlers.add(DEFAULT_HANDLER if k == "policy.toml" else k[: -len(".toml")])
            if DEFAULT_HANDLER not in installer_handlers:
                fails.add(f"{where} {ident(cm)}", "no policy.toml (the default handler's policy)")

    rc_handlers = set()
    for rc in by_kind.get("RuntimeClass", []):
        w = f"{where} {ident(rc)}"
        handler = rc.get("handler", "")
        rc_handlers.add(handler)
        if not DNS_LABEL.match(handler or ""):
            fails.add(w, f"handler {handler!r} is not a DNS label")
        if handler != rc["metadata"]["name"]:
            fails.add(w, f"handler {handler!r} differs from the name (the protect policy requires equality)")
        if installer_handlers is not None and handler not in installer_handlers:
            fails.add(w, f"handler {handler!r} is not registered by the installer (policies: {sorted(installer_handlers)})")
        pod_fixed = ((rc.get("overhead") or {}).get("podFixed")) or {}
        if set(pod_fixed) != {"cpu", "memory"}:
            fails.add(w, f"overhead.podFixed must set cpu and memory, has {sorted(pod_fixed)}")
        for res, q in pod_fixed.items():
            if not quantity_ok(q):
                fails.add(w, f"overhead.podFixed.{res} {q!r} is not a quantity")
        sel = ((rc.get("scheduling") or {}).get("nodeSelector")) or {}
        if sel != {NODE_LABEL: "true"}:
            fails.add(w, f"scheduling.nodeSelector must be {{{NODE_LABEL}: 'true'}}, is {sel}")
    if installer_handlers is not None and rc_handlers and rc_handlers != installer_handlers:
        fails.add(where, f"RuntimeClass handlers {sorted(rc_handlers)} != installer handlers {sorted(installer_handlers)}")

    for o in objs:
        w = f"{where} {ident(o)}"
        for path, ps in pod_specs(o):
            for group in ("initContainers", "containers", "ephemeralContainers"):
                for c in ps.get(group) or []:
                    for section in ("requests", "limits"):
                        for res, q in ((c.get("resources") or {}).get(section) or {}).items():
                            if not quantity_ok(q):
                                fails.add(w, f"{path}.{group}[{c.get('name')}].resources.{section}.{res} {q!r} is not a quantity")
            rcn = ps.get("runtimeClassName")
            if rcn is not None and rc_handlers and rcn not in rc_handlers:
                fails.add(w, f"runtimeClassName {rcn!r} is not one of ours")

    sas = {(s["metadata"].get("namespace"), s["metadata"]["name"]) for s in by_kind.get("ServiceAccount", [])}
    for what in exporter_violations(by_kind):
        fails.add(f"{where} DaemonSet/{INSTALLER_NAMESPACE}/{METRICS_DAEMONSET}", what)
    for kind in ("DaemonSet", "Job"):
        for o in by_kind.get(kind, []):
            if o["metadata"].get("namespace") != INSTALLER_NAMESPACE or ident(o).endswith(f"/{METRICS_DAEMONSET}"):
                continue
            w = f"{where} {ident(o)}"
            ps = o["spec"]["template"]["spec"]
            if sas and (INSTALLER_NAMESPACE, ps.get("serviceAccountName")) not in sas:
                fails.add(w, f"serviceAccountName {ps.get('serviceAccountName')!r} not in the rendered output")
            if not ps.get("hostPID"):
                fails.add(w, "hostPID is required (nsenter -t 1)")
            envs = {e["name"]: e for c in ps["containers"] for e in c.get("env") or []}
            if (envs.get("NODE_NAME") or {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
                fails.add(w, "NODE_NAME must come from spec.nodeName")
            # The installer alone in its pod: hostPID is per pod, anything beside it could
            # signal the node's processes.
            names = [c.get("name") for g, c in containers(ps)]
            if len(names) != 1:
                fails.add(w, f"the installer must be the pod's only container, has {names}")
            vols = {v["name"]: v for v in ps.get("volumes") or []}
            if (vols.get("host") or {}).get("hostPath", {}).get("path") != "/":
                fails.add(w, "the host's / must be mounted (volume `host`)")
            for v in vols.values():
                cm = (v.get("configMap") or {}).get("name")
                if cm and where.endswith("default") and cm not in {c["metadata"]["name"] for c in by_kind.get("ConfigMap", [])}:
                    fails.add(w, f"mounts ConfigMap {cm!r} which is not rendered")

    for ns in by_kind.get("Namespace", []):
        if ns["metadata"]["name"] == INSTALLER_NAMESPACE:
            lab = ns["metadata"].get("labels") or {}
            if lab.get("pod-security.kubernetes.io/enforce") != "privileged":
                fails.add(f"{where} {ident(ns)}", "installer namespace needs Pod Security enforce=privileged")

    policies = {p["metadata"]["name"] for k in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy") for p in by_kind.get(k, [])}
    for k in ("ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"):
        for b in by_kind.get(k, []):
            w = f"{where} {ident(b)}"
            if b["spec"]["policyName"] not in policies:
                fails.add(w, f"policyName {b['spec']['policyName']!r} is not rendered alongside")
            sel = ((b["spec"].get("matchResources") or {}).get("namespaceSelector")) or None
            if sel is not None:
                exprs = sel.get("matchExpressions") or []
                if not any(e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn" and INSTALLER_NAMESPACE in e["values"] for e in exprs):
                    fails.add(w, f"namespaceSelector does not exempt {INSTALLER_NAMESPACE}")
                if not any(e["key"] == ENFORCE_LABEL and e["operator"] == "In" and e["values"] == ["true"] for e in exprs):
                    fails.add(w, f"namespaceSelector does not select {ENFORCE_LABEL}=true")


def exporter_violations(by_kind):
    """Where the installer DaemonSet is rendered, the exporter's DaemonSet must be too, in the
    installer's namespace, on the installer's nodes, with a service account of its own that no
    binding names (and its template must pass metrics_violations)."""
    def named(kind, name):
        return next((o for o in by_kind.get(kind, []) if o["metadata"]["name"] == name
                     and o["metadata"].get("namespace") == INSTALLER_NAMESPACE), None)
    installer = named("DaemonSet", INSTALLER_DAEMONSET)
    ds = named("DaemonSet", METRICS_DAEMONSET)
    if installer is None and ds is None:
        return []
    if ds is None:
        return ["missing (the installer DaemonSet is rendered without the exporter's)"]
    out = [f"metrics: {w}" for w in metrics_violations(ds["spec"]["template"])]
    ps = ds["spec"]["template"].get("spec") or {}
    sa = ps.get("serviceAccountName")
    if installer is not None:
        ips = installer["spec"]["template"]["spec"]
        for k in ("nodeSelector", "tolerations"):
            if ps.get(k) != ips.get(k):
                out.append(f"{k} must be the installer's (its nodes): {ps.get(k)!r} != {ips.get(k)!r}")
        if sa in (None, "default", ips.get("serviceAccountName")):
            out.append(f"serviceAccountName {sa!r}: needs an account of its own")
    account = named("ServiceAccount", sa)
    if account is None:
        out.append(f"serviceAccountName {sa!r} not in the rendered output")
    elif account.get("automountServiceAccountToken") is not False:
        out.append(f"ServiceAccount {sa!r} must set automountServiceAccountToken: false")
    for k in ("RoleBinding", "ClusterRoleBinding"):
        for b in by_kind.get(k, []):
            if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in b.get("subjects") or []):
                out.append(f"{ident(b)} binds {sa!r}: the exporter needs no RBAC")
    selector = (ds["spec"].get("selector") or {}).get("matchLabels")
    if installer is not None and selector == (installer["spec"].get("selector") or {}).get("matchLabels"):
        out.append("selector is the installer's: each DaemonSet must select only its own pods")
    return out


def metrics_violations(template):
    """The exporter's pod (the audit log exporter, `metrics`) has none of the installer's
    rights; it is in the installer's privileged namespace, so Pod Security does not look at
    it. What it may have: one read-only hostPath mount of a directory that is not /, uid 0
    without capabilities, and a named port the scrape annotations point at. No host
    namespace (hostPID is per pod: uid 0 there could signal the node's uid-0 processes), no
    service account token, no other container."""
    out = []
    ps = template.get("spec") or {}
    for k in ("hostPID", "hostNetwork", "hostIPC"):
        if ps.get(k):
            out.append(f"{k} must be false or absent")
    if ps.get("automountServiceAccountToken") is not False:
        out.append("automountServiceAccountToken must be false")
    names = [c.get("name") for g, c in containers(ps)]
    c = next((c for c in ps.get("containers") or [] if c.get("name") == "metrics"), None)
    if c is None:
        return out + ["missing (a container named metrics)"]
    if names != ["metrics"]:
        out.append(f"the exporter must be the pod's only container, has {names}")
    sc = c.get("securityContext") or {}
    if sc.get("privileged") is not False:
        out.append("privileged must be false")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append("allowPrivilegeEscalation must be false")
    if sc.get("readOnlyRootFilesystem") is not True:
        out.append("readOnlyRootFilesystem must be true")
    caps = sc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"] or caps.get("add"):
        out.append("capabilities must drop ALL and add none")
    vols = {v["name"]: v for v in ps.get("volumes") or []}
    mounts = c.get("volumeMounts") or []
    if len(mounts) != 1:
        out.append(f"exactly one volume mount (the audit log's directory), has {len(mounts)}")
    for m in mounts:
        hp = (vols.get(m.get("name")) or {}).get("hostPath") or {}
        if not hp or hp.get("path") in (None, "", "/"):
            out.append(f"mount {m.get('name')!r} must be a hostPath of the log's directory, not /")
        if m.get("readOnly") is not True:
            out.append(f"mount {m.get('name')!r} must be readOnly")
    ports = [p for p in c.get("ports") or [] if p.get("name") == "metrics"]
    ann = (template.get("metadata") or {}).get("annotations") or {}
    if len(ports) != 1 or ports[0].get("hostPort"):
        out.append("one containerPort named metrics, no hostPort")
    elif ann.get("prometheus.io/port") != str(ports[0].get("containerPort")):
        out.append(f"annotation prometheus.io/port {ann.get('prometheus.io/port')!r} is not the metrics port")
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics":
        out.append("annotations prometheus.io/scrape 'true' and prometheus.io/path '/metrics' are needed")
    return out


def good_metrics_template():
    return {
        "metadata": {"annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9464",
                                     "prometheus.io/path": "/metrics"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "metrics", "ports": [{"name": "metrics", "containerPort": 9464}],
                            "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                                                "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [{"name": "log", "mountPath": "/l", "readOnly": True}]}],
            "volumes": [{"name": "log", "hostPath": {"path": "/var/log/x"}},
                        {"name": "host", "hostPath": {"path": "/"}}],
        },
    }


def _m(t):
    return t["spec"]["containers"][0]


# One mutation of good_metrics_template() per rule, and the words its failure must contain.
METRICS_MUTATIONS = [
    ("missing", lambda t: _m(t).update(name="other")),
    ("privileged must be false", lambda t: _m(t)["securityContext"].update(privileged=True)),
    ("allowPrivilegeEscalation", lambda t: _m(t)["securityContext"].pop("allowPrivilegeEscalation")),
    ("readOnlyRootFilesystem", lambda t: _m(t)["securityContext"].update(readOnlyRootFilesystem=False)),
    ("drop ALL", lambda t: _m(t)["securityContext"]["capabilities"].update(add=["DAC_READ_SEARCH"])),
    ("exactly one volume mount", lambda t: _m(t)["volumeMounts"].append({"name": "log", "mountPath": "/m", "readOnly": True})),
    ("not /", lambda t: _m(t)["volumeMounts"][0].update(name="host")),
    ("must be readOnly", lambda t: _m(t)["volumeMounts"][0].pop("readOnly")),
    ("no hostPort", lambda t: _m(t)["ports"][0].update(hostPort=9464)),
    ("is not the metrics port", lambda t: t["metadata"]["annotations"].update({"prometheus.io/port": "9100"})),
    ("prometheus.io/scrape", lambda t: t["metadata"]["annotations"].pop("prometheus.io/scrape")),
    ("hostPID must be false", lambda t: t["spec"].update(hostPID=True)),
    ("hostNetwork must be false", lambda t: t["spec"].update(hostNetwork=True)),
    ("hostIPC must be false", lambda t: t["spec"].update(hostIPC=True)),
    ("automountServiceAccountToken", lambda t: t["spec"].pop("automountServiceAccountToken")),
    ("only container", lambda t: t["spec"]["containers"].append({"name": "sidecar"})),
]


def good_exporter_objects():
    """An installer DaemonSet and the exporter's, as own_checks sees a kustomization."""
    sel = lambda comp: {"matchLabels": {"app.kubernetes.io/component": comp}}
    installer = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": INSTALLER_DAEMONSET, "namespace": INSTALLER_NAMESPACE},
                 "spec": {"selector": sel("installer"), "template": {"spec": {
                     "serviceAccountName": INSTALLER_DAEMONSET, "hostPID": True,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "installer", "env": [
                         {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}],
                     "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}}
    template = good_metrics_template()
    template["spec"].update(serviceAccountName=METRICS_DAEMONSET, tolerations=[{"operator": "Exists"}])
    metrics = {"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": METRICS_DAEMONSET, "namespace": INSTALLER_NAMESPACE},
               "spec": {"selector": sel("metrics"), "template": template}}
    sa = lambda name, **kw: {"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": name, "namespace": INSTALLER_NAMESPACE}, **kw}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": INSTALLER_DAEMONSET},
               "subjects": [{"kind": "ServiceAccount", "name": INSTALLER_DAEMONSET,
                             "namespace": INSTALLER_NAMESPACE}]}
    return [installer, metrics, sa(INSTALLER_DAEMONSET),
            sa(METRICS_DAEMONSET, automountServiceAccountToken=False), binding]


def _objs(objs, kind, name):
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def _ps(objs, name):
    return _objs(objs, "DaemonSet", name)["spec"]["template"]["spec"]


# One mutation of good_exporter_objects() per rule own_checks applies to the pair, and the
# words its failure must contain.
EXPORTER_MUTATIONS = [
    ("rendered without the exporter's", lambda objs: objs.remove(_objs(objs, "DaemonSet", METRICS_DAEMONSET))),
    ("the installer must be the pod's only container",
     lambda objs: _ps(objs, INSTALLER_DAEMONSET)["containers"].append(good_metrics_template()["spec"]["containers"][0])),
    ("tolerations must be the installer's", lambda objs: _ps(objs, METRICS_DAEMONSET).pop("tolerations")),
    ("needs an account of its own", lambda objs: _ps(objs, METRICS_DAEMONSET).update(serviceAccountName=INSTALLER_DAEMONSET)),
    ("automountServiceAccountToken: false",
     lambda objs: _objs(objs, "ServiceAccount", METRICS_DAEMONSET).pop("automountServiceAccountToken")),
    ("the exporter needs no RBAC",
     lambda objs: _objs(objs, "ClusterRoleBinding", INSTALLER_DAEMONSET)["subjects"].append(
         {"kind": "ServiceAccount", "name": METRICS_DAEMONSET, "namespace": INSTALLER_NAMESPACE})),
    ("selector is the installer's",
     lambda objs: _objs(objs, "DaemonSet", METRICS_DAEMONSET)["spec"].update(
         selector=_objs(objs, "DaemonSet", INSTALLER_DAEMONSET)["spec"]["selector"])),
    ("metrics: hostPID must be false", lambda objs: _ps(objs, METRICS_DAEMONSET).update(hostPID=True)),
]


def metrics_self_test():
    missing = []
    if metrics_violations(good_metrics_template()):
        missing.append(f"a good metrics container was flagged: {metrics_violations(good_metrics_template())}")
    for words, mutate in METRICS_MUTATIONS:
        t = good_metrics_template()
        mutate(t)
        got = metrics_violations(t)
        if not any(words in g for g in got):
            missing.append(f"metrics {words!r}: got {got}")
    fails = Failures()
    own_checks(good_exporter_objects(), "self-test", fails)
    if fails.items:
        missing.append(f"a good installer and exporter pair was flagged: {fails.items}")
    for words, mutate in EXPORTER_MUTATIONS:
        objs = good_exporter_objects()
        mutate(objs)
        fails = Failures()
        own_checks(objs, "self-test", fails)
        if not any(words in f for f in fails.items):
            missing.append(f"exporter {words!r}: got {fails.items}")
    return missing


def containers(ps):
    """(group, container) for every container of a pod spec."""
    for group in CONTAINER_GROUPS:
        for c in ps.get(group) or []:
            yield group, c


def restricted_violations(ps, annotations=None):
    """Pod Security "restricted" (which includes "baseline"): (rule, detail) per violation."""
    out = []
    psc = ps.get("securityContext") or {}
    scs = [(f"{g}[{c.get('name')}]", c.get("securityContext") or {}) for g, c in containers(ps)]
    levels = [("pod", psc)] + scs

    # baseline
    for where, sc in levels:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(("hostProcess", f"{where}.securityContext.windowsOptions.hostProcess"))
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        if ps.get(k):
            out.append(("hostNamespaces", k))
    for where, sc in scs:
        if sc.get("privileged"):
            out.append(("privileged", f"{where}.securityContext.privileged"))
    for g, c in containers(ps):
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(("hostPorts", f"{g}[{c.get('name')}].ports.hostPort"))
    for k, v in (annotations or {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and v != "runtime/default" and not v.startswith("localhost/"):
            out.append(("appArmor", f"annotation {k}={v}"))
    for where, sc in levels:
        t = (sc.get("appArmorProfile") or {}).get("type")
        if t is not None and t not in ("RuntimeDefault", "Localhost"):
            out.append(("appArmor", f"{where}.securityContext.appArmorProfile.type {t}"))
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(("seLinux", f"{where}.securityContext.seLinuxOptions"))
        if sc.get("procMount", "Default") != "Default":
            out.append(("procMount", f"{where}.securityContext.procMount"))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(("sysctls", f"pod.securityContext.sysctls {s.get('name')}"))

    # restricted
    for v in ps.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        if not kinds or any(k not in RESTRICTED_VOLUMES for k in kinds):
            out.append(("volumeTypes", f"volume {v.get('name')}: {kinds}"))
    pod_nonroot = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in ("RuntimeDefault", "Localhost"):
        out.append(("seccompProfile", f"pod.securityContext.seccompProfile.type {pod_seccomp}"))
    if psc.get("runAsUser") == 0:
        out.append(("runAsUser", "pod.securityContext.runAsUser 0"))
    for where, sc in scs:
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(("allowPrivilegeEscalation", f"{where}: must be false"))
        nonroot = sc.get("runAsNonRoot")
        if nonroot is False or (nonroot is None and not pod_nonroot):
            out.append(("runAsNonRoot", f"{where}: must be true (pod or container)"))
        if sc.get("runAsUser") == 0:
            out.append(("runAsUser", f"{where}.securityContext.runAsUser 0"))
        t = (sc.get("seccompProfile") or {}).get("type")
        if (t is None and pod_seccomp is None) or (t is not None and t not in ("RuntimeDefault", "Localhost")):
            out.append(("seccompProfile", f"{where}: RuntimeDefault or Localhost (pod or container)"))
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(("capabilities", f"{where}: must drop ALL"))
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                kind = "capabilities" if cap in BASELINE_CAPS else "capabilities (baseline)"
                out.append((kind, f"{where}: adds {cap}"))
    return out


def runtime_violations(ps):
    """What a pod of our RuntimeClasses must say because the runtime enforces it anyway."""
    out = []
    psc = ps.get("securityContext") or {}
    if ps.get("automountServiceAccountToken") is not False:
        out.append(("automountServiceAccountToken", "must be false (the runtime removes the token)"))
    for g, c in containers(ps):
        sc = c.get("securityContext") or {}
        where = f"{g}[{c.get('name')}]"
        for k, want in (("runAsUser", RUNTIME_USER), ("runAsGroup", RUNTIME_USER)):
            if sc.get(k, psc.get(k)) != want:
                out.append((k, f"{where}: must be {want} (the policy's user)"))
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(("readOnlyRootFilesystem", f"{where}: must be true (the runtime makes / read-only)"))
    return out


def split_image(ref):
    """(name, tag, digest) of an image reference; tag/digest None when absent."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest or None


def crate_version(rel):
    return tomllib.loads((ROOT / rel).read_text())["package"]["version"]


def image_violations(ps, installer_version):
    out = []
    for g, c in containers(ps):
        ref = c.get("image") or ""
        name, tag, digest = split_image(ref)
        where = f"{g}[{c.get('name')}] image {ref!r}"
        if digest is None and tag in (None, "latest"):
            out.append(("imagePinned", f"{where}: pin a version tag or a digest, never latest or none"))
        if name.rsplit("/", 1)[-1] == INSTALLER_IMAGE and digest is None and tag != installer_version:
            out.append(("installerImage", f"{where}: tag must be the installer's version {installer_version} (or a digest)"))
    return out


def pod_checks(rendered, fails):
    """Pod Security "restricted", agreement with the runtime and image pinning, for every pod
    template. Returns (restricted, exempt) counts."""
    levels = {}
    for objs in rendered.values():
        for o in objs:
            if o.get("kind") == "Namespace":
                levels[o["metadata"]["name"]] = (o["metadata"].get("labels") or {}).get(PSS_LABEL)
    version = crate_version("deploy/installer/Cargo.toml")
    counts = {"restricted": 0, "exempt": 0}
    for k, objs in rendered.items():
        for o in objs:
            for path, ps in pod_specs(o):
                w = f"{k} {ident(o)} {path}"
                found = image_violations(ps, version)
                ns = o["metadata"].get("namespace")
                if levels.get(ns) == "privileged":
                    counts["exempt"] += 1
                else:
                    counts["restricted"] += 1
                    meta = (((o.get("spec") or {}).get("template") or (o.get("spec") or {}).get("podTemplate") or {}).get("metadata")
                            if o.get("kind") != "Pod" else o.get("metadata")) or {}
                    found += [(f"restricted/{r}", d) for r, d in restricted_violations(ps, meta.get("annotations"))]
                if (ps.get("runtimeClassName") or "").startswith(DEFAULT_HANDLER):
                    found += [(f"runtime/{r}", d) for r, d in runtime_violations(ps)]
                for rule, detail in found:
                    fails.add(w, f"{rule}: {detail}")
    return counts


def covered_files(rendered, fails):
    seen = {(o.get("kind"), o["metadata"]["name"]) for objs in rendered.values() for o in objs}
    for d in MANIFEST_DIRS:
        for f in sorted((ROOT / d).rglob("*.yaml")):
            if f.name == "kustomization.yaml":
                continue
            for o in yaml.safe_load_all(f.read_text()):
                if o and (o.get("kind"), o["metadata"]["name"]) not in seen:
                    fails.add(str(f.relative_to(ROOT)), f"{ident(o)} is not rendered by any kustomization")


def self_test():
    """The checks must catch what they claim to: feed known-bad objects, expect each failure."""
    bad_rc = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "Bad_Handler"},
        "handler": "Bad_Handler",
        "overhead": {"podFixed": {"memory": "40Mb", "cpu": "-1"}},
        "scheduling": {"nodeSelector": {"other": "true"}},
    }
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": POLICIES_CONFIGMAP}, "data": {"policy.toml": ""}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyName": "missing", "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": []}}},
    }
    fails = Failures()
    own_checks([bad_rc, cm, binding], "self-test", fails)
    text = "\n".join(fails.items)
    expected = ["is not a DNS label", "not registered by the installer", "'40Mb' is not a quantity",
                "'-1' is not a quantity", "nodeSelector must be", "policyName 'missing'",
                "does not exempt", "does not select"]
    missing = [e for e in expected if e not in text]
    sfails = Failures()
    schema_check({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "x"},
                  "handler": "x", "handlr": "typo"}, "self-test typo", sfails, {"validated": 0, "unknown-expected": 0, "crd": 0})
    if not any("handlr" in f for f in sfails.items):
        missing.append("strict schema validation of an unknown field")
    missing += pod_self_test()
    missing += metrics_self_test()
    if missing:
        raise SystemExit(f"error: self-test: checks did not catch: {missing}\n{text}")
    print(f"self-test: the checks caught all {len(expected) + 1 + len(POD_MUTATIONS) + len(METRICS_MUTATIONS) + len(EXPORTER_MUTATIONS)} planted errors")


def good_pod():
    return {
        "runtimeClassName": DEFAULT_HANDLER,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUNTIME_USER, "runAsGroup": RUNTIME_USER,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "w", "emptyDir": {}}],
    }


def _c(ps):
    return ps["containers"][0]["securityContext"]


# One mutation of good_pod() per rule, and the rule(s) that must then (and only then) fire.
POD_MUTATIONS = [
    ("restricted/hostProcess", lambda ps: _c(ps).update(windowsOptions={"hostProcess": True})),
    ("restricted/hostNamespaces", lambda ps: ps.update(hostPID=True)),
    ("restricted/privileged", lambda ps: _c(ps).update(privileged=True)),
    ("restricted/hostPorts", lambda ps: ps["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])),
    ("restricted/appArmor", lambda ps: _c(ps).update(appArmorProfile={"type": "Unconfined"})),
    ("restricted/seLinux", lambda ps: ps["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
    ("restricted/procMount", lambda ps: _c(ps).update(procMount="Unmasked")),
    ("restricted/sysctls", lambda ps: ps["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    ("restricted/volumeTypes", lambda ps: ps["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    ("restricted/allowPrivilegeEscalation", lambda ps: _c(ps).pop("allowPrivilegeEscalation")),
    ("restricted/runAsNonRoot", lambda ps: _c(ps).update(runAsNonRoot=False)),
    # uid 0 is also not the runtime's user.
    (("restricted/runAsUser", "runtime/runAsUser"), lambda ps: _c(ps).update(runAsUser=0)),
    ("restricted/seccompProfile", lambda ps: _c(ps).update(seccompProfile={"type": "Unconfined"})),
    ("restricted/capabilities", lambda ps: _c(ps).update(capabilities={"drop": ["ALL"], "add": ["CHOWN"]})),
    ("restricted/capabilities (baseline)", lambda ps: _c(ps).update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})),
    ("runtime/automountServiceAccountToken", lambda ps: ps.pop("automountServiceAccountToken")),
    ("runtime/runAsGroup", lambda ps: ps["securityContext"].pop("runAsGroup")),
    ("runtime/readOnlyRootFilesystem", lambda ps: _c(ps).pop("readOnlyRootFilesystem")),
    ("imagePinned", lambda ps: ps["containers"][0].update(image="busybox:latest")),
    ("installerImage", lambda ps: ps["containers"][0].update(image=f"{INSTALLER_IMAGE}:0.0.0-other")),
]


def pod_self_test():
    """The pod rules: a good pod passes, and each mutation is caught by exactly its rule."""
    def fired(ps, annotations=None):
        found = [f"restricted/{r}" for r, _ in restricted_violations(ps, annotations)]
        found += [f"runtime/{r}" for r, _ in runtime_violations(ps)]
        found += [r for r, _ in image_violations(ps, "1.2.3")]
        return sorted(set(found))

    missing = []
    if fired(good_pod()):
        missing.append(f"a restricted pod was flagged: {fired(good_pod())}")
    for rules, mutate in POD_MUTATIONS:
        want = sorted([rules] if isinstance(rules, str) else rules)
        ps = good_pod()
        mutate(ps)
        got = fired(ps)
        if got != want:
            missing.append(f"{want}: fired {got}")
    ann = {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
    if fired(good_pod(), ann) != ["restricted/appArmor"]:
        missing.append("restricted/appArmor (annotation)")
    return missing


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    fails = Failures()
    counts = {"validated": 0, "unknown-expected": 0, "crd": 0}
    rendered = {}
    for k in KUSTOMIZATIONS:
        objs = render(k)
        rendered[k] = objs
        for o in objs:
            schema_check(o, f"{k} {ident(o)}", fails, counts)
        own_checks(objs, k, fails)
    covered_files(rendered, fails)
    pods = pod_checks(rendered, fails)
    total = sum(len(v) for v in rendered.values())
    if fails.items:
        print(f"FAILED: {len(fails.items)} problem(s) in {total} rendered objects:", file=sys.stderr)
        for f in fails.items:
            print(f"  {f}", file=sys.stderr)
        raise SystemExit(1)
    print(
        f"ok: {len(KUSTOMIZATIONS)} kustomizations, {total} objects; "
        f"{counts['validated']} object-version validations passed (Kubernetes {VERSIONS[0]}-{VERSIONS[-1]}, strict); "
        f"{counts['unknown-expected']} expected-unknown (MutatingAdmissionPolicy v1 before 1.36); "
        f"{counts['crd']} CRD objects checked through their embedded pod spec; "
        f"{pods['restricted']} pod templates meet Pod Security restricted, "
        f"{pods['exempt']} in a privileged namespace (the installer's); images pinned"
    )


if __name__ == "__main__":
    main()
