"""The `probe:` section of a recipe: a kernel inside the engine checkout, how to call it, a sweep and the device
classes it must fit (abbisect/gpu/kernel_probe.py runs it). Validated with the rest of the recipe."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from abbisect.recipe.devices import device_class


class _ProbeModel(BaseModel):
    """An unknown key is an error and a value frozen once validated (no bound on a string's length)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ViewSpec(_ProbeModel):
    of: str  # `name` of an earlier tensor argument
    narrow: tuple[int, int, int]  # (dim, start, length), as torch.Tensor.narrow


class TensorSpec(_ProbeModel):
    """A tensor argument; strings may use ${sweep_key} (e.g. dtype: "${kv_dtype}")."""

    tensor: list[int | str] | None = None  # shape
    dtype: str | None = None  # torch dtype name: bfloat16, float8_e4m3fn, int32, ...
    fill: str | float = "auto"  # auto (randn for floats, zeros for ints), randn, zeros, arange, or a number
    name: str | None = None
    view: ViewSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TensorSpec:
        if (self.tensor is None) == (self.view is None):
            raise ValueError("a tensor argument needs exactly one of `tensor` (a shape) or `view`")
        if self.tensor is not None and not self.dtype:
            raise ValueError("a tensor argument needs a dtype")
        return self


Arg = TensorSpec | bool | int | float | str | None
Scalar = bool | int | float | str | None  # a YAML scalar: what sweeps, constexprs and shims hold
ShimValue = Scalar | dict[str, Scalar]  # an attribute's value, or an object's {"method()": value}


class BadIf(_ProbeModel):
    not_fits: list[str] = []  # device classes the kernel must fit
    when: dict[str, list[Scalar]] = {}  # only rows whose sweep values are among these
    # launcher_default: judge only combinations where the swept options equal what the launcher itself
    # chose (the configuration users actually run); all: every row
    scope: Literal["launcher_default", "all"] = "launcher_default"
    on_error: bool = False  # a compile/launch error in scope counts as bad (else it is reported only)


class ProbeConfig(_ProbeModel):
    file: str  # path of the kernel's module inside the engine checkout
    module: str | None = None  # import by this dotted name instead of loading `file` (engine installed)
    kernel: str
    launcher: str | None = None  # function in the same module that launches `kernel`
    args: list[Arg] = []  # the launcher's positional arguments (the kernel's, without a launcher)
    kwargs: dict[str, Arg] = {}
    grid: list[int] | None = None  # needed without a launcher
    constexprs: dict[str, Scalar] = {}  # fixed overrides of the launch: tile constexprs, num_warps, ...
    sweep: dict[str, list[Scalar]] = {}  # kernel kwargs/options to override, or ${vars} for args; "launcher"
    targets: list[str]
    mode: Literal["compile", "launch", "both"] = "both"
    bad_if: BadIf = BadIf()
    # modules replaced before loading `file`: {"pkg.mod": {"attr": value, "obj": {"method()": value}}};
    # "@module:x.y" imports the real module x.y
    shims: dict[str, dict[str, ShimValue]] = {}
    timeout_s: float = 1800.0

    @model_validator(mode="after")
    def _check(self) -> ProbeConfig:
        if self.launcher is None and self.grid is None:
            raise ValueError("without a launcher, give the kernel's grid")
        for t in [*self.targets, *self.bad_if.not_fits]:
            device_class(t)
        if not self.targets:
            raise ValueError("targets: name at least one device class")
        return self
