"""What runs inside the isolated child: the harness (harness.py), its training variant (training.py), the audit
hook that guards both (audit.py); `python -m sandbox.child` (__main__.py) is the entry point."""
