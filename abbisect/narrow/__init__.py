"""`abbisect narrow`: at one commit, which part of a failing launch is to blame, and how to serve today.

Two ways, each probe one trial of the recipe's verdict (the trial pipeline, its cache, its hygiene):

- between two launches (`deltas.py`, `ddmin.py`): a failing launch and a passing one differ in options,
  environment variables and pins; delta debugging (Zeller's ddmin) finds a smallest set of those differences
  that still fails;
- over feature switches (abbisect/launch/switches.py's catalogue, filtered by the commit's own `--help`):
  each switch that turns a feature off or swaps its implementation is tried on the failing launch; the ones
  that make the failure go away are the workarounds, the narrowest first.

`driver.py` runs the probes (at once on free slots), `narrowing.py` holds what they found.
"""
