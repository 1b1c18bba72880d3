"""One commit through the stages: what a trial is (`spec.py`), the pipeline that runs it (`pipeline.py`), its
cache (`trial_cache.py`), where trials run (`slots.py` the vocabulary, `executors.py` this machine's slots,
`cluster.py` Ray tasks on a cluster, `remote.py` what crosses between machines that share no folder),
verdicts from outside the rules (`judges.py`), the dry run of a trial, its plan before it runs (`dryrun.py`)
and the kernel-probe trial (`probe_trial.py`).

`python -m abbisect.trial SPEC.json` runs one trial anywhere abbisect is installed (see `__main__.py`)."""
