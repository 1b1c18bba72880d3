"""Bisection: a pure search (`search`) over candidates read from git (`history`)."""
