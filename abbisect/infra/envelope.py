"""The one shape of every `--json` output: a versioned envelope around the command's data.

`{"schema": "abbisect/<kind>/v1", "abbisect": "<version>", "command": "<kind>", "data": {...}}` — a consumer
checks `schema` before reading `data`; a change that removes or renames a key in `data` bumps the version.
"""

from __future__ import annotations

import json
from typing import Any

from abbisect import __version__

SCHEMA_VERSION = 1


def envelope(command: str, data: Any) -> dict[str, Any]:
    return {"schema": f"abbisect/{command}/v{SCHEMA_VERSION}", "abbisect": __version__, "command": command,
            "data": data}


def dumps(command: str, data: Any, indent: int | None = None) -> str:
    return json.dumps(envelope(command, data), default=str, indent=indent)
