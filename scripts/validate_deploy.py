#!/usr/bin/env python3
"""Validates the files in deploy/ without a cluster.

Checks, each printed as `ok: ...` or `FAIL: ...`:
- schema: every Kubernetes object in deploy/kubernetes against Kubernetes' own OpenAPI schemas
  (kubernetes-validate, strict: unknown fields fail) for the oldest and newest bundled version;
  ServiceMonitor and PrometheusRule against the prometheus-operator CRD schemas (from the
  cloudcoil models, made strict the same way);
- consistency: the objects agree with each other (port, selectors, namespace), every hostPath is
  mounted read-only, the exporter runs non-root on a read-only root file system, the
  kustomization lists every file, and the PrometheusRule carries exactly the plain rule file;
- rules: `promtool check rules` and `promtool test rules` (the unit tests of the alerts), and
  every metric a rule names is one the exporter serves;
- dashboard: every query parses (promql-parser, and promtool through recording rules), names only
  metrics the exporter serves (deploy/exporter-metrics.txt), uses counters only through
  rate()/increase(), and every served metric is shown.

`--live HOST:PORT` (with `--expect-memory-ratios` and `--kube-pod-info`, see below) then runs a real Prometheus (Debian's, on loopback) that scrapes a running
exporter at HOST:PORT every second with the alert rules loaded, and checks that every dashboard
query executes, that the queries on memory, refusals, regions and the build return series for the
live workload, and that every rule evaluates without error. With `--expect-memory-ratios 0.39,0.59`
the "Memory used / limit" panel must give exactly one series per container at those ratios (pods
told apart by pod UID, not by names they may lack), and with `--kube-pod-info FILE` (served as a
kube-state-metrics target) the pods it lists must carry its namespace and pod names.

`--self-test` also breaks copies of the files in known ways and checks that each check notices.
Exit status: 0 when everything passed, 1 otherwise.
"""

import argparse
import copy
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import jsonschema
import kubernetes_validate
import promql_parser as pp
import yaml
from cloudcoil.models.prometheus_operator import v1 as promop

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
RULES = DEPLOY / "prometheus" / "vgpu-alerts.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "vgpu-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "vgpu-dashboard.json"
METRICS = DEPLOY / "exporter-metrics.txt"
EXPORTER_DOCKERFILE = ROOT / "dockerfiles" / "Dockerfile.exporter"
CARGO_TOML = ROOT / "Cargo.toml"

NAMESPACE = "vgpu-system"
PORT = 9431
# The oldest and newest Kubernetes versions whose schemas kubernetes-validate bundles.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
CORE_KINDS = {("v1", "Namespace"), ("apps/v1", "DaemonSet"), ("v1", "Service")}
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): promop.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): promop.PrometheusRule,
}
# Metrics a rule may name besides the exporter's: Prometheus' own scrape health.
PROMETHEUS_OWN = {"up"}
# Metrics the dashboard may name besides the exporter's: kube-state-metrics' pod names, joined
# on the pod UID where it is scraped.
DASHBOARD_EXTERNAL = {"kube_pod_info"}
RATE_FUNCTIONS = {"rate", "irate", "increase"}


def served_metrics():
    """name -> (type, scope) from deploy/exporter-metrics.txt."""
    out = {}
    for line in METRICS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, kind, scope = line.split()
            out[name] = (kind, scope)
    return out


# ---------------------------------------------------------------------------------------------
# Kubernetes objects


