"""The built-in demo (README, "Demo")."""
