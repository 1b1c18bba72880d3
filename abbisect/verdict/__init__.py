"""Stage 6 — verdict: every signal of one side folded into a status (the statuses, each kind of ending and what
abbisect keeps about it, are the recipe's vocabulary: abbisect/recipe/status.py), and the status into good / bad /
skip by the recipe's rules (`rules.py`)."""
