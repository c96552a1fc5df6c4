"""``byteps plan``: its recommendation and figures for given inputs, and its named errors."""

from __future__ import annotations

import json

import pytest

from byteps import cli
from byteps.sim import plan

BASE = ["--workers", "4", "--gpus-per-worker", "1", "--nic-gbps", "1", "--cpu-machines", "2"]


def run(capsys, argv):
    rc = plan.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_n4_k2_recommends_mixed_at_the_formulas_speedup(capsys):
    rc, out, err = run(capsys, BASE + ["--grad-bytes", "100M", "--compute-ms", "0", "--json"])
    assert rc == 0, err
    p = json.loads(out)
    best = p["recommended"]
    assert best["placement"] == "mixed" and best["cpu_servers"] == 2
    assert best["share_per_cpu_server"] == pytest.approx(0.3)
    assert best["share_per_colocated_server"] == pytest.approx(0.1)
    assert best["speedup_vs_ring"] == pytest.approx(1.25, rel=0.02)
    assert p["bound_speedup_vs_ring"] == pytest.approx(1.25)
    # 100 MB over 0.956 Gbit/s: the formula's 2n(n-1)M/((n^2+kn-2k)B) = 1.2 M / B.
    assert best["comm_formula_s"] == pytest.approx(1.2 * 1e8 / (0.956e9 / 8), rel=1e-9)
    cpu2 = [r for r in p["candidates"] if r["placement"] == "cpu" and r["cpu_servers"] == 2][0]
    assert cpu2["iteration_s"] / best["iteration_s"] == pytest.approx(5 / 3, rel=0.02)


def test_text_output_names_placement_split_time_and_bound(capsys):
    rc, out, _ = run(capsys, BASE + ["--grad-bytes", "100M", "--compute-ms", "0"])
    assert rc == 0
    assert "use: mixed: 2 CPU servers + a server on each worker machine" in out
    assert "each CPU server: 30.00 % of the bytes (30.00 MB)" in out
    assert "each colocated server: 10.00 % (10.00 MB)" in out
    assert "1.25x over ring" in out and "bound (formula" in out
    assert "servers: allocate 2 CPU server machines; colocate servers on the worker machines: yes" in out


@pytest.mark.parametrize("argv,k,colocate,words", [
    # mixed: 2 CPU servers and a server on each worker machine
    (BASE + ["--grad-bytes", "100M", "--compute-ms", "0"], 2, True,
     "allocate 2 CPU server machines; colocate servers on the worker machines: yes"),
    # k = n: the CPU machines alone
    (["--workers", "4", "--gpus-per-worker", "1", "--nic-gbps", "1", "--cpu-machines", "4", "--grad-bytes", "100M",
      "--compute-ms", "0"], 4, False, "allocate 4 CPU server machines; colocate servers on the worker machines: no"),
    # no spare CPU machines: colocated
    (["--workers", "8", "--nic-gbps", "25", "--model", "vgg16"], 0, True,
     "allocate 0 CPU server machines; colocate servers on the worker machines: yes"),
    # n = 2: ring recommended; a byteps job colocates (every placement moves M per worker NIC)
    (["--workers", "2", "--gpus-per-worker", "1", "--nic-gbps", "1", "--cpu-machines", "2", "--grad-bytes", "100M",
      "--compute-ms", "0"], 0, True, "colocate servers on the worker machines: yes (for a byteps job: a server on each"),
])
@pytest.mark.parametrize("simulated", [True, False])
def test_how_many_servers_in_words_and_json(capsys, argv, k, colocate, words, simulated):
    argv = argv + ([] if simulated else ["--no-simulate"])
    rc, out, err = run(capsys, argv)
    assert rc == 0, err
    assert words in out
    rc, out, err = run(capsys, argv + ["--json"])
    p = json.loads(out)
    assert (p["allocate_cpu_servers"], p["colocate"]) == (k, colocate)
    row = [r for r in p["candidates"] if r["placement"] == p["server_placement"] and r["cpu_servers"] == k][0]
    assert row["placement"] != "ring" and row["colocated"] == colocate


def test_no_cpu_machines_and_a_compute_bound_model(capsys):
    rc, out, _ = run(capsys, ["--workers", "8", "--nic-gbps", "100", "--model", "resnet50", "--json"])
    assert rc == 0
    p = json.loads(out)
    assert p["recommended"]["cpu_servers"] == 0
    assert {r["placement"] for r in p["candidates"]} == {"ring", "colocated"}
    assert p["recommended"]["iteration_s"] >= p["compute_s"]


def test_no_simulate_ranks_by_formula(capsys):
    rc, out, _ = run(capsys, ["--workers", "16", "--nic-gbps", "25", "--cpu-machines", "32", "--model", "vgg16",
                              "--no-simulate", "--json"])
    assert rc == 0
    p = json.loads(out)
    assert "iteration_s" not in p["recommended"]
    # k' = n: the CPU-only placement reaches M / B; mixed at k' = n is the same time, more machines
    # are never offered.
    assert p["recommended"]["cpu_servers"] == 16
    assert max(r["cpu_servers"] for r in p["candidates"]) == 16


def test_batch_scales_the_compute(capsys):
    _, a, _ = run(capsys, ["--workers", "2", "--nic-gbps", "10", "--model", "vgg16", "--no-simulate", "--json"])
    _, b, _ = run(capsys, ["--workers", "2", "--nic-gbps", "10", "--model", "vgg16", "--batch", "32",
                           "--no-simulate", "--json"])
    assert json.loads(b)["compute_s"] == pytest.approx(json.loads(a)["compute_s"] / 2)


