"""Stage 7 — report: pure renderers (markdown) and the one place that writes result folders."""
