"""GPU-side facts for trials: environment fingerprints, same-GPU hygiene and Triton kernel probes.

Everything here must import without torch, triton or a GPU: the heavy parts run in standalone worker
scripts under the per-commit venv's interpreter.
"""
