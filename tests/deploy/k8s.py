"""Checks deploy/kubernetes/ offline (run by k8s.sh with a venv's Python): every manifest
against the Kubernetes 1.29 schemas (kubernetes-validate, strict: unknown fields refused), the
TFJob against tfjob-v1.schema.json plus its pod templates against the Kubernetes schemas, the
Secret that curve-secret.sh prints, and what no schema sees: names, ports, probes, the Secret's
keys against the flags that name them, the Job's and StatefulSet's sizes against ps-cluster,
TF_CONFIG as tfconfig.sh builds it (then fed to the real psd and psworker with each
manifest's flags and --help, which exits 0 only when everything before it is valid), and the
TFJob's containers with the exact TF_CONFIG the Kubeflow operator writes.
Env: PS_SOURCE_ROOT, PSD, PSWORKER, PSCTL. Exit 0 ok, 1 a check failed."""
import copy, glob, json, os, subprocess, sys, tempfile

import jsonschema
import kubernetes_validate
import yaml

K8S = "1.29.0"
root = os.environ["PS_SOURCE_ROOT"]
kdir = os.path.join(root, "deploy", "kubernetes")
progs = {"psd": os.environ.get("PSD"), "psworker": os.environ.get("PSWORKER")}
failed = []


def ok(m):
    print("ok: " + m)


def bad(m):
    print("FAIL: " + m)
    failed.append(m)


def check(cond, yes, no):
    (ok if cond else bad)(yes if cond else no)
    return cond


def k8s_error(doc):
    """None when doc validates against Kubernetes K8S's strict schemas, else the reason."""
    try:
        kubernetes_validate.validate(doc, K8S, strict=True)
        return None
    except kubernetes_validate.ValidationError as e:
        return "%s at %s" % (e.message, "/".join(str(p) for p in e.path))
    except kubernetes_validate.SchemaNotFoundError as e:
        return e.message


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---- the validator refuses what it must (else nothing below means anything) -------------
probe = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
         "spec": {"ports": [{"port": 1, "targetPorts": 1}]}}
check(k8s_error(probe) is not None, "the validator refuses a wrong field name (targetPorts)",
      "the validator accepts a wrong field name: strict validation is not on")
probe["spec"]["ports"][0] = {"port": "one"}
check(k8s_error(probe) is not None, "the validator refuses a wrong type",
      "the validator accepts port: \"one\"")

# ---- every manifest against the schemas ---------------------------------------------------
plain = sorted(glob.glob(os.path.join(kdir, "*.yaml")))
res = {}  # (kind, name) -> document
for path in plain:
    for d in docs(path):
        err = k8s_error(d)
        what = "%s: %s/%s" % (os.path.basename(path), d.get("kind"), d.get("metadata", {}).get("name"))
        check(err is None, what + " valid (Kubernetes %s, strict)" % K8S, what + ": " + str(err))
        res[(d.get("kind"), d.get("metadata", {}).get("name"))] = d

tmp = tempfile.mkdtemp(prefix="ps-k8s.")
psctl = os.environ.get("PSCTL")
secret = None
if psctl:
    r = subprocess.run(["sh", os.path.join(kdir, "curve-secret.sh"), "--psctl", psctl],
                       capture_output=True, text=True, timeout=60)
    if check(r.returncode == 0, "curve-secret.sh ran", "curve-secret.sh: %s" % r.stderr.strip()):
        secret = yaml.safe_load(r.stdout)
        err = k8s_error(secret)
        check(err is None, "curve-secret.sh prints a valid Secret", "its Secret: %s" % err)
        want = {"%s.%s" % (n, e) for n in ("server", "worker", "admin") for e in ("key", "pub")}
        check(set(secret.get("data", {})) == want, "the Secret holds " + " ".join(sorted(want)),
              "the Secret holds %s" % sorted(secret.get("data", {})))
else:
    bad("PSCTL not set: curve-secret.sh not run")

# ---- names, sizes, ports, probes, mounts: what the schemas cannot see ------------------------
def get(kind, name):
    d = res.get((kind, name))
    if d is None:
        bad("no %s %s in deploy/kubernetes/" % (kind, name))
    return d


