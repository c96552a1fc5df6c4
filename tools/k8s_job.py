"""Checks that a rendered deploy/kubernetes job (tools/k8s_render.py) can form: every role gets
the variables bpslaunch needs, the counts agree, the scheduler's address is its Service.

    from k8s_job import role_problems
    role_problems(objects)   # [] or one line per problem

Also what the tests use to run the pods' environments as processes: :func:`pod_env` gives the
environment Kubernetes would give a workload's container (envFrom, env, Secrets decoded, the
downward API's pod IP and completion index), resolved against the rendered objects.
"""

from __future__ import annotations

import base64


class JobError(ValueError):
    """A rendering this check cannot follow (a dangling reference, an object missing)."""


NEEDED = {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
          "BYTEPS_JOB_SECRET"}
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def one(objects: list[dict], kind: str, component: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (component is None or o["spec"].get("template", {}).get(
        "metadata", {}).get("labels", {}).get("app.kubernetes.io/component") == component)]
    if len(found) != 1:
        raise JobError(f"expected one {kind} labelled app.kubernetes.io/component={component}, found "
                       f"{[o['metadata']['name'] for o in found]}")
    return found[0]


def container(workload: dict) -> dict:
    containers = workload["spec"]["template"]["spec"]["containers"]
    if len(containers) != 1:
        raise JobError(f"{workload['kind']}/{workload['metadata']['name']}: {len(containers)} containers, not one")
    return containers[0]


def pod_env(objects: list[dict], workload: dict, pod_ip: str, index: int | None = None) -> dict[str, str]:
    """The environment Kubernetes gives the workload's container: envFrom, then env, every
    reference resolved against the rendered objects (a dangling one fails)."""
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    where = f"{workload['kind']}/{workload['metadata']['name']}"

    def data(kind: str, name: str) -> dict[str, str]:
        if (kind, name) not in named:
            raise JobError(f"{where} refers to {kind} {name!r}, which the rendering lacks")
        values = named[(kind, name)].get("data", {})
        return {k: base64.b64decode(v).decode() for k, v in values.items()} if kind == "Secret" else values

    env: dict[str, str] = {}
    c = container(workload)
    for source in c.get("envFrom", []):
        env.update(data("ConfigMap", source["configMapRef"]["name"]) if "configMapRef" in source
                   else data("Secret", source["secretRef"]["name"]))
    for var in c.get("env", []):
        ref = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in ref or "configMapKeyRef" in ref:
            kind = "Secret" if "secretKeyRef" in ref else "ConfigMap"
            key_ref = ref["secretKeyRef" if kind == "Secret" else "configMapKeyRef"]
            values = data(kind, key_ref["name"])
            if key_ref["key"] not in values:
                raise JobError(f"{where}: {var['name']}: {kind} {key_ref['name']} has no key {key_ref['key']}")
            env[var["name"]] = values[key_ref["key"]]
        elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[var["name"]] = pod_ip
        elif ref.get("fieldRef", {}).get("fieldPath") == INDEX:
            if workload["kind"] != "Job" or workload["spec"].get("completionMode") != "Indexed":
                raise JobError(f"{where}: {var['name']} reads the completion index, which only an Indexed Job's "
                               "pods have")
            env[var["name"]] = str(index)
        else:
            raise JobError(f"{where}: {var['name']}: a source this check does not resolve: {var}")
    return env


