#!/usr/bin/env bash
# Checks the Helm chart (helm/sluice) without a cluster (none can run here):
#   - helm lint --strict, with the default values and with every optional part on;
#   - helm template of both, validated against the Kubernetes 1.32 schemas (kubernetes-validate --strict;
#     the prometheus-operator kinds, which have no schema there, are checked for their apiVersion/kind only);
#   - the alert rules: promtool check rules and promtool test rules (files/alerts.test.yaml);
#   - the dashboard: valid JSON whose every panel has a PromQL target (tests/it/run/metrics.rs sends each
#     of them to a real Prometheus scraping sluice run).
# Installs what it needs: helm (integration/lib/helm.sh), kubernetes-validate (pip), prometheus (apt).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
chart="$repo/helm/sluice"
export SLUICE_WORK="${SLUICE_WORK:-$repo/.work}"
out="$SLUICE_WORK/helm-check"
rm -rf "$out" && mkdir -p "$out"

. "$here/lib/helm.sh"
ensure_helm_installed
. "$here/lib/prometheus.sh"
ensure_prometheus_installed
if ! command -v kubernetes-validate >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kubernetes-validate
fi

all_on=(--set secrets.existingSecret=sluice-secrets --set secrets.kafkaPasswordKey=kafka-password
        --set elasticsearch.enabled=true --set elasticsearch.passwordKey=es-password
        --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true
        --set metrics.dashboard.enabled=true
        --set verify.enabled=true --set verify.pushgateway=http://pushgateway.monitoring.svc:9091
        --set 'verify.args={--target,kafka}'
        --set archive.enabled=true)

echo "helm_check: helm lint" >&2
"$HELM" lint --strict "$chart" >&2
"$HELM" lint --strict "$chart" "${all_on[@]}" >&2

echo "helm_check: the archive in an object store" >&2
"$HELM" template sluice "$chart" "${all_on[@]}" --set archive.objectStore.url=s3://bucket/shop \
    --set archive.objectStore.credentialsKey=s3-credentials >"$out/store.yaml"
