"""Slots that share a GPU, as recipes and --gpus write them (abbisect/recipe/gpus.py), the share each engine's
server is given, and what the trial cache does with a share (it is not in the key)."""

from __future__ import annotations

import json

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.infra.errors import UserError
from abbisect.launch.engines import adapter
from abbisect.recipe import parse_recipe
from abbisect.recipe.gpus import default_share, parse_gpu_option, slots_share_a_gpu

BASE = {"name": "x", "engine": {"kind": "command", "repo": "."}, "launch": {"command": ["{python}", "s.py"]},
        "prompts": ["p"]}


def _recipe(**over):
    return parse_recipe({**BASE, **over})


@pytest.mark.parametrize(("gpus", "slots", "share"), [
    ([0], [], None),
    ([[0], [1]], [[0], [1]], None),
    ({"count": 8, "per_trial": 2}, [[0, 1], [2, 3], [4, 5], [6, 7]], None),
    ({"count": 1, "per_gpu": 4}, [[0], [0], [0], [0]], 0.22),
    ({"count": 1, "per_gpu": 4, "share": 0.2}, [[0], [0], [0], [0]], 0.2),
    ({"count": 2, "per_gpu": 3}, [[0], [0], [0], [1], [1], [1]], 0.3),
    ({"count": 2, "per_trial": 2, "per_gpu": 2}, [[0, 1], [0, 1]], 0.45),
    ({"count": 1, "share": 0.5}, [[0]], 0.5),  # one slot keeping half the GPU for something else
])
def test_recipe_forms(gpus, slots, share):
    r = _recipe(gpus=gpus)
    assert r.gpu_slots == slots and r.gpu_share == share
    assert r.shares_gpus is (len(slots) > len({tuple(s) for s in slots}))


@pytest.mark.parametrize(("gpus", "line"), [
    ({"count": 1, "per_gpu": 4, "share": 0.3}, ("gpus.share 0.3 × gpus.per_gpu 4 = 1.20: the 4 slots on one GPU would "
                                                "need more than the whole GPU (at most 0.25 each)")),
    ({"count": 1, "per_gpu": 0}, "gpus.per_gpu: Input should be greater than or equal to 1"),
    ({"count": 1, "share": 1.5}, "gpus.share: Input should be less than or equal to 1"),
    ({"count": 1, "per_gpus": 2}, "gpus.per_gpus: unknown key (gpus takes count, per_trial, per_gpu, share)"),
    ({"count": 64, "per_gpu": 2}, "gpus: 128 slots; at most 64"),
    ([[0], [0]], ("gpus: each GPU in one slot only (to share a GPU between slots: gpus: {count: 1, per_gpu: 4} or "
                  "--gpus 0x4)")),
])
def test_recipe_errors_are_one_line_naming_the_key(gpus, line):
    with pytest.raises(UserError) as err:
        _recipe(gpus=gpus)
    assert line in str(err.value) and "\n" not in str(err.value)


def test_gpus_option():
    assert parse_gpu_option("0,1,2,3").slots == ((0,), (1,), (2,), (3,))
    assert parse_gpu_option("0x4") == parse_gpu_option("0x4@0.22")
    assert parse_gpu_option("0x4,1x4").slots == ((0,),) * 4 + ((1,),) * 4
    assert parse_gpu_option("0+1x2").slots == ((0, 1), (0, 1)) and parse_gpu_option("0+1x2").share == 0.45
    assert parse_gpu_option("3x2@0.4").as_recipe() == {"gpus": [3], "gpu_slots": [[3], [3]], "gpu_share": 0.4}
    assert parse_gpu_option("0+1,2+3").share is None  # whole GPUs: the engines' own defaults
    for bad, says in (("0,0", "one slot only"), ("0x2,0", "one slot only"), ("0x4@0.3", "= 1.20"),
                      ("0x0", "xN for N slots"), ("0@2", "at most 1"), ("x", "give GPU numbers")):
        with pytest.raises(UserError, match=says):
            parse_gpu_option(bad)
    assert [default_share(k) for k in (2, 3, 4, 8)] == [0.45, 0.3, 0.22, 0.11]


