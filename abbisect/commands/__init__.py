"""One module per `abbisect` command, each holding a click command of its own name (`run.run`, ...).

`abbisect.cli` finds them by name (its COMMANDS) and imports one only when it is used; a command never imports
`abbisect.cli`: `options` holds the options several commands share, `endings` the exit-code table they end on. A command parses, calls the pipeline and prints; the work is elsewhere.
"""
