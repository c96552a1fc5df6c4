"""deploy/kubernetes without a cluster: the base and the example overlay rendered by
tools/k8s_render.py, every object validated offline against the Kubernetes API schema of Debian's
python3-kubernetes (tools/k8s_schema.py, which is shown to fail on broken objects), the example
checked for the variables every role needs and for counts that agree, our rendering compared with
``kubectl kustomize`` when kubectl is on PATH, and the base's pods' environments run as a real job
on loopback addresses (one per pod), with the readiness probes tried against it."""

from __future__ import annotations

import base64
import copy
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import CORE_BINARY, PYTHON, REPO, free_port, job_env, missing_core
from tools.k8s_render import RenderError, render
from tools.k8s_schema import SchemaError, validate

BASE = REPO / "deploy" / "kubernetes" / "base"
EXAMPLE = REPO / "deploy" / "kubernetes" / "examples" / "four-workers"
KINDS = {("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("apps/v1", "Deployment"),
         ("apps/v1", "StatefulSet"), ("batch/v1", "Job")}
NEEDED = {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
          "BYTEPS_JOB_SECRET"}
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def one(objects: list[dict], kind: str, component: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (component is None or o["spec"].get("template", {}).get(
        "metadata", {}).get("labels", {}).get("app.kubernetes.io/component") == component)]
    assert len(found) == 1, f"expected one {kind} {component or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def container(workload: dict) -> dict:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, workload["metadata"]["name"]
    return containers[0]


def pod_env(objects: list[dict], workload: dict, pod_ip: str, index: int | None = None) -> dict[str, str]:
    """The environment Kubernetes gives the workload's container: envFrom, then env, every
    reference resolved against the rendered objects (a dangling one fails)."""
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    where = f"{workload['kind']}/{workload['metadata']['name']}"

    def data(kind: str, name: str) -> dict[str, str]:
        assert (kind, name) in named, f"{where} refers to {kind} {name!r}, which the rendering lacks"
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
            assert key_ref["key"] in values, \
                f"{where}: {var['name']}: {kind} {key_ref['name']} has no key {key_ref['key']}"
            env[var["name"]] = values[key_ref["key"]]
        elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[var["name"]] = pod_ip
        elif ref.get("fieldRef", {}).get("fieldPath") == INDEX:
            assert workload["kind"] == "Job" and workload["spec"].get("completionMode") == "Indexed", \
                f"{where}: {var['name']} reads the completion index, which only an Indexed Job's pods have"
            env[var["name"]] = str(index)
        else:
            raise AssertionError(f"{where}: {var['name']}: a source this test does not resolve: {var}")
    return env


def port_number(c: dict, port) -> int:
    """A probe's or Service's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
    assert numbers, f"container {c['name']} has no port named {port!r}"
    return numbers[0]


def role_problems(objects: list[dict]) -> list[str]:
    """What stops the rendered job from forming, each named; empty when nothing does."""
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
    if len({e.get(k) for e in envs.values() for k in ("BYTEPS_JOB_SECRET",)}) != 1:
        problems.append("the roles do not share one BYTEPS_JOB_SECRET")
    config = envs["worker"]
    n, k = config.get("DMLC_NUM_WORKER"), config.get("DMLC_NUM_SERVER")
    spec = workers["spec"]
    if spec.get("completionMode") != "Indexed" or str(spec.get("completions")) != n or str(spec.get("parallelism")) != n:
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
    if [p["port"] for p in svc["ports"]] != [port] or port_number(container(sched), svc["ports"][0]["targetPort"]) != port:
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


@pytest.mark.parametrize("folder", [BASE, EXAMPLE], ids=["base", "example"])
def test_renders_and_every_object_passes_the_api_schema(folder: Path) -> None:
    objects = render(str(folder))
    assert {(o["apiVersion"], o["kind"]) for o in objects} == KINDS
    assert len(objects) == 7  # and two Services: the scheduler's, the servers' governing one
    for obj in objects:
        validate(obj)


def test_the_validator_names_what_is_wrong() -> None:
    objects = render(str(EXAMPLE))
    servers = one(objects, "StatefulSet", "server")
    cases = [  # (change, the message's start)
        (lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagePullPolcy="Always"),
         "StatefulSet/byteps-server: spec.template.spec.containers[0].imagePullPolcy: unknown field (V1Container"),
        (lambda o: o["spec"].update(replicas="4"),
         "StatefulSet/byteps-server: spec.replicas: expected int, got str '4'"),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"][0].update(value=4),
         "StatefulSet/byteps-server: spec.template.spec.containers[0].env[0].value: expected str, got int 4"),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("name"),
         "StatefulSet/byteps-server: spec.template.spec.containers[0].name: required field missing (V1Container)"),
        (lambda o: o["spec"].pop("selector"),
         "StatefulSet/byteps-server: spec.selector: required field missing (V1StatefulSetSpec)"),
        (lambda o: o["spec"]["template"]["spec"].update(containers={"name": "server"}),
         "StatefulSet/byteps-server: spec.template.spec.containers: expected list[V1Container], got dict"),
        (lambda o: o.update(apiVersion="v1"),
         "StatefulSet/byteps-server: apiVersion 'v1' serves no kind 'StatefulSet'"),
    ]
    for change, message in cases:
        broken = copy.deepcopy(servers)
        change(broken)
        with pytest.raises(SchemaError) as err:
            validate(broken)
        assert str(err.value).startswith(message), (message, str(err.value))
    quantities = copy.deepcopy(servers)  # numbers are quantities too, as the API server reads them
    quantities["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 16
    validate(quantities)


def test_the_example_gives_every_role_what_it_needs() -> None:
    objects = render(str(EXAMPLE))
    assert role_problems(objects) == []
    env = pod_env(objects, one(objects, "Job", "worker"), "10.0.0.3", index=3)
    assert (env["DMLC_NUM_WORKER"], env["DMLC_NUM_SERVER"], env["DMLC_WORKER_ID"]) == ("4", "4", "3")
    assert env["BYTEPS_JOB_SECRET"] != pod_env(render(str(BASE)), one(render(str(BASE)), "Job", "worker"), "x",
                                               index=0)["BYTEPS_JOB_SECRET"], "the example keeps the placeholder"
    workers = one(objects, "Job", "worker")
    assert container(workers)["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {container(w)["image"] for w in objects if w["kind"] in ("Deployment", "StatefulSet", "Job")} == \
        {"registry.example.com/ml/byteps:0.1"}
    # The checks catch what an overlay gets wrong: counts that differ, a secret typed in.
    broken = copy.deepcopy(objects)
    one(broken, "Job", "worker")["spec"]["completions"] = 3
    one(broken, "StatefulSet", "server")["spec"]["replicas"] = 2
    container(one(broken, "Deployment", "scheduler"))["env"][1] = {"name": "BYTEPS_JOB_SECRET", "value": "typed"}
    assert role_problems(broken) == [
        "BYTEPS_JOB_SECRET is not read from the Secret (secretKeyRef) in every role",
        "the roles do not share one BYTEPS_JOB_SECRET",
        "workers: completionMode Indexed, completions 3, parallelism 4; DMLC_NUM_WORKER=4",
        "servers: replicas 2; DMLC_NUM_SERVER=4"]
    next(o for o in broken if o["kind"] == "ConfigMap")["data"]["DMLC_PS_ROOT_URI"] = "byteps-sched"
    assert role_problems(broken)[-1] == "DMLC_PS_ROOT_URI='byteps-sched' is the DNS name of no Service of the rendering"


def test_the_renderer_refuses_what_it_does_not_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{BASE}]\nnamePrefix: a-\n")
    with pytest.raises(RenderError, match=r"kustomization.yaml: namePrefix: not in the subset"):
        render(str(tmp_path))
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{BASE}]\nreplicas: [{{name: nobody, count: 2}}]\n")
    with pytest.raises(RenderError, match=r"replicas: no Deployment or StatefulSet named 'nobody'"):
        render(str(tmp_path))


def test_the_command_line_checks_an_overlay(tmp_path: Path) -> None:
    tool = [PYTHON, str(REPO / "tools" / "k8s_render.py"), "--check"]
    r = subprocess.run([*tool, str(EXAMPLE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and len(list(yaml.safe_load_all(r.stdout))) == 7, r.stderr
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{os.path.relpath(EXAMPLE, tmp_path)}]\n"
                                                  "patches: [{path: workers.yaml}]\n")
    (tmp_path / "workers.yaml").write_text("{apiVersion: batch/v1, kind: Job, metadata: {name: byteps-worker}, "
                                           "spec: {parallelism: '4'}}\n")
    r = subprocess.run([*tool, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (1, ""), r
    assert r.stderr == f"k8s_render: {tmp_path}: Job/byteps-worker: spec.parallelism: expected int, got str '4'\n"


# An overlay that uses the rest of the subset: an inline patch with a target, a digest, an image
# under a registry with a port, labels without templates, a generator without the hash suffix.
WIDER_OVERLAY = """
resources: [{base}]
images:
  - {{name: byteps, newName: "registry.local:5000/byteps", digest: "sha256:{digest}"}}
labels:
  - pairs: {{team: ml}}
generatorOptions: {{disableNameSuffixHash: true}}
configMapGenerator:
  - {{name: extra, literals: ["A=<1> & 2"]}}
patches:
  - target: {{kind: Deployment, name: byteps-scheduler}}
    patch: |
      apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: any}}
      spec:
        template:
          spec:
            containers:
              - name: scheduler
                env: [{{name: BYTEPS_LOG_LEVEL, value: INFO}}]
                resources: null