def test_slots_share_a_gpu():
    """What a performance verdict asks before it trusts a timing."""
    assert slots_share_a_gpu([[0], [0]]) and slots_share_a_gpu([[0, 1], [1, 2]])
    assert not slots_share_a_gpu([[0], [1]]) and not slots_share_a_gpu([[0, 1]]) and not slots_share_a_gpu([])


@pytest.mark.parametrize(("kind", "flag"), [("vllm", "--gpu-memory-utilization"), ("sglang", "--mem-fraction-static")])
def test_each_engine_gets_its_share_through_its_own_flag(kind, flag):
    shared = _recipe(engine={"kind": kind, "repo": "."}, model="m", gpus={"count": 1, "per_gpu": 4},
                     launch={"flags": ["--max-model-len", "512"]})
    argv = adapter(kind).plan(shared, "py", "m", "127.0.0.1", 8000).argv
    assert argv[argv.index(flag) + 1] == "0.22" and argv[-2:] == ("--max-model-len", "512")
    alone = _recipe(engine={"kind": kind, "repo": "."}, model="m", gpus=[0])
    assert flag not in adapter(kind).plan(alone, "py", "m", "127.0.0.1", 8000).argv  # the engine's default


def test_the_command_engine_fills_its_placeholder():
    over = {"launch": {"command": ["{python}", "s.py", "--mem", "{gpu_share}"], "flags": ["--frac={gpu_share}"]}}
    shared = _recipe(gpus={"count": 1, "per_gpu": 3}, **over)
    assert adapter("command").plan(shared, "py", None, "h", 1).argv == ("py", "s.py", "--mem", "0.3", "--frac=0.3")
    whole = _recipe(gpus=[0], **over)
    assert adapter("command").plan(whole, "py", None, "h", 1).argv == ("py", "s.py", "--mem", "1", "--frac=1")


@pytest.mark.e2e
def test_a_bad_result_is_reused_only_from_a_share_at_least_as_large(tmp_path, engine_repo, cache_dir):
    """The share is not in the trial key: a crash at 0.45 of a GPU may be the share's doing, so a run on the
    whole GPU tries again; what it finds there stands for a run at 0.45. A good result at 0.45 stands for the
    whole GPU (the commit is fine with less)."""
    runs = []
    env = {"ABBISECT_GPU_COUNT": "1"}  # this CPU machine runs the toy engine with GPU 0 pinned
    plan = [("crash", {"count": 1, "per_gpu": 2}), ("crash", [0]), ("crash", {"count": 1, "per_gpu": 2}),
            ("healthy0", {"count": 1, "per_gpu": 2}), ("healthy0", [0])]
    for n, (ref, gpus) in enumerate(plan):
        data = toy_recipe(engine_repo, sides={"a": ref, "b": ref}, gpus=gpus,
                          env={"ABBISECT_TEST_FINGERPRINT": str(tmp_path)})
        recipe = write_recipe(tmp_path / f"r{n}.yaml", data)
        proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"o{n}"), "--json", cwd=tmp_path, cache=cache_dir,
                        env=env)
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)["data"]
        runs.append([(res[s]["verdict"]["status"], res[s]["cached"]) for s in "ab"])
    assert runs[0] == [("crashed_at_startup", False), ("crashed_at_startup", True)]  # B: A's result, same share
    assert runs[1] == [("crashed_at_startup", False), ("crashed_at_startup", True)]  # the whole GPU: run again
    assert runs[2] == [("crashed_at_startup", True), ("crashed_at_startup", True)]  # from the whole GPU: it stands
    assert runs[3] == [("ok", False), ("ok", True)]
    assert runs[4] == [("ok", True), ("ok", True)]  # good with less: good with the whole GPU
