"""Narrative language (placeholder until the catalog lands): `tr(template, **values)` formats the
English template."""
from __future__ import annotations


def tr(template: str, **values) -> str:
    return template.format(**values) if values else template