def load_manifests():
    """[(file name, object)] of every YAML file in deploy/kubernetes but the kustomization."""
    docs = []
    for path in sorted(KUBE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


def strict_schema(schema):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for v in schema.values():
            strict_schema(v)
    elif isinstance(schema, list):
        for v in schema:
            strict_schema(v)
    return schema


_CRD_VALIDATORS = {}


def describe(e):
    """`path: message` of a jsonschema error, descending into anyOf/oneOf to the likeliest cause."""
    while e.context:
        # The deepest error of the alternatives (Optional fields are `anyOf: [T, null]`: the
        # `null` branch's complaint is the least useful).
        e = max(e.context, key=lambda c: (len(c.absolute_path), c.validator != "type"))
    msg = e.message if len(e.message) <= 200 else e.message[:200] + "..."
    return "/".join(str(p) for p in e.absolute_path) + ": " + msg


def crd_validator(key):
    if key not in _CRD_VALIDATORS:
        schema = strict_schema(CRDS[key].model_json_schema(by_alias=True, mode="validation"))
        _CRD_VALIDATORS[key] = jsonschema.Draft202012Validator(schema)
    return _CRD_VALIDATORS[key]


def check_schemas(docs):
    errors = []
    for name, doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        where = f"{name}: {key[1]} {doc.get('metadata', {}).get('name')}"
        if key in CORE_KINDS:
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    errors.append(f"{where}: Kubernetes {version}: {describe(e)}")
                except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
                    errors.append(f"{where}: Kubernetes {version}: {e.message}")
        elif key in CRDS:
            for e in crd_validator(key).iter_errors(doc):
                errors.append(f"{where}: {describe(e)}")
        else:
            errors.append(f"{where}: no schema for apiVersion {key[0]} kind {key[1]}")
    return errors


def find(docs, kind):
    found = [d for _, d in docs if d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def check_consistency(docs, rules, kustomization):
    errors = []
    for name, doc in docs:
        meta = doc.get("metadata", {})
        if doc.get("kind") == "Namespace":
            if meta.get("name") != NAMESPACE:
                errors.append(f"{name}: the namespace is not {NAMESPACE}")
        elif meta.get("namespace") != NAMESPACE:
            errors.append(f"{name}: {doc.get('kind')} is not in namespace {NAMESPACE}")
    ds, svc, sm, pr = (find(docs, k) for k in ("DaemonSet", "Service", "ServiceMonitor", "PrometheusRule"))
    for kind, obj in (("DaemonSet", ds), ("Service", svc), ("ServiceMonitor", sm), ("PrometheusRule", pr)):
        if obj is None:
            errors.append(f"expected exactly one {kind}")
    if None in (ds, svc, sm, pr):
        return errors

    pod = ds["spec"]["template"]
    spec = pod["spec"]
    if not subset(ds["spec"]["selector"].get("matchLabels"), pod["metadata"].get("labels", {})):
        errors.append("DaemonSet: its selector does not select its own pods")
    containers = spec["containers"]
    if len(containers) != 1:
        errors.append("DaemonSet: expected one container")
        return errors
    c = containers[0]
    argv = c.get("command", []) + c.get("args", [])
    if argv[:2] != ["vgpu", "metrics"]:
        errors.append(f"DaemonSet: the container runs {argv[:2]}, not `vgpu metrics`")
    opts = dict(zip(argv[2::2], argv[3::2]))
    if opts.get("--listen") != f"0.0.0.0:{PORT}":
        errors.append(f"DaemonSet: --listen is {opts.get('--listen')}, not 0.0.0.0:{PORT}")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if ports.get("metrics") != PORT:
        errors.append(f"DaemonSet: container port `metrics` is {ports.get('metrics')}, not {PORT}")

    # The image: the exporter image (dockerfiles/Dockerfile.exporter) at the workspace's
    # version, whose CMD is the DaemonSet's args and whose USER is the pod's.
    version = re.search(r'^version = "([^"]+)"', CARGO_TOML.read_text(), re.M).group(1)
    if c.get("image") != f"vgpu-exporter:{version}":
        errors.append(f"DaemonSet: image {c.get('image')} is not the exporter image vgpu-exporter:{version}")
    df = EXPORTER_DOCKERFILE.read_text()
    cmd = re.search(r"^CMD (.*)$", df, re.M)
    user = re.search(r"^USER (\d+)(?::(\d+))?$", df, re.M)
    entry = re.search(r"^ENTRYPOINT (.*)$", df, re.M)
    if not (cmd and user and entry) or json.loads(cmd.group(1)) != c.get("args", []):
        errors.append("DaemonSet: its args are not Dockerfile.exporter's CMD")
    elif Path(json.loads(entry.group(1))[0]).name != (c.get("command") or [""])[0]:
        errors.append("DaemonSet: its command is not Dockerfile.exporter's ENTRYPOINT")
    elif str(spec.get("securityContext", {}).get("runAsUser")) != user.group(1):
        errors.append("DaemonSet: runAsUser is not Dockerfile.exporter's USER")

    # Security: non-root, read-only root file system, no privilege, hostPaths read-only.
    psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True or not psc.get("runAsUser"):
        errors.append("DaemonSet: the pod does not run as a non-root user")
    if csc.get("readOnlyRootFilesystem") is not True:
        errors.append("DaemonSet: the root file system is not read-only")
    if csc.get("allowPrivilegeEscalation") is not False or csc.get("privileged"):
        errors.append("DaemonSet: the container may escalate privileges")
    if "ALL" not in csc.get("capabilities", {}).get("drop", []) or csc.get("capabilities", {}).get("add"):
        errors.append("DaemonSet: the container keeps capabilities")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        errors.append("DaemonSet: the pod shares a host namespace")
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    for vol, path in host_paths.items():
        m = mounts.get(vol)
        if m is None:
            errors.append(f"DaemonSet: hostPath volume {vol} is not mounted")
        elif m.get("readOnly") is not True:
            errors.append(f"DaemonSet: hostPath {path} is mounted read-write")
    mounted = {m["mountPath"] for n, m in mounts.items() if n in host_paths}
    dirs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--dir", "--region")]
    for d in dirs:
        if not any(d == p or d.startswith(p.rstrip("/") + "/") for p in mounted):
            errors.append(f"DaemonSet: {d} is read but no hostPath is mounted there")
    for want in ("/usr/local/vgpu/containers", "/tmp/vgpu/containers"):
        if want not in dirs:
            errors.append(f"DaemonSet: the exporter does not read {want}")
    if "/tmp/vgpulock" not in host_paths.values():
        errors.append("DaemonSet: the node directory /tmp/vgpulock is not mounted")

    # Service -> pods, ServiceMonitor -> Service.
    if not subset(svc["spec"].get("selector"), pod["metadata"].get("labels", {})):
        errors.append("Service: its selector does not select the exporter pods")
    sports = {p.get("name"): p for p in svc["spec"].get("ports", [])}
    sp = sports.get("metrics")
    if sp is None or sp.get("port") != PORT or sp.get("targetPort") not in ("metrics", PORT):
        errors.append(f"Service: no port `metrics` {PORT} -> the container's `metrics`")
    if not subset(sm["spec"]["selector"].get("matchLabels"), svc["metadata"].get("labels", {})):
        errors.append("ServiceMonitor: its selector does not select the Service")
    if NAMESPACE not in sm["spec"].get("namespaceSelector", {}).get("matchNames", []):
        errors.append(f"ServiceMonitor: does not look in namespace {NAMESPACE}")
    for ep in sm["spec"].get("endpoints", []):
        if ep.get("port") not in sports:
            errors.append(f"ServiceMonitor: endpoint port {ep.get('port')} is not a Service port")
    # The exporter-down alert matches job="<Service name>" (the Operator's default job label).
    if svc["metadata"]["name"] != "vgpu-exporter" or sm["spec"].get("jobLabel"):
        errors.append("ServiceMonitor: the job label would not be vgpu-exporter")

    if pr["spec"] != rules:
        errors.append("PrometheusRule: its spec differs from deploy/prometheus/vgpu-alerts.rules.yml")

    files = sorted(p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")
    if sorted(kustomization.get("resources", [])) != files:
        errors.append(f"kustomization.yaml: resources {kustomization.get('resources')} != files {files}")
    return errors


# ---------------------------------------------------------------------------------------------
# PromQL


GRAFANA_INTERVALS = re.compile(r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}")
GRAFANA_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?")


def grafana_to_promql(expr):
    """A dashboard query with Grafana's variables replaced by values Prometheus can parse."""
    expr = GRAFANA_INTERVALS.sub("5m", expr)
    return GRAFANA_VARIABLE.sub(".*", expr)


def metric_uses(expr):
    """(every metric name the expression selects, names selected outside rate()/increase(),
    selectors without a metric name)."""
    ast = pp.parse(expr)
    names, rated, nameless = [], [], []

    def name_of(sel):
        if sel.name:
            return sel.name
        for m in sel.matchers.matchers:
            if m.name == "__name__" and str(m.op) == "MatchOp.Equal":
                return m.value
        return None

    def visit(node):
        if isinstance(node, pp.VectorSelector):
            n = name_of(node)
            if n is None:
                nameless.append(str(node))
            else:
                names.append(n)
        return True

    def visit_rated(node):
        if isinstance(node, pp.Call) and node.func.name in RATE_FUNCTIONS:
            for arg in node.args:
                pp.walk(arg, lambda n: rated.append(name_of(n)) if isinstance(n, pp.VectorSelector) else True)
        return True

    pp.walk(ast, visit)
    pp.walk(ast, visit_rated)
    unrated = list(names)
    for n in rated:
        if n in unrated:
            unrated.remove(n)
    return names, unrated, nameless


def check_expr(where, expr, served, allowed_extra=()):
    errors = []
    try:
        names, unrated, nameless = metric_uses(expr)
    except Exception as e:  # promql-parser raises ValueError-like errors with the position
        return [f"{where}: does not parse: {e}"], []
    for n in names:
        if n not in served and n not in allowed_extra:
            errors.append(f"{where}: names {n}, which the exporter does not serve")
    for n in unrated:
        if served.get(n, ("",))[0] == "counter":
            errors.append(f"{where}: counter {n} used without rate()/increase()")
    for s in nameless:
        errors.append(f"{where}: selector {s} names no metric")
    return errors, names


def promtool(*args):
    """(ok, output) of promtool with these arguments."""
    p = subprocess.run(["promtool", *args], capture_output=True, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def check_rules(rules, served, run_promtool=True):
    errors = []
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            where = f"rule {r.get('alert') or r.get('record')}"
            errors += check_expr(where, r["expr"], served, PROMETHEUS_OWN)[0]
    if run_promtool:
        ok, out = promtool("check", "rules", str(RULES))
        if not ok:
            errors.append(f"promtool check rules:\n{out}")
        ok, out = promtool("test", "rules", str(RULE_TESTS))
        if not ok:
            errors.append(f"promtool test rules:\n{out}")
    return errors


# ---------------------------------------------------------------------------------------------
# Dashboard


def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def check_dashboard(dash, served, run_promtool=True):
    errors = []
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in dash:
            errors.append(f"dashboard: no {key}")
    ids = [p.get("id") for p in all_panels(dash)]
    if len(ids) != len(set(ids)) or None in ids:
        errors.append(f"dashboard: panel ids are missing or repeated: {ids}")
    seen, exprs = set(), []
    for p in all_panels(dash):
        if p.get("type") == "row":
            continue
        where = f"panel {p.get('id')} {p.get('title')!r}"
        for k in ("x", "y", "w", "h"):
            if not isinstance(p.get("gridPos", {}).get(k), int):
                errors.append(f"{where}: gridPos.{k} missing")
        targets = p.get("targets", [])
        if not targets:
            errors.append(f"{where}: no queries")
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)):
            errors.append(f"{where}: repeated refId")
        for t in targets:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                errors.append(f"{where} {t.get('refId')}: not on the dashboard's data source variable")
            expr = t.get("expr", "")
            promql = grafana_to_promql(expr)
            errs, names = check_expr(f"{where} {t.get('refId')}", promql, served, DASHBOARD_EXTERNAL)
            errors += errs
            seen.update(names)
            exprs.append((f"panel_{p.get('id')}_{t.get('refId')}", promql))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
        if not m:
            errors.append(f"variable {v.get('name')}: query {q!r} is not label_values(selector, label)")
            continue
        errs, names = check_expr(f"variable {v.get('name')}", grafana_to_promql(m.group(1)), served,
                                 DASHBOARD_EXTERNAL)
        errors += errs
        seen.update(names)
    for name in served:
        if name not in seen:
            errors.append(f"dashboard: shows no query of {name}")
    if run_promtool and exprs:
        # Prometheus' own parser, through recording rules that carry the queries.
        group = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:{n}", "expr": e} for n, e in exprs]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            yaml.safe_dump(group, f)
        try:
            ok, out = promtool("check", "rules", f.name)
        finally:
            Path(f.name).unlink()
        if not ok:
            errors.append(f"promtool check rules (dashboard queries):\n{out}")
    return errors



# ---------------------------------------------------------------------------------------------
# A live Prometheus scraping a running exporter


# Metrics that a container with a memory limit, holding memory, has whether or not its compute is
# measured: a dashboard query naming only these must return series.
ALWAYS_PRESENT = {
    "vgpu_memory_limit_bytes", "vgpu_memory_used_bytes", "vgpu_memory_peak_bytes",
    "vgpu_alloc_denied_total", "vgpu_region_last_update_timestamp_seconds", "vgpu_region_stale",
    "vgpu_process_memory_used_bytes", "vgpu_process_memory_peak_bytes",
    "vgpu_process_alloc_denied_total", "vgpu_build_info",
}
LIVE_DEADLINE_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def serve_file(text):
    """An HTTP server on loopback answering /metrics with `text` (a stand-in for
    kube-state-metrics); returns (server, "127.0.0.1:PORT")."""
    import http.server
    import threading

    body = text.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def panel_by_title(dash, title):
    return next((p for p in all_panels(dash) if p.get("title") == title), None)


def check_memory_ratios(base, dash, expected, kube):
    """The "Memory used / limit" panel's query gives one series per container at the expected
    ratios (two pods with the same container name stay two series), and the pods that
    kube-state-metrics knows carry its names."""
    p = panel_by_title(dash, "Memory used / limit")
    if p is None:
        return ["no panel 'Memory used / limit'"]
    expr = GRAFANA_VARIABLE.sub(".*", GRAFANA_INTERVALS.sub("10s", p["targets"][0]["expr"]))
    res = api(base, "/api/v1/query", query=expr)["data"]["result"]
    got = sorted(round(float(r["value"][1]), 2) for r in res)
    errors = []
    if got != sorted(expected):
        errors.append(f"Memory used / limit: {got}, expected one series each at {sorted(expected)}: "
                      + json.dumps([r["metric"] for r in res]))
    for uid, (namespace, pod) in kube.items():
        if not any(r["metric"].get("pod_uid") == uid and r["metric"].get("pod") == pod
                   and r["metric"].get("namespace") == namespace for r in res):
            errors.append(f"Memory used / limit: pod UID {uid} does not carry kube_pod_info's "
                          f"{namespace}/{pod}: " + json.dumps([r["metric"] for r in res]))
    return errors


KUBE_POD_INFO = re.compile(r'kube_pod_info\{([^}]*)\}')


def kube_pods(text):
    """uid -> (namespace, pod) of the kube_pod_info samples in `text`."""
    out = {}
    for m in KUBE_POD_INFO.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[labels["uid"]] = (labels["namespace"], labels["pod"])
    return out


def check_live(exporter, dash, served, expect_ratios=None, kube_file=None):
    host, _, port = exporter.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        return [f"--live {exporter}: only a loopback exporter is scraped"]
    errors = []
    kube_text = Path(kube_file).read_text() if kube_file else None
    with tempfile.TemporaryDirectory(prefix="vgpu-prom-") as tmp:
        tmp = Path(tmp)
        shutil.copy(RULES, tmp / RULES.name)
        jobs = [{"job_name": "vgpu-exporter", "honor_labels": True,
                 "static_configs": [{"targets": [exporter]}]}]
        ksm = None
        if kube_text is not None:
            ksm, ksm_addr = serve_file(kube_text)
            jobs.append({"job_name": "kube-state-metrics", "honor_labels": True,
                         "static_configs": [{"targets": [ksm_addr]}]})
        (tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES.name],
            "scrape_configs": jobs,
        }))
        web = f"127.0.0.1:{free_port()}"
        base = f"http://{web}"
        log = open(tmp / "prometheus.log", "w")
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={web}", "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + LIVE_DEADLINE_S
            samples = 0
            # Up, and at least 5 samples scraped (rate() over 10s needs two).
            while time.monotonic() < deadline and samples < 5:
                time.sleep(1)
                try:
                    r = api(base, "/api/v1/query", query='count_over_time(up{job="vgpu-exporter"}[1m])')
                    res = r["data"]["result"]
                    up = api(base, "/api/v1/query", query='up{job="vgpu-exporter"}')["data"]["result"]
                    if up and up[0]["value"][1] == "1":
                        samples = int(float(res[0]["value"][1])) if res else 0
                except OSError:
                    pass
            if samples < 5:
                log.flush()
                return [f"Prometheus did not scrape {exporter} 5 times in {LIVE_DEADLINE_S} s:\n"
                        + (tmp / "prometheus.log").read_text()[-3000:]]
            for p in all_panels(dash):
                for t in p.get("targets", []):
                    where = f"panel {p.get('id')} {p.get('title')!r} {t.get('refId')}"
                    expr = GRAFANA_VARIABLE.sub(".*", GRAFANA_INTERVALS.sub("10s", t["expr"]))
                    r = api(base, "/api/v1/query", query=expr)
                    if r.get("status") != "success":
                        errors.append(f"{where}: {r.get('error')}")
                        continue
                    names = set(metric_uses(expr)[0]) - DASHBOARD_EXTERNAL
                    if names and names <= ALWAYS_PRESENT and not r["data"]["result"]:
                        errors.append(f"{where}: no series for the live workload: {expr}")
            for g in api(base, "/api/v1/rules")["data"]["groups"]:
                for rule in g["rules"]:
                    if rule.get("health") != "ok":
                        errors.append(f"rule {rule.get('name')}: {rule.get('health')} {rule.get('lastError')}")
            if expect_ratios is not None:
                errors += check_memory_ratios(base, dash, expect_ratios, kube_pods(kube_text or ""))
        finally:
            if ksm is not None:
                ksm.shutdown()
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            log.close()
    return errors