cm = get("ConfigMap", "ps-cluster") or {"data": {}}
cfg = cm["data"]
ep = get("ConfigMap", "ps-entrypoint") or {"data": {}}
sts = get("StatefulSet", cfg.get("PS_NAME"))
job = get("Job", cfg.get("WORKER_NAME"))
svc_ps = get("Service", cfg.get("PS_NAME"))
svc_w = get("Service", cfg.get("WORKER_NAME"))
if not all((sts, job, svc_ps, svc_w)):
    print("FAIL: missing resources; further checks skipped")
    sys.exit(1)


def subset(a, b):
    return all(b.get(k) == v for k, v in (a or {}).items())


def flag(args, name):
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def port_number(container, port):
    for p in container.get("ports", []):
        if port in (p.get("name"), p.get("containerPort")):
            return p.get("containerPort")
    return None


tpl = sts["spec"]["template"]
check(sts["spec"]["serviceName"] == svc_ps["metadata"]["name"] == sts["metadata"]["name"],
      "StatefulSet serviceName = its headless Service's name = PS_NAME",
      "StatefulSet serviceName %r, Service %r" % (sts["spec"]["serviceName"], svc_ps["metadata"]["name"]))
for svc, podtpl, what in ((svc_ps, tpl, "psd"), (svc_w, job["spec"]["template"], "psworker")):
    check(svc["spec"].get("clusterIP") == "None", what + " Service is headless", what + " Service is not headless")
    check(subset(svc["spec"].get("selector"), podtpl["metadata"]["labels"]) and svc["spec"].get("selector"),
          what + " Service selects the pods", what + " Service's selector misses the pods' labels")
check(subset(sts["spec"]["selector"]["matchLabels"], tpl["metadata"]["labels"]),
      "StatefulSet selector matches its template", "StatefulSet selector misses its template's labels")
check(str(sts["spec"]["replicas"]) == cfg["PS_REPLICAS"], "StatefulSet replicas = PS_REPLICAS",
      "StatefulSet replicas %s, PS_REPLICAS %s" % (sts["spec"]["replicas"], cfg["PS_REPLICAS"]))
js = job["spec"]
check(js.get("completionMode") == "Indexed", "the Job is Indexed", "completionMode is %r" % js.get("completionMode"))
check(str(js.get("completions")) == str(js.get("parallelism")) == cfg["WORKER_REPLICAS"],
      "Job completions = parallelism = WORKER_REPLICAS",
      "Job completions %s, parallelism %s, WORKER_REPLICAS %s" % (js.get("completions"), js.get("parallelism"), cfg["WORKER_REPLICAS"]))
check(js["template"]["spec"].get("subdomain") == svc_w["metadata"]["name"] == job["metadata"]["name"],
      "the Job's pods' subdomain = the worker Service = WORKER_NAME",
      "subdomain %r, worker Service %r" % (js["template"]["spec"].get("subdomain"), svc_w["metadata"]["name"]))


def check_psd_container(c, podtpl, what, ps_port_name):
    args = c.get("args") or c.get("command") or []
    args = args[args.index("psd"):] if "psd" in args else args
    mport = flag(args, "--metrics-port")
    check(mport is not None and port_number(c, "metrics") == int(mport),
          what + ": container port 'metrics' = --metrics-port %s" % mport,
          what + ": --metrics-port %s, container port metrics %s" % (mport, port_number(c, "metrics")))
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        hg = (c.get(kind) or {}).get("httpGet") or {}
        check(hg.get("path") == "/healthz" and mport is not None and port_number(c, hg.get("port")) == int(mport),
              what + ": %s GET /healthz on --metrics-port" % kind,
              what + ": %s is %r (want /healthz on port %s)" % (kind, hg, mport))
    ann = podtpl["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == mport
          and ann.get("prometheus.io/path") == "/metrics",
          what + ": Prometheus annotations scrape :%s/metrics" % mport, what + ": annotations %r" % ann)
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    check(mounts.get(flag(args, "--checkpoint-dir")) is not None,
          what + ": --checkpoint-dir is a mounted volume", what + ": --checkpoint-dir %s is not a mount" % flag(args, "--checkpoint-dir"))
    check(port_number(c, ps_port_name) is not None, what + ": container port %s" % ps_port_name,
          what + ": no container port %s" % ps_port_name)
    return args


