"""Helpers of docs/gpu/bisect_one_gpu_shared.sh (issue 25's proof): the fixture history, the GPU memory timeline
and the summary. Standard library only, plus nvidia-ml-py for the timeline.

    python3 shared_bisect.py history DIR N CULPRIT SERVER_PY     a git history of N commits (git fast-import)
    python3 shared_bisect.py sample CSV PHASE_FILE STOP_FILE     NVML every 0.5 s into CSV until STOP_FILE exists
    python3 shared_bisect.py summary RESULTS_DIR                 the comparison; exit 1 when the proof fails
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 0.6


def history(where: Path, n: int, culprit: int, server_py: Path) -> None:
    """Commit 0 holds the fixture server (tagged v0); commits 1..n-1 each add a line to CHANGES; commit `culprit`
    also adds the file BAD, which turns the server's bad mode on from there (tagged head at n-1)."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(where)], check=True)
    out: list[bytes] = []

    def data(b: bytes) -> None:
        out.append(f"data {len(b)}\n".encode() + b + b"\n")

    changes = b""
    for k in range(n):
        out.append(f"commit refs/heads/main\nmark :{k + 1}\n".encode())
        out.append(f"committer dev <dev@example.invalid> {1767225600 + 60 * k} +0000\n".encode())
        data(("fixture server" if k == 0 else f"change {k}" + (": plant BAD" if k == culprit else "")).encode())
        if k == 0:
            out.append(b"M 100644 inline server.py\n")
            data(server_py.read_bytes())
        changes += f"change {k}\n".encode()
        out.append(b"M 100644 inline CHANGES\n")
        data(changes)
        if k == culprit:
            out.append(b"M 100644 inline BAD\n")
            data(b"the planted regression: every completion loops\n")
    out.append(b"reset refs/tags/v0\nfrom :1\n\nreset refs/tags/head\nfrom :%d\n\n" % n)
    subprocess.run(["git", "-C", str(where), "fast-import", "--quiet"], input=b"".join(out), check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", "main"], check=True)
    sha = subprocess.run(["git", "-C", str(where), "rev-parse", f"head~{n - 1 - culprit}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    print(sha)


def sample(path: Path, phase_file: Path, stop_file: Path, every_s: float = 0.5) -> None:
    """One row a GPU every `every_s`: memory and each compute process with its MiB (NVML's accounting)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "phase", "gpu", "total_mib", "used_mib", "free_mib", "processes", "pid:mib"])
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001  # a CPU run: the timeline says why it is empty
            w.writerow([0, "no NVML", "", "", "", "", "", f"{type(exc).__name__}: {exc}"])
            return
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        t0 = time.monotonic()
        while not stop_file.exists():
            phase = phase_file.read_text().strip() if phase_file.exists() else ""
            for i, h in enumerate(handles):
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                held = ";".join(f"{p.pid}:{(p.usedGpuMemory or 0) >> 20}" for p in procs)
                w.writerow([round(time.monotonic() - t0, 2), phase, i, mem.total >> 20, mem.used >> 20, mem.free >> 20,
                            len(procs), held])
            fh.flush()
            time.sleep(every_s)
        pynvml.nvmlShutdown()


def _load(run: Path) -> tuple[dict, dict]:
    return json.loads((run / "bisect.json").read_text()), json.loads((run / "state.json").read_text())


def _procs(rep: dict, key: str) -> str:
    return " ".join(f"{p['pid']}:{p['mib']}" for p in rep.get(key) or []) or "-"


def _hygiene_rows(label: str, state: dict) -> list[list[str]]:
    rows = []
    for step in state["steps"]:
        res = step.get("result") or {}
        extras = res.get("extras") or {}
        for when in ("before", "after"):
            rep = extras.get(f"gpu_{when}")
            if not rep:
                continue
            rows.append([label, str(step["n"]), str(step.get("slot")), step["sha"][:10], when,
                         rep.get("mode", "whole-GPU"), "skipped" if rep.get("skipped") else
                         ("BUSY" if rep.get("busy") else "ok"), f"{rep.get('waited_s', 0):g}",
                         _procs(rep, "own") if "own" in rep else " ".join(map(str, rep.get("pids") or [])) or "-",
                         _procs(rep, "others"), _procs(rep, "foreign"),
                         ",".join(map(str, rep.get("used_mib") or [])), ",".join(map(str, rep.get("free_mib") or [])),
                         (rep.get("notice") or "")[:160]])
    return rows


def summary(results: Path) -> int:
    expected = (results / "expected-culprit.txt").read_text().strip()
    walls = json.loads((results / "walls.json").read_text())  # seconds per run, and the script's mode
    lines, failures = [], []
    runs = {}
    for label in ("one", "four"):
        if not (results / label / "bisect.json").is_file():
            failures.append(f"{label}: no bisect.json (see {label}-progress.txt)")
            continue
        runs[label] = _load(results / label)
    for label, (res, _state) in runs.items():
        found = res.get("first_new") or "none"
        rounds = len(res.get("rounds") or []) if res.get("slots", 1) > 1 else None
        trials = len(res["steps"])
        # a trial stopped because other verdicts decided its range first is not a failure (needed: false)
        infra = [s for s in res["steps"] if s["status"] == "infra_error" and s.get("needed", True)]
        lines.append(f"{label} slot(s): culprit {found[:12]} ({'expected' if found == expected else 'NOT the expected ' + expected[:12]}); "
                     f"{trials} trials" + (f", ends + {rounds} rounds" if rounds is not None else
                                           f" one after the other ({trials} rounds)")
                     + f"; wall {walls[label]:.1f} s (bisect.json {res['wall_s']:.1f} s); infra_error trials: {len(infra)}")
        if found != expected:
            failures.append(f"{label}: found {found[:12]}, expected {expected[:12]}")
        if infra:
            failures.append(f"{label}: {len(infra)} infra_error trial(s)")
    on_gpu = walls.get("mode") == "--gpu"
    if len(runs) == 2:
        ratio = walls["four"] / walls["one"]
        judged = f"target <= {TARGET_RATIO}" if on_gpu else "not judged: CPU slots share this machine's cores"
        lines.append(f"wall time ratio four/one: {ratio:.2f} ({judged})")
        if on_gpu and ratio > TARGET_RATIO:
            failures.append(f"ratio {ratio:.2f} > {TARGET_RATIO}")
    header = ["run", "step", "slot", "commit", "when", "mode", "state", "waited_s", "own pid:MiB (or PIDs)",
              "other slots pid:MiB", "not of this run", "used MiB", "free MiB", "notice"]
    rows = [r for label, (_, state) in runs.items() for r in _hygiene_rows(label, state)]
    with (results / "hygiene.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([header, *rows])
    busy = [r for r in rows if r[0] == "four" and r[6] == "BUSY"]
    if busy:
        failures.append(f"{len(busy)} per-slot check(s) still BUSY at their end (hygiene.csv)")
    skipped = [r for r in rows if r[6] == "skipped"]
    timeline = results / "timeline.csv"
    if timeline.is_file():
        with timeline.open() as fh:
            samples = [r for r in csv.DictReader(fh) if r["used_mib"]]
        for phase in ("one", "four"):
            got = [r for r in samples if r["phase"] == phase]
            if got:
                lines.append(f"timeline {phase}: {len(got)} samples, used MiB max {max(int(r['used_mib']) for r in got):,},"
                             f" compute processes at once max {max(int(r['processes']) for r in got)}")
    lines += ["", "per-slot hygiene, every trial (before its launch / after its teardown):",
              " | ".join(header[:11])]
    lines += [" | ".join(r[:11]) for r in rows]
    if skipped:
        lines.append(f"({len(skipped)} check(s) skipped: {skipped[0][13]})")
    lines += ["", "RESULT: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures))]
    text = "\n".join(lines)
    (results / "summary.txt").write_text(text + "\n")
    print(text)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    cmd, *args = argv
    if cmd == "history":
        history(Path(args[0]), int(args[1]), int(args[2]), Path(args[3]))
    elif cmd == "sample":
        sample(Path(args[0]), Path(args[1]), Path(args[2]))
    elif cmd == "summary":
        return summary(Path(args[0]))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