# ---------------------------------------------------------------------------------------------
# Self-test: each check must notice a known defect.


def self_test(docs, rules, kustomization, dash, served):
    failures, passes = [], []

    def expect(what, errors):
        if errors:
            passes.append(what)
            print(f"ok: self-test: {what} is caught ({errors[0].splitlines()[0]})")
        else:
            failures.append(f"self-test: {what} was NOT caught")
            print(f"FAIL: self-test: {what} was NOT caught")

    def mutate(kind, fn):
        d2 = copy.deepcopy(docs)
        for _, doc in d2:
            if doc.get("kind") == kind:
                fn(doc)
        return d2

    def ds_container(doc):
        return doc["spec"]["template"]["spec"]["containers"][0]

    expect("an unknown field in the DaemonSet",
           check_schemas(mutate("DaemonSet", lambda d: ds_container(d).update(volumeMount=[]))))
    expect("a wrong type in the Service",
           check_schemas(mutate("Service", lambda d: d["spec"]["ports"][0].update(port="9431"))))
    expect("an unknown field in the ServiceMonitor",
           check_schemas(mutate("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(intervall="15s"))))
    expect("a malformed duration in the ServiceMonitor",
           check_schemas(mutate("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="15 sec"))))
    expect("an unknown field in the PrometheusRule",
           check_schemas(mutate("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(fore="5m"))))
    expect("a read-write hostPath mount",
           check_consistency(mutate("DaemonSet", lambda d: ds_container(d)["volumeMounts"][0].update(readOnly=False)), rules, kustomization))
    expect("the carrier image in the DaemonSet",
           check_consistency(mutate("DaemonSet", lambda d: ds_container(d).update(image="vgpu:0.1.0")), rules, kustomization))
    expect("a root exporter",
           check_consistency(mutate("DaemonSet", lambda d: d["spec"]["template"]["spec"]["securityContext"].update(runAsNonRoot=False)), rules, kustomization))
    expect("a Service on dcgm-exporter's port 9400",
           check_consistency(mutate("Service", lambda d: d["spec"]["ports"][0].update(port=9400)), rules, kustomization))
    expect("a ServiceMonitor that selects nothing",
           check_consistency(mutate("ServiceMonitor", lambda d: d["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "other"})), rules, kustomization))
    rules2 = copy.deepcopy(rules)
    rules2["groups"][0]["rules"][0]["for"] = "1m"
    expect("a PrometheusRule that differs from the rule file", check_consistency(docs, rules2, kustomization))
    expect("a kustomization that misses a file",
           check_consistency(docs, rules, {"resources": kustomization["resources"][:-1]}))
    rules3 = copy.deepcopy(rules)
    rules3["groups"][0]["rules"][0]["expr"] = "vgpu_memory_bytes > 0"
    expect("a rule on a metric the exporter does not serve", check_rules(rules3, served, run_promtool=False))

    def dash_with(fn):
        d2 = copy.deepcopy(dash)
        fn(d2)
        return check_dashboard(d2, served, run_promtool=False)

    def first_target(d):
        return next(p for p in all_panels(d) if p.get("targets"))["targets"][0]

    expect("a dashboard query on an unknown metric",
           dash_with(lambda d: first_target(d).update(expr='sum(vgpu_memory_used{namespace=~"$namespace"})')))
    expect("a dashboard query on a counter without rate()",
           dash_with(lambda d: first_target(d).update(expr="sum(vgpu_alloc_denied_total)")))
    expect("a dashboard query that does not parse",
           dash_with(lambda d: first_target(d).update(expr="sum(vgpu_memory_used_bytes")))
    expect("a dashboard that leaves the per-process metrics out",
           dash_with(lambda d: d.update(panels=[p for p in d["panels"] if p.get("title") != "Processes"])))
    return len(passes), len(failures)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self-test", action="store_true", help="also check that each check catches a known defect")
    ap.add_argument("--live", metavar="HOST:PORT", help="also scrape a running exporter with a real Prometheus")
    ap.add_argument("--expect-memory-ratios", metavar="R,R,...",
                    help="with --live: the 'Memory used / limit' panel must give one series at each ratio (2 decimals)")
    ap.add_argument("--kube-pod-info", metavar="FILE",
                    help="with --live: serve FILE (kube_pod_info samples) as a kube-state-metrics target")
    args = ap.parse_args()
    if shutil.which("promtool") is None:
        print("FAIL: promtool is not on PATH (Debian package `prometheus`)")
        return 1

    served = served_metrics()
    docs = load_manifests()
    rules = yaml.safe_load(RULES.read_text())
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    dash = json.loads(DASHBOARD.read_text())

    checks = [
        (f"schemas of {len(docs)} objects in deploy/kubernetes (Kubernetes {' and '.join(KUBE_VERSIONS)}, prometheus-operator CRDs)",
         lambda: check_schemas(docs)),
        ("the objects agree with each other; hostPaths read-only; non-root, read-only root fs",
         lambda: check_consistency(docs, rules, kustomization)),
        ("alert rules: promtool check rules, promtool test rules, served metrics only",
         lambda: check_rules(rules, served)),
        (f"dashboard: queries parse, name only the {len(served)} served metrics, and show all of them",
         lambda: check_dashboard(dash, served)),
    ]
    if args.live:
        ratios = [float(r) for r in args.expect_memory_ratios.split(",")] if args.expect_memory_ratios else None
        checks.append((f"live: Prometheus scraping {args.live} runs every dashboard query and rule"
                       + (f"; one series per pod at memory ratios {ratios}" if ratios else ""),
                       lambda: check_live(args.live, dash, served, ratios, args.kube_pod_info)))
    passed = failed = 0
    for what, run in checks:
        errors = run()
        if errors:
            failed += 1
            print(f"FAIL: {what}")
            for e in errors:
                print("    " + e.replace("\n", "\n    "))
        else:
            passed += 1
            print(f"ok: {what}")
    if args.self_test:
        ok, bad = self_test(docs, rules, kustomization, dash, served)
        passed += ok
        failed += bad
    print(f"validate-deploy: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
