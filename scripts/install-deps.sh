#!/usr/bin/env bash
# Installs every system package byteps needs to build, test and benchmark, from Debian's archive.
# Idempotent: when everything is present it only checks (a second or two), no network.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libssl-dev
  pybind11-dev python3-pybind11 python3-dev python3-numpy python3-pytest
  python3-setuptools python3-venv python3-pip
  clang libclang-rt-14-dev
  python3-torch python3-torchvision python3-sklearn python3-tqdm python3-matplotlib
  iperf3 iproute2 procps psmisc
  # the GPU path's topology (PCIe switches) and NUMA-bound staging; the UCX transport
  libhwloc-dev libnuma-dev libucx-dev
  # the ps-lite peer rows of bench/pslite (builds ps-lite from /work/shared/peers in a cache folder)
  protobuf-compiler libzmq3-dev libprotobuf-dev
  # the OpenMPI peer of bench/collective (MPI_Allreduce, ring)
  openmpi-bin libopenmpi-dev
  # the real one-machine Slurm of tests/python/test_slurm_real.py (munged, slurmctld, slurmd, srun)
  slurm-wlm munge
  # tests/python/test_kubernetes_manifests.py: the Kubernetes API's models (the offline schema) and YAML
  python3-kubernetes python3-yaml
  # byteps launch --hostfile (ssh) and its test's sshd on the testbed hosts
  openssh-client openssh-server
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
