"""No orphaned server, ever: a watchdog per server, a record per launch, and a reaper for both.

Why a watchdog process and not PR_SET_PDEATHSIG: the parent-death signal fires when the *thread* that
forked the child exits, not the process — a server launched from a bisect prefetch thread or an executor
thread would be killed as soon as that thread ends — and it does not reach a server's own children that
re-parented or called setsid. So abbisect starts `python -m abbisect.supervisor TOKEN GRACE` in its own
process group with a pipe on its stdin. Every process of the server carries `ABBISECT_SERVER_TOKEN=TOKEN`
in its environment (children inherit it, through setsid and double forks alike), so the server's whole
family is found by reading /proc/*/environ, wherever it went. When the pipe closes without the word
`release` (abbisect died, even by SIGKILL) or the watchdog gets SIGTERM, it kills every process carrying the
token: SIGTERM, then SIGKILL after GRACE seconds.

If the watchdog itself is killed with abbisect (`kill -9` of the whole process group), the record
`<cache>/servers/<token>.json` written before the launch remains; the next abbisect invocation reaps
every record whose owner (PID and start time from /proc/<pid>/stat) is gone, and says so on stderr.

Standard library only: the watchdog starts in well under a second next to a server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from abbisect.cache import Cache

TOKEN_VAR = "ABBISECT_SERVER_TOKEN"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat): with the PID,
    an identity that survives PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is dead and only waits for its parent


def token_pids(token: str) -> list[int]:
    """Live processes whose environment carries this server token (readable for our own user's processes)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry)):
            pids.append(int(entry))
    return pids


def kill_family(token: str, grace: float, extra: tuple[int, ...] = ()) -> list[int]:
    """SIGTERM every process of the server (by token, plus `extra`), SIGKILL what is left after `grace`;
    returns the PIDs that were still alive after that."""
    def targets() -> list[int]:
        return sorted(set(token_pids(token)) | {p for p in extra if _alive(p)})

    pids = targets()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while (pids := targets()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pids:
            break
    return pids


# -- the record of each launched server, and the reaper --------------------------------------------------
def record_dir(cache: Cache | Path) -> Path:
    return Cache.at(cache).servers


def write_record(cache: Cache | Path, token: str, **facts) -> Path:
    path = record_dir(cache) / f"{token}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"token": token, "owner_pid": me, "owner_start": start_time(me), **facts}))
    os.replace(tmp, path)
    return path


def reap_orphans(cache: Cache | Path) -> list[str]:
    """Kill the servers of abbisect processes that are gone; one line per reaped record."""
    lines: list[str] = []
    folder = record_dir(cache)
    if not folder.is_dir():
        return lines
    for path in sorted(folder.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        owner, started = rec.get("owner_pid"), rec.get("owner_start")
        if owner and start_time(int(owner)) == started and started is not None:
            continue  # its abbisect still runs
        pids = token_pids(str(rec.get("token", path.stem)))
        left = kill_family(str(rec.get("token", path.stem)), 2.0) if pids else []
        path.unlink(missing_ok=True)
        if pids:
            argv = " ".join(rec.get("argv", []))[:160]
            still = f", still alive: {left}" if left else ""
            port = f"; port {rec['port']}" if rec.get("port") else ""
            lines.append(f"abbisect: reaped an orphaned {rec.get('kind', 'server')} of a dead abbisect (pid {owner}):"
                         f" killed PIDs {', '.join(map(str, pids))}{still}{port}; {argv}")
    return lines


def watch(token: str, grace: float) -> subprocess.Popen:
    """Start the watchdog of one launch (a server, a build step); `release` it when done."""
    from abbisect.proc import scrubbed_env

    # Born with SIGTERM and SIGINT blocked (the mask is inherited): a signal that comes while the watchdog's
    # interpreter starts waits until its handlers are in place, instead of killing it before it can kill the
    # server (a stopped trial's process group is signalled the moment its server starts).
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    try:
        return subprocess.Popen([sys.executable, "-m", "abbisect.supervisor", token, str(grace)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=scrubbed_env({"PYTHONPATH": _abbisect_path()}))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_WATCHED = {signal.SIGTERM, signal.SIGINT}


def _abbisect_path() -> str:
    """The watchdog imports this very abbisect (the one running, even from a source tree)."""
    here = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return f"{here}{os.pathsep}{rest}" if rest else here


def release(watchdog: subprocess.Popen | None, record: Path | None) -> None:
    """The launch ended in order: the watchdog exits without killing anything, the record goes."""
    if watchdog is not None:
        assert watchdog.stdin is not None  # started with stdin=PIPE (watch)
        try:
            watchdog.stdin.write(b"release\n")
            watchdog.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watchdog.kill()
    if record is not None:
        record.unlink(missing_ok=True)


def abandon(watchdog: subprocess.Popen) -> None:
    """The launch failed in a way that may have left a child: the watchdog kills whatever carries the token
    (nothing, when the exec failed) and exits; the record stays for the reaper until then."""
    if watchdog.stdin is not None:
        try:
            watchdog.stdin.close()
        except OSError:
            pass


LATE_S = 1.0  # how long a triggered watchdog keeps looking for a server that had not exec'd yet


def end_all(token: str, grace: float, late: float = LATE_S) -> list[int]:
    """Kill the server's family, and keep looking for `late` seconds: a server forked but not yet exec'd when
    its owner died carries the token only from its exec on."""
    left = kill_family(token, grace)
    deadline = time.monotonic() + late
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if token_pids(token):
            left = kill_family(token, grace)
    return left


def main(argv: list[str]) -> int:
    token, grace = argv[0], float(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches abbisect too; it tears down in order
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1 if end_all(token, grace) else 0))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WATCHED)  # blocked since birth (watch): handled from now on
    released = False
    for line in sys.stdin:
        if line.strip() == "release":
            released = True
            break
    if not released:
        end_all(token, grace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
