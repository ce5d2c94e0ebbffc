"""Mutation testing on one chosen module: ``python tests/mutation.py PATH [--sample N] [--seed S]``.

PATH is a Python module or package under ``server/daisychain/`` (run with mutmut 3) or a
JavaScript file or folder under ``static/js/`` (run with StrykerJS and its ``command`` runner,
``node --test``). Each module is mapped below to the test files that cover it, so a run takes
minutes: only those tests run against each mutant. The tools install themselves on first use:
mutmut into the running interpreter's environment (the venv), Stryker into ``.mutation/stryker``
through npm. Everything a run writes lives in ``.mutation/`` (ignored by git).

One core: mutmut runs one child at a time, Stryker one runner. A mutant that makes the tests hang
is killed by the tool's per-mutant timeout and counted as killed ("timeout").

The final line prints the score: killed / (killed + survived), timeouts counted as killed and
mutants no mapped test reaches counted as survived. ``--sample N`` runs a seeded random sample of
N mutants (Python only) for modules too large to finish in one sitting. docs/TESTING.md has the
scores per module and the triage of every surviving mutant.

This is not part of the test suite (it is not named ``test_*``) and not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
MUTMUT_VERSION = "3.8.1"
STRYKER_VERSION = "8.7.1"

# module (relative to the repository root; a folder covers every file under it) -> the test files
# that cover it. Tests that need a browser, a GPU or a real WebRTC mesh are left out: they are
# slow and, under mutation, only repeat what the unit and trace tests check.
PYTHON_TESTS: dict[str, list[str]] = {
    "server/daisychain/server/rooms.py": [
        "tests/server/test_server_rooms.py",
        "tests/server/test_server_signaling.py",
        "tests/server/test_mutants_rooms.py",
    ],
    "server/daisychain/server/invites.py": ["tests/server/test_server_invites.py"],
    "server/daisychain/server/ratelimit.py": [
        "tests/server/test_server_signaling.py",
        "tests/server/test_server_hostile.py",
    ],
    "server/daisychain/p2p/datafeed.py": [
        "tests/data/test_data_addressing.py",
        "tests/data/test_fineweb_vectors.py",
        "tests/p2p/test_peer_tls.py",
        "tests/p2p/test_mutants_datafeed.py",
    ],
    "server/daisychain/gpu/live.py": [
        "tests/gpu/test_gpu_live.py",
        "tests/gpu/test_gpu_audit.py",
        "tests/gpu/test_mutants_gpu.py",
    ],
    "server/daisychain/gpu/gates.py": [
        "tests/gpu/test_gpu_live.py",
        "tests/gpu/test_gpu_audit.py",
        "tests/gpu/test_gpu_planted.py",
        "tests/gpu/test_mutants_gpu.py",
    ],
    "server/daisychain/p2p/machine": [
        # these scan the source text for imports, which mutmut's trampolines change
        "-knot test_core_modules_import_no_io and not test_the_scan_fails_on_a_planted_import"
        " and not test_the_cycle_check_finds_a_planted_cycle",
        "tests/p2p/test_protocol_machine.py",
        "tests/p2p/test_protocol_traces.py",
        "tests/p2p/test_guard_tally.py",
        "tests/p2p/test_p2p_config.py",
        "tests/p2p/test_mutants_machine.py",
    ],
    "server/daisychain/p2p/early.py": ["tests/p2p/test_early_chunks.py"],
    "server/daisychain/p2p/contribution.py": [
        "tests/p2p/test_audit_contributions.py",
        "tests/p2p/test_early_chunks.py",
    ],
    "server/daisychain/numerics": [
        "tests/test_numerics.py",
        "tests/numerics/test_vectors.py",
    ],
    # audits' building blocks (docs/TRUST.md): the golden cases and the refusals. Not the planted
    # bugs: they read the module's source, which mutmut's copy holds with its trampolines.
    "server/daisychain/p2p/statements.py": ["-knot planted", "tests/p2p/test_audit_vectors.py"],
    "server/daisychain/p2p/auditkey.py": ["-knot planted", "tests/p2p/test_audit_vectors.py"],
    "server/daisychain/p2p/draw.py": ["-knot planted", "tests/p2p/test_audit_vectors.py"],
    "server/daisychain/p2p/machine/audit.py": ["-knot planted", "tests/p2p/test_audit_round.py"],
}

JS_TESTS: dict[str, list[str]] = {
    # the trace replays only (the rest of protocol_traces.test.mjs starts Python): every trace
    # through the JS machine, effect by effect, plus the tests written against its survivors
    "static/js/p2p/machine": [
        "--test-name-pattern=replays to exactly|mutant:",
        "tests/js/protocol_traces.test.mjs",
        "tests/js/mutants_machine.test.mjs",
        "tests/js/mutants_machine_run.test.mjs",
    ],
    "static/js/p2p/datafeed.js": ["tests/js/p2p_datafeed.test.mjs"],
    "static/js/page/crowd.js": ["tests/js/crowd.test.mjs"],
    "static/js/p2p/statements.js": ["tests/js/audit_vectors.test.mjs"],
    "static/js/p2p/auditkey.js": ["tests/js/audit_vectors.test.mjs"],
    "static/js/p2p/draw.js": ["tests/js/audit_vectors.test.mjs"],
    # the replays only: the planted bugs read the module's source
    "static/js/p2p/machine/audit.js": [
        "--test-name-pattern=replays",
        "tests/js/audit_round.test.mjs",
    ],
    "static/js/numerics/ed25519.js": ["tests/js/ed25519.test.mjs"],
    "static/js/numerics/sha512.js": ["tests/js/ed25519.test.mjs"],
    "static/js/numerics": [
        "tests/js/fmath.test.mjs",
        "tests/js/gemm.test.mjs",
        "tests/js/quant.test.mjs",
        "tests/js/reduce.test.mjs",
        "tests/js/prng.test.mjs",
        "tests/js/hash.test.mjs",
        "tests/js/sha256.test.mjs",
    ],
}


def tests_for(path: str, table: dict[str, list[str]]) -> list[str]:
    """The mapped test files of PATH (itself or the nearest folder above it), those that exist."""
    key = path.rstrip("/")
    while key and key not in table:
        key = key.rpartition("/")[0]
    if not key:
        raise SystemExit(f"mutation: no tests mapped for {path}; add it to tests/mutation.py")
    return [t for t in table[key] if t.startswith("-") or (ROOT / t).exists()]


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(value)


def toml_table(name: str, table: dict[str, object]) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())


def ensure_mutmut() -> None:
    try:
        import mutmut

        if mutmut.__version__ == MUTMUT_VERSION:
            return
    except ImportError:
        pass
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", f"mutmut=={MUTMUT_VERSION}"], check=True
    )


def run_python(path: str, sample: int | None, seed: int) -> None:
    """mutmut 3 in .mutation/py: a tree whose ``src/`` is server/ (mutmut puts mutants/src first
    on sys.path), with the package, tests and assets beside it as mutmut expects."""
    ensure_mutmut()
    tests = tests_for(path, PYTHON_TESTS)
    rel = Path(path).relative_to("server")
    work = WORK / "py"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in ("tests", "static", "kernels", "luts"):
        (work / name).symlink_to(ROOT / name)
    (work / "src").symlink_to(ROOT / "server")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mutmut_cfg = dict(project["tool"].get("mutmut", {}))
    mutmut_cfg["source_paths"] = ["src/daisychain"]
    only = f"src/{rel}" if rel.suffix == ".py" else f"src/{rel}/*"
    mutmut_cfg["only_mutate"] = [only]
    mutmut_cfg["pytest_add_cli_args_test_selection"] = tests
    pytest_cfg = dict(project["tool"]["pytest"]["ini_options"])
    (work / "pyproject.toml").write_text(
        toml_table("tool.pytest.ini_options", pytest_cfg)
        + "\n"
        + toml_table("tool.mutmut", mutmut_cfg)
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # the console script, not ``python -m mutmut``: the mutants import ``mutmut.__main__``, which
    # must be the module already loaded, not a second copy of the one run as ``__main__``
    mutmut = [str(Path(sys.executable).parent / "mutmut")]
    names: list[str] = []
    if sample is not None:
        # generate the mutants (and the stats) once, then run a seeded sample of their names
        # (mutmut refuses the name that matches nothing, after generating and collecting stats)
        print("mutation: generating the mutants and finding which tests reach each one")
        subprocess.run(
            [*mutmut, "run", "--max-children", "1", "not-a-mutant"],
            cwd=work,
            env=env,
            capture_output=True,
        )
        every = sorted(mutant_names(work))
        random.Random(seed).shuffle(every)
        names = sorted(every[:sample])
        print(f"mutation: sample of {len(names)} of {len(every)} mutants (seed {seed})")
    subprocess.run([*mutmut, "run", "--max-children", "1", *names], cwd=work, env=env, check=True)
    report_python(work, set(names) if names else None)


def mutant_names(work: Path) -> list[str]:
    names = []
    for meta in (work / "mutants").rglob("*.meta"):
        names += json.loads(meta.read_text())["exit_code_by_key"].keys()
    return names


# mutmut's own table (mutmut.__main__.status_by_exit_code, which cannot be imported outside its
# working folder): a test run's exit code -> the mutant's status
STATUS_BY_EXIT_CODE: dict[int | None, str] = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "killed",
    None: "not checked",
}


def report_python(work: Path, only: set[str] | None) -> None:
    counts: dict[str, int] = {}
    survivors = []
    for meta in sorted((work / "mutants").rglob("*.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if only is not None and name not in only:
                continue
            kind = STATUS_BY_EXIT_CODE.get(code, "suspicious")
            if kind in ("survived", "no tests"):
                survivors.append(name)
            counts[kind] = counts.get(kind, 0) + 1
    (WORK / "survivors.txt").write_text("".join(f"{s}\n" for s in survivors))
    print_score(counts)
    print(f"mutation: survivors listed in {WORK / 'survivors.txt'}; see each with")
    print(f"  (cd {work} && {Path(sys.executable).parent / 'mutmut'} show NAME)")


def print_score(counts: dict[str, int]) -> None:
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    survived = counts.get("survived", 0) + counts.get("no tests", 0) + counts.get("no coverage", 0)
    total = killed + survived
    score = 100.0 * killed / total if total else 0.0
    detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"mutation score: {score:.1f}% ({killed}/{total} killed; {detail})")


def ensure_stryker() -> Path:
    home = WORK / "stryker"
    if not (home / "node_modules" / "@stryker-mutator" / "core").exists():
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "package.json").exists():
            (home / "package.json").write_text('{"name": "mutation", "private": true}\n')
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                f"@stryker-mutator/core@{STRYKER_VERSION}",
            ],
            cwd=home,
            check=True,
        )
    return home / "node_modules" / ".bin" / "stryker"


def run_js(path: str) -> None:
    """StrykerJS with the command runner: every mutant runs ``node --test`` on the mapped files."""
    stryker = ensure_stryker()
    tests = tests_for(path, JS_TESTS)
    target = path.rstrip("/")
    mutate = [f"{target}/**/*.js"] if (ROOT / target).is_dir() else [target]
    config = {
        "$schema": "./.mutation/stryker/node_modules/@stryker-mutator/core/schema/"
        "stryker-schema.json",
        "testRunner": "command",
        "commandRunner": {"command": shlex.join(["node", "--test", *tests])},
        "mutate": mutate,
        # the sandbox holds only what node --test reads: the page's modules and the tests with
        # their vectors
        "ignorePatterns": ["/*", "!/static", "!/tests", "!/luts", "!/kernels", "/tests/**/*.py"],
        "concurrency": 1,
        "maxTestRunnerReuse": 0,
        "timeoutMS": 20000,
        "coverageAnalysis": "off",
        "reporters": ["clear-text", "json"],
        "jsonReporter": {"fileName": ".mutation/js/report.json"},
        "tempDirName": ".mutation/stryker-tmp",
        "cleanTempDir": "always",
        "incremental": False,
    }
    conf = WORK / "js" / "stryker.config.json"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(json.dumps(config, indent=2))
    subprocess.run([str(stryker), "run", str(conf)], cwd=ROOT, check=True)
    report = json.loads((WORK / "js" / "report.json").read_text())
    counts: dict[str, int] = {}
    survivors = []
    for file, data in report["files"].items():
        for m in data["mutants"]:
            status = m["status"]
            key = {"Killed": "killed", "Timeout": "timeout", "Survived": "survived"}.get(
                status, status
            )
            if status in ("Survived", "NoCoverage"):
                line = m["location"]["start"]["line"]
                survivors.append(f"{file}:{line} {m['mutatorName']}: {m.get('replacement', '')}")
            counts[key] = counts.get(key, 0) + 1
    (WORK / "survivors.txt").write_text("".join(f"{s}\n" for s in survivors))
    counts.pop("CompileError", None)
    counts.pop("RuntimeError", None)
    counts.pop("Ignored", None)
    if "NoCoverage" in counts:
        counts["no coverage"] = counts.pop("NoCoverage")
    print_score(counts)
    print(f"mutation: survivors listed in {WORK / 'survivors.txt'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a module or folder under server/daisychain/ or static/js/")
    parser.add_argument("--sample", type=int, help="run a seeded random sample of N mutants")
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    path = Path(args.path).resolve().relative_to(ROOT).as_posix()
    if path.startswith("static/js/"):
        run_js(path)
    elif path.startswith("server/daisychain/"):
        run_python(path, args.sample, args.seed)
    else:
        raise SystemExit("mutation: PATH must be under server/daisychain/ or static/js/")


if __name__ == "__main__":
    main()