def secret_items(c, podtpl, path):
    """(key in the Secret, item path) of the file or directory path, from the Secret volume
    mounted above it; [] when none."""
    vols = {v["name"]: v for v in podtpl["spec"].get("volumes", [])}
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") + "/"
        v = vols.get(m["name"], {})
        if path.startswith(mp) and "secret" in v:
            rel = path[len(mp):]
            if secret and v["secret"].get("secretName") != secret["metadata"]["name"]:
                bad("volume %s mounts Secret %s, curve-secret.sh makes %s" % (m["name"], v["secret"].get("secretName"), secret["metadata"]["name"]))
            return [(i["key"], i["path"]) for i in v["secret"].get("items", [])
                    if i["path"] == rel or i["path"].startswith(rel + "/")]
    return []


def check_keys(c, podtpl, what, args, role):
    """The CurveZMQ flags name files of the Secret, and the right ones."""
    keys = set((secret or {}).get("data", {}))
    cs = flag(args, "--curve-secret")
    items = secret_items(c, podtpl, cs or "")
    check(len(items) == 1 and items[0][0].endswith(".key") and (not secret or items[0][0] in keys),
          what + ": --curve-secret %s is the Secret's %s" % (cs, items[0][0] if items else "?"),
          what + ": --curve-secret %s is not one .key of the Secret (%r)" % (cs, items))
    own = items[0][0] if items else None
    if role == "psd":
        check(own == "server.key", what + ": psd holds the server key pair", what + ": psd's key pair is %s" % own)
        ak = flag(args, "--authorized-keys")
        auth = secret_items(c, podtpl, ak or "")
        check(auth and all(k.endswith(".pub") and p.endswith(".pub") and (not secret or k in keys) for k, p in auth),
              what + ": --authorized-keys %s holds %s" % (ak, " ".join(k for k, _ in auth)),
              what + ": --authorized-keys %s holds %r" % (ak, auth))
        return {k for k, _ in auth}
    sk = flag(args, "--server-key")
    items = secret_items(c, podtpl, sk or "")
    check([k for k, _ in items] == ["server.pub"], what + ": --server-key is the Secret's server.pub",
          what + ": --server-key %s is %r" % (sk, items))
    return own


pc = tpl["spec"]["containers"][0]
wc = js["template"]["spec"]["containers"][0]
psd_args = check_psd_container(pc, tpl, "psd.yaml", "ps")
check(port_number(pc, "ps") == int(cfg["PS_PORT"]) and
      any(p.get("port") == int(cfg["PS_PORT"]) and p.get("targetPort") in ("ps", int(cfg["PS_PORT"])) for p in svc_ps["spec"]["ports"]),
      "psd's container port, its Service's port and PS_PORT agree (%s)" % cfg["PS_PORT"],
      "PS_PORT %s, container port %s, Service ports %r" % (cfg["PS_PORT"], port_number(pc, "ps"), svc_ps["spec"]["ports"]))
mport = int(flag(psd_args, "--metrics-port"))
check(any(p.get("port") == mport for p in svc_ps["spec"]["ports"]), "psd Service exposes the metrics port",
      "psd Service lacks port %s" % mport)
ckpt = [m["name"] for m in pc.get("volumeMounts", []) if m["mountPath"] == flag(psd_args, "--checkpoint-dir")]
check(ckpt and ckpt[0] in [v["metadata"]["name"] for v in sts["spec"].get("volumeClaimTemplates", [])],
      "psd.yaml: --checkpoint-dir is the pod's own PersistentVolumeClaim (%s)" % (ckpt or ["?"])[0],
      "psd.yaml: --checkpoint-dir's volume %r is no volumeClaimTemplate" % ckpt)
authorized = check_keys(pc, tpl, "psd.yaml", psd_args, "psd")
w_args = wc["args"][wc["args"].index("psworker"):] if "psworker" in wc.get("args", []) else []
check(bool(w_args), "psworker.yaml runs psworker", "psworker.yaml does not run psworker")
wkey = check_keys(wc, js["template"], "psworker.yaml", w_args, "worker")
check(wkey and wkey[:-4] + ".pub" in authorized, "psd authorizes the workers' key (%s)" % wkey,
      "the workers' key %s is not in psd's --authorized-keys %r" % (wkey, authorized))
limits = wc.get("resources", {}).get("limits", {})
check(str(limits.get("nvidia.com/gpu")) == "1", "workers ask for nvidia.com/gpu: 1", "worker limits %r" % limits)

