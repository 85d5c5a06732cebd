"""Pre-flight of scripts/gpu_check.sh: in seconds, is everything a GPU run needs on this machine? No kernel compiles.

    python scripts/gpu_preflight.py            # one line per check; exit 0 all there, 1 only optional ones
                                               # missing (the steps that need them are skipped), 2 otherwise
    python scripts/gpu_preflight.py --smoke    # the GPU's own checks are reported but not required

Why each check: a lent GPU machine gives one attempt, and each of these has ended a run minutes in.
- nvidia-smi, torch.cuda.is_available() and libcuda.so.1: the GPU itself (Triton's launcher links libcuda);
- a C compiler and Python.h: Triton builds its CUDA launcher (a C extension) on first use of the GPU;
- torch and triton, whatever versions the machine has (a virtualenv cannot travel there), and whether the
  tuned-defaults table (servelab/kernels/tuning.py) knows that Triton;
- servelab importable (PYTHONPATH=lib); pytest (the GPU tests) and numpy (the engine script) are optional:
  without them only their step is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    kind: str = "essential"  # essential | gpu (essential except in a smoke run) | optional

    def line(self, smoke: bool = False) -> str:
        status = "ok" if self.ok else ("absent" if smoke and self.kind == "gpu" else "MISSING")
        note = " (not needed for --smoke)" if not self.ok and smoke and self.kind == "gpu" else ""
        return f"preflight {status:<8} {self.name}: {self.detail}{note}"


def nvidia_smi() -> Check:
    path = shutil.which("nvidia-smi")
    if path is None:
        return Check("nvidia-smi", False, "not on PATH", "gpu")
    try:
        out = subprocess.run([path, "--query-gpu=name,memory.total,memory.used,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return Check("nvidia-smi", False, "no answer in 15 s", "gpu")
    gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not gpus:
        return Check("nvidia-smi", False, f"exit {out.returncode}: {(out.stderr or out.stdout).strip()[:120]}", "gpu")
    return Check("nvidia-smi", True, "; ".join(f"{g} (name, total, used, driver)" for g in gpus), "gpu")


def c_compiler(env=None) -> Check:
    """The compiler Triton would take: $CC, else gcc, else clang (cc as a last resort)."""
    env = os.environ if env is None else env
    path = env.get("PATH", "")
    for name in ([env["CC"]] if env.get("CC") else []) + ["gcc", "clang", "cc"]:
        found = shutil.which(name, path=path)
        if found:
            return Check("C compiler", True, found)
    return Check("C compiler", False, "none of $CC, gcc, clang, cc on PATH (Triton builds its launcher with one)")


def python_header(include_dir: str | None = None) -> Check:
    """Python.h where Triton looks for it: sysconfig's include dir (posix_prefix for a posix_local scheme)."""
    if include_dir is None:
        scheme = sysconfig.get_default_scheme()
        include_dir = sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]
    header = os.path.join(include_dir, "Python.h")
    if os.path.isfile(header):
        return Check("Python.h", True, header)
    return Check("Python.h", False, f"not at {header} (install this Python's headers, e.g. python3-dev)")


def libcuda() -> Check:
    """libcuda.so.1 where Triton looks: $TRITON_LIBCUDA_PATH, ldconfig's cache, $LD_LIBRARY_PATH."""
    if os.environ.get("TRITON_LIBCUDA_PATH"):
        return Check("libcuda.so.1", True, f"$TRITON_LIBCUDA_PATH={os.environ['TRITON_LIBCUDA_PATH']}", "gpu")
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        cache = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        cache = ""
    hits = [line.split("=>")[-1].strip() for line in cache.splitlines() if "libcuda.so.1" in line]
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    hits += [os.path.join(d, "libcuda.so.1") for d in dirs if os.path.exists(os.path.join(d, "libcuda.so.1"))]
    if hits:
        return Check("libcuda.so.1", True, hits[0], "gpu")
    return Check("libcuda.so.1", False, "not in ldconfig's cache nor $LD_LIBRARY_PATH", "gpu")


def module(name: str, kind: str, why: str) -> Check:
    if importlib.util.find_spec(name) is None:
        return Check(name, False, f"not importable ({why})", kind)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return Check(name, True, version(name), kind)
    except PackageNotFoundError:
        return Check(name, True, "importable", kind)


def torch_and_triton() -> list[Check]:
    """torch (its version, CUDA build, the GPU it sees), servelab (from PYTHONPATH), triton and its table entry."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - a broken install is a finding, not a crash
        return [Check("torch", False, f"import failed: {type(e).__name__}: {e}")]
    checks = [Check("torch", True, f"{torch.__version__} (CUDA build {torch.version.cuda})")]
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        checks.append(Check("torch CUDA", True, f"{props.name}, {props.multi_processor_count} SMs, "
                                                f"{props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor}",
                            "gpu"))
    else:
        checks.append(Check("torch CUDA", False, "torch.cuda.is_available() is False", "gpu"))
    try:
        import servelab.kernels  # noqa: F401  (before triton: it picks compiled or interpreted kernels)
        from servelab.kernels.tuning import TUNED_DECODE, version_key
    except Exception as e:  # noqa: BLE001
        return checks + [Check("servelab.kernels", False, f"import failed ({type(e).__name__}: {e}); "
                                                          "is PYTHONPATH=lib set, and triton installed?")]
    import triton

    checks.append(Check("servelab", True, os.path.dirname(os.path.dirname(servelab.kernels.__file__))))
    known = "{}.{}".format(*version_key(triton.__version__))
    table = (f"tuned defaults for {known} in the table" if known in TUNED_DECODE
             else f"no tuned defaults for {known}: the nearest version's are used")
    checks.append(Check("triton", True, f"{triton.__version__} ({table})"))
    return checks


def run_checks() -> list[Check]:
    return [nvidia_smi(), libcuda(), c_compiler(), python_header(), *torch_and_triton(),
            module("pytest", "optional", "the GPU tests are skipped"),
            module("numpy", "optional", "the engine script is skipped")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a CPU run: the GPU's checks are not required")
    args = parser.parse_args(argv)
    start = time.monotonic()
    checks = [Check("python", True, f"{sys.version.split()[0]} ({sys.executable})"), *run_checks()]
    for c in checks:
        print(c.line(args.smoke), flush=True)
    required = [c for c in checks if not c.ok and (c.kind == "essential" or (c.kind == "gpu" and not args.smoke))]
    optional = [c for c in checks if not c.ok and c.kind == "optional"]
    took = time.monotonic() - start
    if required or optional:
        print(f"preflight: missing: {', '.join(c.name for c in required + optional)} ({took:.1f} s)")
        return 2 if required else 1
    print(f"preflight: everything needed is there ({len(checks)} checks, {took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
