"""Normalizations, softmax, losses and reductions, and their gradients."""

from __future__ import annotations
