"""Convolutions, batch normalization and pooling, and their gradients."""

from __future__ import annotations
