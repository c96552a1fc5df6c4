"""deploy/docker/Dockerfile without a container runtime: parsed, its apt packages checked against
this machine's archive (``apt-cache show``), its project commands and copied files checked
against the repository, and its runtime stage checked for having no compiler but every library
the built core loads (``ldd``, when the core is built here)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
COMPILERS = {"build-essential", "gcc", "g++", "cpp", "clang", "make", "cmake", "ninja-build", "gcc-12",
             "g++-12", "libc6-dev", "libc-dev"}
BASE_IMAGE = {"libc6", "libgcc-s1", "libstdc++6"}
CORE_FILES = [REPO / "python" / "byteps" / "_bin" / "byteps-core",
              *sorted((REPO / "python" / "byteps").glob("_core*.so"))]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            word, _, rest = current.strip().partition(" ")
            logical.append((word.upper(), rest.strip()))
        current = ""
    return logical


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (FROM ... AS name)."""
    result: dict[str, list[tuple[str, str]]] = {}
    name = ""
    for word, rest in instructions(text):
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, rest
            name = m.group(2) or m.group(1)
            result[name] = [(word, rest)]
        else:
            result[name].append((word, rest))
    return result


def apt_packages(stage: list[tuple[str, str]]) -> list[str]:
    """Every package the stage's RUN lines give to apt-get install."""
    packages = []
    for word, rest in stage:
        if word != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", rest):
            tokens = shlex.split(command)
            if "apt-get" in tokens and "install" in tokens:
                after = tokens[tokens.index("install") + 1:]
                packages += [t for t in after if not t.startswith("-")]
    return packages


@pytest.fixture(scope="module")
def parsed() -> dict[str, list[tuple[str, str]]]:
    return stages(DOCKERFILE.read_text())


def test_two_stages_on_debian_12(parsed: dict[str, list[tuple[str, str]]]) -> None:
    assert list(parsed) == ["build", "runtime"]
    for stage in parsed.values():
        assert re.fullmatch(r"debian:12(-slim)?\s+AS\s+\w+", stage[0][1], re.IGNORECASE), stage[0]
    runtime = parsed["runtime"]
    assert ("ENTRYPOINT", '["bpslaunch"]') in runtime
    assert any(w == "COPY" and r.startswith("--from=build ") for w, r in runtime)
    # nothing but apt installs software: no pip, no curl | sh
    for stage in parsed.values():
        for word, rest in stage:
            assert not re.search(r"\b(pip3?|curl|wget)\b", rest), rest


def test_every_apt_package_is_in_the_archive(parsed: dict[str, list[tuple[str, str]]]) -> None:
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache is not on PATH: cannot check the packages against the archive")
    packages = sorted({p for stage in parsed.values() for p in apt_packages(stage)})
    assert len(packages) >= 15, packages
    if subprocess.run(["apt-cache", "show", *packages], capture_output=True).returncode == 0:
        return  # one call for all: fails when any one is unknown, then find which
    unknown = [p for p in packages
               if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0]
    assert not unknown, f"not in this machine's apt archive: {unknown}"


def test_build_stage_installs_what_install_deps_installs_for_the_core(parsed) -> None:
    """The build packages are a subset of scripts/install-deps.sh's list (minus test/bench tools)."""
    deps = (REPO / "scripts" / "install-deps.sh").read_text()
    listed = set(re.findall(r"[a-z0-9][a-z0-9+.-]+", deps[deps.index("PKGS=("):deps.index("\n)")]))
    build = set(apt_packages(parsed["build"]))
    assert build <= listed, sorted(build - listed)


def test_runtime_stage_has_no_compiler(parsed: dict[str, list[tuple[str, str]]]) -> None:
    runtime = apt_packages(parsed["runtime"])
    assert runtime, "the runtime stage installs nothing"
    assert not COMPILERS & set(runtime), sorted(COMPILERS & set(runtime))
    assert not [p for p in runtime if p.endswith("-dev")], runtime
    assert COMPILERS & set(apt_packages(parsed["build"])), "the build stage has no compiler"


def test_project_commands_and_copied_files_exist(parsed: dict[str, list[tuple[str, str]]]) -> None:
    for stage in parsed.values():
        for word, rest in stage:
            if word == "COPY" and not rest.startswith("--from"):
                *sources, _dest = shlex.split(rest)
                for source in sources:
                    assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            if word == "RUN":
                for script in re.findall(r"\b(?:bash|sh)\s+(\S+\.sh)\b", rest):
                    assert (REPO / script).is_file(), f"RUN {script}: not in the repository"
    build_runs = " ".join(r for w, r in parsed["build"] if w == "RUN")
    assert "scripts/build.sh" in build_runs
    # the cmake options it passes exist
    for option in re.findall(r"-D(BYTEPS_\w+)=", build_runs):
        assert f"option({option} " in (REPO / "CMakeLists.txt").read_text(), option
    # the wrapper's commands are the project's console scripts, and their modules exist
    entry = (REPO / "deploy" / "docker" / "entry.sh").read_text()
    scripts = re.findall(r'^(\w+) = "([\w.]+):main"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert scripts
    for name, module in scripts:
        assert f"{name}) exec python3 -m {module} " in entry, name
        assert (REPO / "python" / (module.replace(".", "/") + ".py")).is_file(), module
        assert f"/usr/local/bin/{name}" in " ".join(r for w, r in parsed["runtime"] if w == "RUN"), name


@pytest.mark.parametrize("binary", CORE_FILES, ids=lambda p: p.name)
def test_runtime_packages_provide_the_core_libraries(parsed, binary: Path) -> None:
    if not binary.exists() or shutil.which("ldd") is None or shutil.which("dpkg") is None:
        pytest.skip(f"{binary} is not built here (or ldd/dpkg missing)")
    runtime = set(apt_packages(parsed["runtime"]))
    # what every Debian image has (apt itself depends on them), and what the listed packages pull in
    depends = subprocess.run(["apt-cache", "depends", *sorted(runtime)], capture_output=True, text=True).stdout
    provided = runtime | BASE_IMAGE | set(re.findall(r"^\s+(?:Pre)?Depends: (\S+)", depends, re.MULTILINE))
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    missing = []
    for path in re.findall(r"=>\s+(/\S+)", out):
        owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if owner.returncode != 0:  # /lib is a link to /usr/lib on Debian 12
            owner = subprocess.run(["dpkg", "-S", path.replace("/lib/", "/usr/lib/", 1)],
                                   capture_output=True, text=True)
        if owner.returncode != 0:  # loaded from elsewhere (e.g. CI's .gpu-bundle copy): the package by file name
            owner = subprocess.run(["dpkg", "-S", "/usr/lib/*/" + Path(path).name],
                                   capture_output=True, text=True)
        package = owner.stdout.split(":")[0] if owner.returncode == 0 else path
        if package not in provided:
            missing.append(f"{path} ({package})")
    assert not missing, f"libraries of {binary.name} no runtime package provides: {missing}"
