"""The serving matrix: every verified cell of model × engine@commit × GPU stack, gathered from result folders.

`cells` builds cells from loaded JSON (pure); `loader` finds and reads the folders; `markdown`, `html` and
`plots` render; the `abbisect matrix` command (abbisect/commands/matrix.py) writes the files.
"""
