"""The built-in demo (README, "Demo"; docs/demo.md)."""
