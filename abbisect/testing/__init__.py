"""What the tests and the benchmarks stand in with, at the bisect's seam: a history in memory (`fakes.py`) and a
simulated trial runner over it (`seam.py`), so the real driver, oracle, searches and confirmation run with no git,
no venv and no server. Nothing else in the package imports it."""
