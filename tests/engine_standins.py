"""Stand-in SGLang and vLLM checkouts for the tests: git histories of the toy engine (abbisect/builtin/history.py)
laid out and launched as the real engines are, so abbisect recognises the checkout and assembles its recipe.

- SGLang: the package in python/ (python/pyproject.toml names `sglang`); `python -m sglang.launch_server
  --model-path M --host H --port P [--random-seed N …]` serves the toy engine and prints SGLang's ready line
  ("The server is fired up and ready to roll!") once the model is loaded.
- vLLM: the package at the top (pyproject.toml names `vllm`) with a `vllm` console script; `vllm serve M --host H
  --port P [--seed N …]` serves the toy engine and logs vLLM's version line.
Flags the stand-in does not translate go to the toy engine as they are (an unknown one fails its start, as a
real server's would).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from abbisect.builtin.history import TEMPLATE, Commit, _git, apply_change, commit


def _pyproject(name: str, scripts: str = "") -> str:
    """The stand-in's package: the engine's name over its own module and the toy engine."""
    return (f'[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "0.99.0"\nrequires-python = ">=3.9"\n\n{scripts}'
            f'[tool.setuptools]\npackages = ["{name}", "toyengine"]\n')


LAUNCH_SERVER = '''\
"""python -m sglang.launch_server: SGLang's flags and ready line over the toy engine."""
import argparse
import logging
import sys

from toyengine import server

READY = "The server is fired up and ready to roll!"


class _Ready(logging.Handler):
    def emit(self, record):
        if record.getMessage() == "Application startup complete.":  # the model is loaded: warm-up done
            print(READY, flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--context-length", type=int, default=None)
    args, rest = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    print(f"server_args=ServerArgs(model_path={args.model_path!r}, tp_size={args.tp_size}, "
          f"random_seed={args.random_seed})", flush=True)
    toy = ["--host", args.host, "--port", str(args.port), "--model", args.model_path]
    if args.random_seed is not None:
        toy += ["--seed", str(args.random_seed)]
    if args.context_length is not None:
        toy += ["--max-model-len", str(args.context_length)]
    server.log.addHandler(_Ready())
    server.main(toy + rest)


if __name__ == "__main__":
    main()
'''

VLLM_CLI = '''\
"""vllm serve MODEL [flags]: vLLM's command line over the toy engine."""
import argparse
import logging
import sys

from toyengine import server


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "serve":
        sys.exit("usage: vllm serve MODEL [options]")
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("model")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    args, rest = p.parse_known_args(argv[1:])
    print("INFO vLLM API server version 0.99.0", flush=True)
    server.main(["--host", args.host, "--port", str(args.port), "--model", args.model, *rest])


if __name__ == "__main__":
    main()
'''


def _init(repo: Path, package: Path, files: dict[str, str]) -> None:
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(TEMPLATE / "toyengine", package / "toyengine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "CHANGES.txt").write_text("changes\n")


def sglang_history(repo: Path, commits: list[Commit]) -> list[str]:
    """A stand-in SGLang checkout at `repo` with these commits (changes of history.CHANGES, under python/)."""
    _init(repo, repo / "python", {"python/pyproject.toml": _pyproject("sglang"), "python/sglang/__init__.py": "",
                                  "python/sglang/launch_server.py": LAUNCH_SERVER})
    return [commit(repo, c, n, lambda r, change, k: apply_change(r / "python", change, k))
            for n, c in enumerate(commits)]


def vllm_history(repo: Path, commits: list[Commit]) -> list[str]:
    """A stand-in vLLM checkout at `repo` with these commits (changes of history.CHANGES, at the top)."""
    pyproject = _pyproject("vllm", '[project.scripts]\nvllm = "vllm.cli:main"\n\n')
    _init(repo, repo, {"pyproject.toml": pyproject, "vllm/__init__.py": "", "vllm/cli.py": VLLM_CLI})
    return [commit(repo, c, n) for n, c in enumerate(commits)]


PLANTED = 3  # the commit whose lm_head loses its scale: from it on the model loops
HISTORY = [Commit("Initial engine", tag="v0.1"), Commit("Housekeeping 1"), Commit("Housekeeping 2"),
           Commit("Refactor quantisation dispatch to linear layers only (#17)", "break_scale"),
           Commit("Housekeeping 4"), Commit("Housekeeping 5")]
