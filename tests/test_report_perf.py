"""The performance report's pieces (abbisect/report/perf.py) on trials as the pipeline makes them: the failed
requests in every table, and the warning of a busy host. Pure: no process, no server."""

from __future__ import annotations

from dataclasses import replace

from test_assess import ERROR_EVENT, PERF, perf_trial, recipe

from abbisect.assess.perf import pass_errors
from abbisect.query.measure import Conditions
from abbisect.recipe.perf import Perf
from abbisect.report.perf import along_bisect, busy_host, metric_table, perf_section, told


def _conditions(trial, **conditions):
    """The trial with every perf pass recorded under `conditions`."""
    perf = trial.extras.perf
    passes = tuple(replace(p, conditions=Conditions(**conditions)) for p in perf.passes)
    return replace(trial, extras=replace(trial.extras, perf=replace(perf, passes=passes)))


def _loaded(trial, load1: float, cores: int):
    return _conditions(trial, load1=load1, cores=cores, cpu_mhz=2000.0)


def test_every_perf_table_says_the_failed_requests_per_pass_and_the_first_error():
    rec = recipe(perf=PERF)
    perf = Perf.model_validate(PERF)
    good = [perf_trial(rec, "good", 0, [None] * 8)]
    half = [perf_trial(rec, "half", 0, [None, None] + [ERROR_EVENT] * 6)]
    table = metric_table(perf, good, half)
    assert "| failed requests (measured, of all passes) | 0 of 24 in 3 passes | 18 of 24 in 3 passes (per pass: " \
           "6, 6, 6; 3 failed) |" in table, table
    assert "First failed request: B: error in stream: " in table
    assert "| **output_throughput**" not in table  # a side with no measured pass has no value to compare
    chart = along_bisect(perf, [("old", "a" * 40, "good", good), ("new", "b" * 40, "bad", half)])
    first, second = chart.splitlines()
    assert first.startswith("aaaaaaaaaa old        good  █ ") and "failed requests" not in first
    assert second.startswith("bbbbbbbbbb new        bad   not measured:") and "failed requests 18 of 24" in second
    assert told("output_throughput", [], pass_errors(half)).startswith(
        "output_throughput not measured; failed requests: 18 of 24 in 3 passes")


def test_a_busy_host_is_said_first_in_the_performance_section():
    """A performance report measured at load 10–15 on 2 cores warns of the busy host, first."""
    rec = recipe(perf=PERF)
    perf = Perf.model_validate(PERF)
    quiet = [_loaded(perf_trial(rec, "a", 0, [None] * 8), 1.5, 2)]
    busy = [_loaded(perf_trial(rec, "b", 0, [None] * 8), 12.4, 2)]
    assert busy_host(quiet) == ""
    said = busy_host([*quiet, *busy])
    assert said.startswith("⚠ Busy host: the load average reached 12.4 on 2 core(s) (6.2 per core) during the passes")
    section = perf_section(perf, quiet, busy, False, "### Performance")
    assert section[2] == said and "| B | 3 | 12.4–12.4 on 2 cores |" in "\n".join(section)
    old = [_conditions(perf_trial(rec, "a", 0, [None] * 8), load1=14.0)]  # before the core count: nothing to say
    assert busy_host(old) == ""


def test_the_matrix_cell_of_a_perf_trial_says_its_failed_requests():
    from abbisect.infra.serial import dump
    from abbisect.matrix.cells import perf_of

    rec = recipe(perf=PERF)
    half = dump(perf_trial(rec, "half", 0, [None, None] + [ERROR_EVENT] * 6))
    said = perf_of(half, {"perf": PERF})
    assert said.startswith("output_throughput not measured; failed requests: 18 of 24 in 3 passes (per pass: 6, 6, 6;"
                           " 3 failed); first: error in stream: "), said
    fine = dump(perf_trial(rec, "fine", 0, [None] * 8))
    assert perf_of(fine, {"perf": PERF}) == "output_throughput 100 tok/s (median of 3 passes)"
