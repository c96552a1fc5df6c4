"""deploy/kubernetes without a cluster: the base and the example overlay rendered by
tools/k8s_render.py, every object validated offline against the Kubernetes API schema of Debian's
python3-kubernetes (tools/k8s_schema.py, which is shown to fail on broken objects), the example
checked for the variables every role needs and for counts that agree, our rendering compared with
``kubectl kustomize`` when kubectl is on PATH, and the base's pods' environments run as a real job
on loopback addresses (one per pod), with the readiness probes tried against it."""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import CORE_BINARY, PYTHON, REPO, free_port, job_env, missing_core, kill_left
from tools.k8s_job import container, one, pod_env, role_problems
from tools.k8s_render import RenderError, render
from tools.k8s_schema import SchemaError, validate

BASE = REPO / "deploy" / "kubernetes" / "base"
EXAMPLE = REPO / "deploy" / "kubernetes" / "examples" / "four-workers"
KINDS = {("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("apps/v1", "Deployment"),
         ("apps/v1", "StatefulSet"), ("batch/v1", "Job")}
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
    (tmp_path / "workers.yaml").write_text("{apiVersion: batch/v1, kind: Job, metadata: {name: byteps-worker}, "
                                           "spec: {completions: 3}}\n")
    r = subprocess.run([*tool, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (1, ""), r
    assert r.stderr == (f"k8s_render: {tmp_path}: workers: completionMode Indexed, completions 3, parallelism 4; "
                        "DMLC_NUM_WORKER=4\n")


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
        kill_left(procs)
    outputs = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(f"--- {pod[0]} rc={p.returncode}\n{out}" for pod, p, out in zip(pods, procs, outputs))
    assert [p.returncode for p in procs] == [0] * len(procs), report
    assert "byteps doctor: passed" in outputs[2] and f"with {n} workers" in outputs[2], report
    assert "differs between workers" not in outputs[2], report  # every pod has the same settings
    # The startup probe's one connection costs the scheduler one WARNING line; /metrics costs none.
    assert outputs[0].count("refused connection from") == 1, report  # "closed the connection" or a reset
