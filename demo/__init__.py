"""The built-in demo's foundations: a procedurally drawn dataset of coloured shapes and tiny pretrained CLIPs."""