@pytest.mark.parametrize("argv,flag,what", [
    (["--nic-gbps", "1", "--model", "vgg16"], "--workers", "number of worker"),
    (["--workers", "4", "--model", "vgg16"], "--nic-gbps", "line rate"),
    (["--workers", "4", "--nic-gbps", "0", "--model", "vgg16"], "--nic-gbps", "> 0"),
    (["--workers", "4", "--nic-gbps", "1"], "--model", "--grad-bytes B and --compute-ms T"),
    (["--workers", "4", "--nic-gbps", "1", "--grad-bytes", "1G"], "--compute-ms", "forward + backward"),
    (["--workers", "4", "--nic-gbps", "1", "--compute-ms", "3"], "--grad-bytes", "gradient bytes"),
    (["--workers", "4", "--nic-gbps", "1", "--model", "vgg16", "--grad-bytes", "1G"], "--model", "not both"),
    (["--workers", "4", "--nic-gbps", "1", "--model", "alexnet"], "--model", "unknown model 'alexnet'"),
    (["--workers", "4", "--nic-gbps", "1", "--grad-bytes", "lots", "--compute-ms", "1"], "--grad-bytes", "100M"),
    (["--workers", "4", "--nic-gbps", "1", "--cpu-nic-gbps", "10", "--model", "vgg16"], "--cpu-machines",
     "drop --cpu-nic-gbps"),
    (["--workers", "4", "--nic-gbps", "1", "--cpu-machines", "2", "--cpu-nic-gbps", "-1", "--model", "vgg16"],
     "--cpu-nic-gbps", "> 0"),
    (["--workers", "4", "--nic-gbps", "1", "--grad-bytes", "1G", "--compute-ms", "1", "--batch", "8"], "--batch",
     "--compute-ms"),
])
def test_named_errors(capsys, argv, flag, what):
    rc, out, err = run(capsys, argv)
    assert rc == plan.EXIT_USAGE and out == ""
    assert err.startswith("byteps plan: error: ")
    assert flag in err and what in err, err


def test_the_byteps_command_runs_plan_without_the_binary(capsys, monkeypatch):
    def no_binary():
        raise AssertionError("byteps plan must not look for byteps-core")
    monkeypatch.setattr(cli.corebin, "find_core_binary", no_binary)
    rc = cli.main(["plan", *BASE, "--grad-bytes", "100M", "--compute-ms", "0", "--no-simulate"])
    assert rc == 0
    assert "use: mixed" in capsys.readouterr().out


def test_unequal_rates_shift_the_split_toward_the_faster_cpu_machines(capsys):
    argv = ["--workers", "8", "--nic-gbps", "10", "--cpu-machines", "2", "--grad-bytes", "1G", "--compute-ms", "0",
            "--no-simulate", "--json"]
    _, equal, _ = run(capsys, argv)
    _, faster, _ = run(capsys, argv + ["--cpu-nic-gbps", "20"])
    mixed = lambda p: [r for r in json.loads(p)["candidates"] if r["placement"] == "mixed" and r["cpu_servers"] == 2][0]
    assert mixed(faster)["share_per_cpu_server"] > mixed(equal)["share_per_cpu_server"]
    assert mixed(faster)["share_per_colocated_server"] < mixed(equal)["share_per_colocated_server"]
    _, fastest, _ = run(capsys, argv + ["--cpu-nic-gbps", "80"])
    row = mixed(fastest)
    assert row["share_per_cpu_server"] == pytest.approx(0.5) and row["share_per_colocated_server"] == 0
    assert "the colocated servers get none" in plan.describe(row)
    # One 80 Gbit/s CPU machine already takes everything at the worker NIC's M / B: fewest machines.
    assert json.loads(fastest)["recommended"]["cpu_servers"] == 1


def test_probe_against_listen_on_loopback(capsys):
    import threading

    from byteps.sim import probe

    port, ready, got = [], threading.Event(), {}

    def serve():
        got["rate"] = probe.listen(0, 10.0, "127.0.0.1", ready=lambda p: (port.append(p), ready.set()))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10), "the listener did not start within 10 s"
    rc, out, err = run(capsys, ["--workers", "2", "--gpus-per-worker", "1", "--probe", f"127.0.0.1:{port[0]}",
                                "--probe-seconds", "0.2", "--grad-bytes", "10M", "--compute-ms", "0", "--json"])
    t.join(10)
    assert rc == 0, err
    p = json.loads(out)
    assert p["probe"]["out_gbps"] > 0.1 and p["probe"]["in_gbps"] > 0.1  # loopback: Gbit/s at least
    assert p["nic_gbps"] == pytest.approx(min(p["probe"].values())) and p["goodput"] == 1.0
    assert got["rate"] * 8 / 1e9 == pytest.approx(p["probe"]["out_gbps"])


@pytest.mark.parametrize("argv,what", [
    (["--probe", "nohost", "--workers", "2", "--model", "vgg16"], "expected HOST:PORT"),
    (["--probe", "127.0.0.1:1", "--workers", "2", "--model", "vgg16"], "byteps plan --listen 1"),
    (["--probe", "127.0.0.1:1", "--nic-gbps", "10", "--workers", "2", "--model", "vgg16"], "not both"),
    (["--listen", "0", "--probe", "127.0.0.1:1"], "not both"),
])
def test_probe_errors(capsys, argv, what):
    rc, _, err = run(capsys, argv)
    assert rc == plan.EXIT_USAGE and what in err, err


def test_listen_gives_up_after_its_timeout(capsys):
    rc, _, err = run(capsys, ["--listen", "0", "--listen-timeout", "0.2"])
    assert rc == plan.EXIT_USAGE and "no probe arrived within 0.2 s" in err
