"""What the prompt learners share: the frozen CLIP backbone (``backbone``), scoring any class list (``scoring``),
hand-crafted templates, deep vision-language prompts and their checkpoints (``deep_prompts``, ``prompt_files``,
``upstream_prompts``), loading a learner's state, and a finished run's record (``tuned_run``)."""
