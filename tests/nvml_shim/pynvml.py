"""`import pynvml` in a CLI subprocess of a test (its folder first on PYTHONPATH): NVML answers from the tape
ABBISECT_TEST_NVML_TAPE names, scenario ABBISECT_TEST_NVML_SCENARIO (default "idle"). Each call's name is
appended to ABBISECT_TEST_NVML_LOG when set, so a test can tell that NVML was never asked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nvml_recorded import RecordedNvml

_nvml = RecordedNvml(json.loads(Path(os.environ["ABBISECT_TEST_NVML_TAPE"]).read_text()),
                     os.environ.get("ABBISECT_TEST_NVML_SCENARIO", "idle"))


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    log = os.environ.get("ABBISECT_TEST_NVML_LOG")
    if log and name.startswith("nvml"):
        with open(log, "a") as fh:
            fh.write(name + "\n")
    return getattr(_nvml, name)
