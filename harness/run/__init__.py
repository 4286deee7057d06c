"""The run: what each request asks and when it is sent (prompts, workload, modes, levels), and
a run end to end with its progress and writes kept off the clock."""