# ---- TF_CONFIG from tfconfig.sh, then the real programs ----------------------------------
script = os.path.join(tmp, "tfconfig.sh")
with open(script, "w") as f:
    f.write(ep["data"].get("tfconfig.sh", ""))
ep_mount = None
for c, podtpl, what in ((pc, tpl, "psd"), (wc, js["template"], "psworker")):
    vols = {v["name"]: v for v in podtpl["spec"]["volumes"]}
    mp = [m["mountPath"] for m in c["volumeMounts"] if vols.get(m["name"], {}).get("configMap", {}).get("name") == "ps-entrypoint"]
    check(mp and c.get("command") == ["/bin/sh", mp[0] + "/tfconfig.sh"],
          what + ": runs ps-entrypoint's tfconfig.sh", what + ": command %r, entrypoint mounted at %r" % (c.get("command"), mp))
    check(any(e.get("configMapRef", {}).get("name") == "ps-cluster" for e in c.get("envFrom", [])),
          what + ": env from ps-cluster", what + ": no envFrom ps-cluster")
NS = "ml"


def run_entry(env_extra, program):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "POD_NAMESPACE": NS}
    env.update(cfg)
    env.update(env_extra)
    return subprocess.run(["sh", script] + program, capture_output=True, text=True, env=env, timeout=60)


def expect_cluster(n_ps, n_w):
    return {"ps": ["%s-%d.%s.%s.svc:%s" % (cfg["PS_NAME"], i, cfg["PS_NAME"], NS, cfg["PS_PORT"]) for i in range(n_ps)],
            "worker": ["%s-%d.%s.%s.svc:%s" % (cfg["WORKER_NAME"], i, cfg["WORKER_NAME"], NS, cfg["WORKER_PORT"]) for i in range(n_w)]}


printer = ["sh", "-c", 'printf "%s" "$TF_CONFIG"']
n_ps, n_w = int(cfg["PS_REPLICAS"]), int(cfg["WORKER_REPLICAS"])
tasks = [("ps", i, {"TASK_TYPE": "ps", "POD_NAME": "%s-%d" % (sts["metadata"]["name"], i)}, "psd", psd_args) for i in range(n_ps)]
tasks += [("worker", i, {"TASK_TYPE": "worker", "JOB_COMPLETION_INDEX": str(i)}, "psworker", w_args) for i in range(n_w)]
for ttype, i, extra, prog, args in tasks:
    r = run_entry(extra, printer)
    try:
        tf = json.loads(r.stdout)
    except ValueError:
        bad("tfconfig.sh for %s %d: %r %s" % (ttype, i, r.stdout, r.stderr.strip()))
        continue
    check(tf == {"cluster": expect_cluster(n_ps, n_w), "task": {"type": ttype, "index": i}},
          "tfconfig.sh: TF_CONFIG of %s %d" % (ttype, i), "tfconfig.sh for %s %d wrote %s" % (ttype, i, r.stdout))
    if progs[prog]:
        r = run_entry(extra, [progs[prog]] + args[1:] + ["--help"])
        check(r.returncode == 0, "%s takes that TF_CONFIG and the manifest's flags" % prog,
              "%s %d: %s exit %d: %s" % (ttype, i, prog, r.returncode, r.stderr.strip()[-300:]))
    else:
        bad("$%s not set: %s not run" % (prog.upper(), prog))
for extra, why in (({"TASK_TYPE": "ps", "POD_NAME": "psd-%d" % n_ps}, "an ordinal past PS_REPLICAS"),
                   ({"TASK_TYPE": "ps", "POD_NAME": "psd"}, "a pod name without an ordinal"),
                   ({"TASK_TYPE": "worker"}, "no JOB_COMPLETION_INDEX"),
                   ({"TASK_TYPE": "chief", "JOB_COMPLETION_INDEX": "0"}, "an unknown task type"),
                   ({"TASK_TYPE": "worker", "JOB_COMPLETION_INDEX": "0", "PS_NAME": "a\"b"}, "a name that would break the JSON")):
    r = run_entry(extra, printer)
    check(r.returncode == 2 and not r.stdout and "tfconfig.sh:" in r.stderr,
          "tfconfig.sh refuses %s" % why, "tfconfig.sh with %s: exit %d, %r" % (why, r.returncode, r.stdout))