def port_number(c: dict, port) -> int:
    """A probe's or Service's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
    if not numbers:
        raise JobError(f"container {c['name']} has no port named {port!r}")
    return numbers[0]


def role_problems(objects: list[dict]) -> list[str]:
    """What stops the rendered job from forming, each named; empty when nothing does."""
    try:
        return _problems(objects)
    except JobError as err:
        return [str(err)]


def _problems(objects: list[dict]) -> list[str]:
    problems = []
    sched, servers, workers = (one(objects, "Deployment", "scheduler"), one(objects, "StatefulSet", "server"),
                               one(objects, "Job", "worker"))
    envs = {"scheduler": pod_env(objects, sched, "10.0.0.1"), "server": pod_env(objects, servers, "10.0.0.2"),
            "worker": pod_env(objects, workers, "10.0.0.3", index=0)}
    for role, env in envs.items():
        problems += [f"{role}: {name} is not set" for name in sorted(NEEDED - set(env))]
        if env.get("DMLC_ROLE") != role:
            problems.append(f"{role}: DMLC_ROLE={env.get('DMLC_ROLE')!r}")
    worker_id = next((v for v in container(workers).get("env", []) if v["name"] == "DMLC_WORKER_ID"), {})
    if worker_id.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != INDEX:
        problems.append(f"worker: DMLC_WORKER_ID does not come from the completion index: {worker_id}")
    if any(v["name"] == "BYTEPS_JOB_SECRET" and "secretKeyRef" not in v.get("valueFrom", {})
           for w in (sched, servers, workers) for v in container(w).get("env", [])):
        problems.append("BYTEPS_JOB_SECRET is not read from the Secret (secretKeyRef) in every role")
    if len({e.get("BYTEPS_JOB_SECRET") for e in envs.values()}) != 1:
        problems.append("the roles do not share one BYTEPS_JOB_SECRET")
    config = envs["worker"]
    n, k = config.get("DMLC_NUM_WORKER"), config.get("DMLC_NUM_SERVER")
    spec = workers["spec"]
    if spec.get("completionMode") != "Indexed" or n != str(spec.get("completions")) or \
            n != str(spec.get("parallelism")):
        problems.append(f"workers: completionMode {spec.get('completionMode')}, completions {spec.get('completions')}, "
                        f"parallelism {spec.get('parallelism')}; DMLC_NUM_WORKER={n}")
    if str(servers["spec"].get("replicas")) != k:
        problems.append(f"servers: replicas {servers['spec'].get('replicas')}; DMLC_NUM_SERVER={k}")
    if servers["spec"].get("podManagementPolicy") != "Parallel":
        problems.append("servers: podManagementPolicy is not Parallel")
    if not container(workers).get("resources", {}).get("limits", {}).get("nvidia.com/gpu"):
        problems.append("workers: no nvidia.com/gpu limit")
    # DMLC_PS_ROOT_URI is the headless Service that selects the scheduler, on its port.
    uri, port = config.get("DMLC_PS_ROOT_URI", ""), int(config.get("DMLC_PS_ROOT_PORT", 0))
    namespace = sched["metadata"].get("namespace")
    services = [s for s in objects if s["kind"] == "Service" and uri in (  # the DNS names a pod can use
        name := s["metadata"]["name"], f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")]
    if len(services) != 1:
        return problems + [f"DMLC_PS_ROOT_URI={uri!r} is the DNS name of no Service of the rendering"]
    svc = services[0]["spec"]
    labels = sched["spec"]["template"]["metadata"]["labels"]
    if svc.get("clusterIP") != "None" or not svc.get("publishNotReadyAddresses"):
        problems.append("the scheduler's Service is not headless with publishNotReadyAddresses")
    if not svc.get("selector") or any(labels.get(key) != value for key, value in svc["selector"].items()):
        problems.append(f"the scheduler's Service selects {svc.get('selector')}, not the scheduler pod {labels}")
    target = svc["ports"][0].get("targetPort", port) if svc.get("ports") else None
    if [p["port"] for p in svc.get("ports", [])] != [port] or port_number(container(sched), target) != port:
        problems.append(f"the scheduler's Service ports {svc['ports']} are not DMLC_PS_ROOT_PORT={port}")
    probe = container(sched).get("startupProbe", {}).get("tcpSocket", {})
    if port_number(container(sched), probe.get("port", 0)) != port:
        problems.append(f"the scheduler's startup probe {probe} does not connect to DMLC_PS_ROOT_PORT={port}")
    for whose, workload in (("the scheduler's", sched), ("the servers'", servers)):
        probe = container(workload).get("readinessProbe", {}).get("httpGet", {})
        if probe.get("path") != "/metrics" or str(port_number(container(workload), probe.get("port", 0))) != \
                config.get("BYTEPS_METRICS_PORT"):
            problems.append(f"{whose} readiness probe {probe} is not /metrics on BYTEPS_METRICS_PORT")
    return problems
