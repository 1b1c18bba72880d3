"""Eval sets shipped with abbisect: prompts with exact answers (`arith_facts.jsonl`, made by `make_arith_facts`)."""
