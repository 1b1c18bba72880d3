"""One module per `abbisect` command, each holding a click command of its own name (`run.run`, ...).

`abbisect.cli` finds them by name (its COMMANDS) and imports one only when it is used; `options` holds the
options several commands share. A command parses, calls the pipeline and prints; the work is elsewhere.
"""
