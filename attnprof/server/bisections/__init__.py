"""Bisections: which commit of an alert's step (or of a requested range) made it, found with paired probe jobs and
confirmed before anyone is told (docs/bisection.md)."""
