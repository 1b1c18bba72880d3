"""The machinery under every stage: the error tree, git and process doors, the cache and its locks, capped
logs, the supervisor that keeps servers from outliving abbisect, progress lines, masking and serialisation.

Nothing here knows about recipes, trials or engines (tests/test_layers.py holds that).
"""