# ---- the TFJob -----------------------------------------------------------------------------
with open(os.path.join(root, "tests", "deploy", "tfjob-v1.schema.json")) as f:
    tfschema = json.load(f)
tfv = jsonschema.Draft202012Validator(tfschema)
for path in sorted(glob.glob(os.path.join(kdir, "kubeflow", "*.yaml"))):
    for d in docs(path):
        name = os.path.basename(path)
        errs = [e.message + " at " + "/".join(map(str, e.path)) for e in tfv.iter_errors(d)]
        check(not errs, name + ": TFJob valid (tfjob-v1.schema.json)", name + ": " + "; ".join(errs))
        broken = copy.deepcopy(d)
        broken["spec"]["tfReplicaSpec"] = broken["spec"].pop("tfReplicaSpecs", {})
        check(any(True for _ in tfv.iter_errors(broken)), "the TFJob schema refuses tfReplicaSpec (a wrong field name)",
              "the TFJob schema accepts tfReplicaSpec")
        specs = d.get("spec", {}).get("tfReplicaSpecs", {})
        check(not d["spec"].get("enableDynamicWorker") and "Master" not in specs,
              name + ": no enableDynamicWorker, no Master", name + ": enableDynamicWorker or Master (not supported)")
        cluster = {}
        for rtype, rs in specs.items():
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": rtype.lower()},
                       "template": rs["template"]}
            err = k8s_error(wrapped)
            check(err is None, name + ": %s pod template valid (Kubernetes %s, strict)" % (rtype, K8S),
                  name + ": %s pod template: %s" % (rtype, err))
            tc = [c for c in rs["template"]["spec"]["containers"] if c["name"] == "tensorflow"]
            check(len(tc) == 1, name + ": %s has the container 'tensorflow' (TF_CONFIG goes there)" % rtype,
                  name + ": %s has no container named tensorflow: the operator's TF_CONFIG would go nowhere" % rtype)
            port = port_number(tc[0], "tfjob-port") if tc else None
            rt = rtype.lower()
            cluster[rt] = ["%s-%s-%d.%s.svc:%d" % (d["metadata"]["name"], rt, i, NS, port or 2222)
                           for i in range(rs.get("replicas", 1))]
        # the operator marshals a Go map (keys sorted) and a struct {cluster, task, environment}
        cluster = dict(sorted(cluster.items()))
        auth, wkeys = set(), set()
        for rtype, rs in specs.items():
            c = ([c for c in rs["template"]["spec"]["containers"] if c["name"] == "tensorflow"] or [None])[0]
            if c is None:
                continue
            cmd = c.get("command", []) + c.get("args", [])
            prog = os.path.basename(cmd[0]) if cmd else ""
            if prog == "psd":
                check_psd_container(c, rs["template"], name + " " + rtype, "tfjob-port")
                auth = check_keys(c, rs["template"], name + " " + rtype, cmd, "psd")
            elif prog == "psworker":
                wkeys.add(check_keys(c, rs["template"], name + " " + rtype, cmd, "worker"))
            else:
                bad(name + ": %s runs %r, not psd or psworker" % (rtype, cmd[:1]))
                continue
            for i in range(rs.get("replicas", 1)):
                tfc = json.dumps({"cluster": cluster, "task": {"type": rtype.lower(), "index": i},
                                  "environment": "cloud"}, separators=(",", ":"))
                if not progs.get(prog):
                    bad("$%s not set: %s not run" % (prog.upper(), prog))
                    break
                r = subprocess.run([progs[prog]] + cmd[1:] + ["--help"], capture_output=True, text=True,
                                   env=dict(os.environ, TF_CONFIG=tfc), timeout=60)
                check(r.returncode == 0, name + ": %s %d takes the operator's TF_CONFIG %s" % (rtype, i, tfc if i == 0 else "(index %d)" % i),
                      name + ": %s %d: %s refuses %s: %s" % (rtype, i, prog, tfc, r.stderr.strip()[-300:]))

        check(wkeys and all(k and k[:-4] + ".pub" in auth for k in wkeys), name + ": psd authorizes the workers' keys",
              name + ": workers' keys %r, psd's --authorized-keys %r" % (wkeys, auth))

subprocess.run(["rm", "-rf", tmp])
print("%d check(s) failed" % len(failed) if failed else "all checks passed")
sys.exit(1 if failed else 0)