"""


@pytest.mark.parametrize("overlay", ["example", "wider"])
def test_the_rendering_equals_kubectl_kustomize(overlay: str, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH (it is no Debian package): the comparison with kustomize needs it")
    folder = EXAMPLE
    if overlay == "wider":
        folder = tmp_path
        overlay_text = WIDER_OVERLAY.format(base=os.path.relpath(BASE, tmp_path), digest="ab" * 32)
        (tmp_path / "kustomization.yaml").write_text(overlay_text)
    r = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    theirs, ours = sorted(yaml.safe_load_all(r.stdout), key=key), sorted(render(str(folder)), key=key)
    assert [key(o) for o in ours] == [key(o) for o in theirs]
    for mine, kustomize in zip(ours, theirs):
        assert mine == kustomize, key(mine)


# --------------------------------------------------------------------------------------------
# The base's pods as processes: each pod's environment as Kubernetes would give it, each pod on a
# loopback address of its own (its status.podIP), the scheduler Service's name standing for the
# scheduler's address, the workers running the base's command (`byteps doctor`) under bpslaunch,
# the image's entrypoint. The readiness probes are tried as the kubelet tries them.


def tcp_probe(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def http_probe(host: str, port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=1) as answer:
            return 200 <= answer.status < 400
    except OSError:
        return False


def wait_for(probe, what: str, procs: list, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"{what} not ready within {seconds:g} s"
        assert all(p.poll() is None for p in procs), f"a process exited while waiting for {what}"
        time.sleep(0.1)


def test_the_base_pods_form_a_job_and_pass_their_readiness_probes(tmp_path: Path) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    objects = render(str(BASE))
    assert role_problems(objects) == []
    sched, servers, workers = (one(objects, "Deployment", "scheduler"), one(objects, "StatefulSet", "server"),
                               one(objects, "Job", "worker"))
    n = int(workers["spec"]["completions"])
    assert int(servers["spec"]["replicas"]) == 1 and n == 2  # the addresses below
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "byteps"  # the image's `byteps` (deploy/docker/entry.sh)
    shim.write_text(f"#!/bin/sh\nexec {PYTHON} -m byteps.cli \"$@\"\n")
    shim.chmod(0o755)
    ports: set[int] = set()
    while len(ports) < 3:  # the scheduler's, its metrics', the other pods' metrics': all different
        ports.add(free_port())
    port, scheduler_metrics, pod_metrics = sorted(ports)
    pods = [("scheduler", sched, "127.0.0.1", None), ("server", servers, "127.0.0.2", None)]
    pods += [(f"worker{i}", workers, f"127.0.0.{3 + i}", i) for i in range(n)]
    procs, logs, metrics = [], [], {"scheduler": scheduler_metrics, "pods": pod_metrics}
    try:
        for name, workload, ip, index in pods:
            env = pod_env(objects, workload, ip, index)
            assert env["DMLC_PS_ROOT_URI"] == "byteps-scheduler"  # the Service: here the scheduler's address
            # Pods have a network each; here they share one: the scheduler listens on every address
            # (no DMLC_NODE_HOST), the others on their own, so they can share the port.
            env.update(DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port), BYTEPS_START_TIMEOUT="30",
                       BYTEPS_METRICS_PORT=str(metrics["scheduler" if name == "scheduler" else "pods"]))
            env = job_env({**env, "BYTEPS_CORE_BINARY": str(CORE_BINARY),
                           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
            logs.append(tmp_path / f"{name}.log")
            with open(logs[-1], "wb") as log:
                procs.append(subprocess.Popen([PYTHON, "-m", "byteps.launcher.bpslaunch",
                                               *container(workload).get("args", [])],
                                              env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
            if name == "scheduler":  # startup: tcpSocket on DMLC_PS_ROOT_PORT; readiness: httpGet /metrics
                wait_for(lambda: tcp_probe("127.0.0.1", port), "the scheduler (startup, tcpSocket)", procs)
                for _ in range(3):
                    wait_for(lambda: http_probe("127.0.0.1", metrics["scheduler"], "/metrics"),
                             "the scheduler (readiness, httpGet)", procs)
            if name == "server":  # readiness: httpGet /metrics on BYTEPS_METRICS_PORT
                wait_for(lambda: http_probe("127.0.0.2", metrics["pods"], "/metrics"), "the server (httpGet)", procs)
        deadline = time.monotonic() + 90
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # our own session
                p.wait()
    outputs = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(f"--- {pod[0]} rc={p.returncode}\n{out}" for pod, p, out in zip(pods, procs, outputs))
    assert [p.returncode for p in procs] == [0] * len(procs), report
    assert "byteps doctor: passed" in outputs[2] and f"with {n} workers" in outputs[2], report
    assert "differs between workers" not in outputs[2], report  # every pod has the same settings
    # The startup probe's one connection costs the scheduler one WARNING line; /metrics costs none.
    assert outputs[0].count("refused connection from") == 1, report  # "closed the connection" or a reset