python3 - "$out/store.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
env = lambda d: {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
a, r = env(deps["sluice-archive"]), env(deps["sluice"])
assert a["SLUICE_ARCHIVE__TO"] == "s3://bucket/shop" and a["SLUICE_ARCHIVE__SPOOL"] == "/var/lib/sluice/archive", a
assert a["SLUICE_ARCHIVE__CREDENTIALS_FILE"] == "/var/run/secrets/sluice/s3-credentials", a
items = {v["name"]: v for v in deps["sluice-archive"]["spec"]["template"]["spec"]["volumes"]}["secrets"]["secret"]["items"]
assert [i["key"] for i in items] == ["mysql-password", "s3-credentials"], items
assert r["SLUICE_SOURCE__ARCHIVE"] == "s3://bucket/shop", r
assert r["SLUICE_SOURCE__ARCHIVE_CREDENTIALS_FILE"] == "/var/run/secrets/sluice/s3-credentials", r
PY

echo "helm_check: helm template + kubernetes-validate" >&2
"$HELM" template sluice "$chart" >"$out/default.yaml"
"$HELM" template sluice "$chart" "${all_on[@]}" >"$out/all.yaml"
python3 - "$out" <<'PY'
import sys, yaml, pathlib
out = pathlib.Path(sys.argv[1])
operator = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
for name in ("default", "all"):
    docs = [d for d in yaml.safe_load_all((out / f"{name}.yaml").read_text()) if d]
    core = [d for d in docs if (d["apiVersion"], d["kind"]) not in operator]
    kinds = sorted(d["kind"] for d in docs)
    print(f"{name}: {kinds}", file=sys.stderr)
    (out / f"{name}.core.yaml").write_text(yaml.safe_dump_all(core))
    if name == "default":
        assert kinds == ["ConfigMap", "Deployment", "Service"], kinds
    else:
        assert kinds == ["ConfigMap", "ConfigMap", "CronJob", "Deployment", "Deployment", "Deployment",
                         "PersistentVolumeClaim", "PrometheusRule", "Service", "Service", "Service", "ServiceMonitor",
                         "ServiceMonitor", "ServiceMonitor"], kinds
        # the archiver: its own pods and volume (kept when the release goes), the MySQL password only
        archive = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "sluice-archive")
        pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
        assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", pvc
        aspec = archive["spec"]["template"]["spec"]
        ac = aspec["containers"][0]
        assert ac["args"] == ["archive", "--config", "/etc/sluice/sluice.toml"], ac["args"]
        aenv = {e["name"]: e.get("value") for e in ac["env"]}
        assert aenv["SLUICE_ARCHIVE__TO"] == "/var/lib/sluice/archive" and aenv["SLUICE_ARCHIVE__SERVER_ID"] == "51003", aenv
        assert aenv["SLUICE_SOURCE__PASSWORD_FILE"] == "/var/run/secrets/sluice/mysql-password", aenv
        avols = {v["name"]: v for v in aspec["volumes"]}
        assert avols["archive"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"], avols
        assert [i["key"] for i in avols["secrets"]["secret"]["items"]] == ["mysql-password"], avols
        assert archive["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "sluice-archive"
        assert "SLUICE_SOURCE__ARCHIVE" not in {e["name"] for d in docs if d["kind"] == "Deployment"
                                                for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        # the verify CronJob: pushes to the Pushgateway, never retried (exit 1 is an answer), one at a time,
        # reads the tables (the MySQL password) and the indices (their password)
        cron = next(d for d in docs if d["kind"] == "CronJob")
        assert cron["spec"]["concurrencyPolicy"] == "Forbid", cron
        job = cron["spec"]["jobTemplate"]["spec"]
        assert job["backoffLimit"] == 0, job
        vc = job["template"]["spec"]["containers"][0]
        assert vc["args"] == ["verify", "--config", "/etc/sluice/sluice.toml", "--pushgateway",
                              "http://pushgateway.monitoring.svc:9091", "--target", "kafka"], vc["args"]
        venv = {e["name"]: e.get("value") for e in vc["env"]}
        assert venv["SLUICE_SOURCE__PASSWORD_FILE"] == "/var/run/secrets/sluice/mysql-password", venv
        assert venv["SLUICE_ELASTICSEARCH__PASSWORD_FILE"] == "/var/run/secrets/sluice/es-password", venv
        rule = next(d for d in docs if d["kind"] == "PrometheusRule")
        assert [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]], rule
        deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
        sink = deps.pop("sluice-es-sink")
        deps.pop("sluice-archive")
        dep = next(iter(deps.values()))
        # the sink's pods: a selector of their own, no MySQL password, its own secret keys only
        sel = lambda d: d["spec"]["selector"]["matchLabels"]
        assert sel(sink)["app.kubernetes.io/name"] == "sluice-es-sink" and sel(dep)["app.kubernetes.io/name"] == "sluice"
        c = sink["spec"]["template"]["spec"]["containers"][0]
        assert c["args"] == ["sink", "elasticsearch", "--config", "/etc/sluice/sluice.toml"], c["args"]
        senv = {e["name"]: e.get("value") for e in c["env"]}
        assert "SLUICE_SOURCE__PASSWORD_FILE" not in senv, senv
        assert senv["SLUICE_ELASTICSEARCH__PASSWORD_FILE"] == "/var/run/secrets/sluice/es-password", senv
        vols = {v["name"]: v for v in sink["spec"]["template"]["spec"]["volumes"]}
        keys = [i["key"] for i in vols["secrets"]["secret"]["items"]]
        assert keys == ["kafka-password", "es-password"], keys
        services = [d for d in docs if d["kind"] == "Service"]
        assert sorted(s["spec"]["selector"]["app.kubernetes.io/name"] for s in services) == [
            "sluice", "sluice-archive", "sluice-es-sink"]
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["SLUICE_SOURCE__PASSWORD_FILE"] == "/var/run/secrets/sluice/mysql-password", env
        assert env["SLUICE_KAFKA__SASL_PASSWORD_FILE"] == "/var/run/secrets/sluice/kafka-password", env
        assert env["SLUICE_METRICS__LISTEN"] == "0.0.0.0:9187", env
PY
kubernetes-validate -k 1.32.0 --strict --quiet "$out/default.core.yaml" "$out/all.core.yaml"
# the verify CronJob without a Pushgateway: refused, saying why
if "$HELM" template sluice "$chart" --set verify.enabled=true >"$out/no-push.yaml" 2>"$out/no-push.err"; then
    echo "helm_check: verify.enabled without verify.pushgateway rendered" >&2; exit 1
fi
grep -q "verify.enabled needs verify.pushgateway" "$out/no-push.err" || { cat "$out/no-push.err" >&2; exit 1; }

echo "helm_check: alert rules" >&2
(cd "$chart/files" && promtool check rules alerts.yaml >&2 && promtool test rules alerts.test.yaml >&2)

echo "helm_check: dashboard" >&2
python3 - "$chart/files/dashboard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
assert d["panels"] and all(p["targets"] for p in d["panels"]), "every panel has a query"
assert all("sluice_" in e for e in exprs), exprs
print(f"dashboard: {len(d['panels'])} panels, {len(exprs)} queries", file=sys.stderr)
PY
echo "helm_check: ok" >&2
