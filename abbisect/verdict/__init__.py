"""Stage 6 — verdict: every signal of one side folded into a status (`status.py`: each kind of ending and what
abbisect keeps about it), and the status into good / bad / skip by the recipe's rules (`rules.py`)."""
