"""Load generation for ``phasescope bench``: when requests go, what they ask, who sends them, what it means.

Modules: :mod:`.schedule` (arrival plans as data: Poisson/gamma, constant, ramp, trace, closed loop),
:mod:`.workload` and :mod:`phasescope.prompting` (prompts of exact token lengths through the server's tokenizer;
ShareGPT and JSONL files), :mod:`.runner` (the asyncio runner, its health monitor and warnings),
:mod:`.workers` (``--workers N`` processes), :mod:`.summary` (``summarize(records)`` with
``vllm bench serve`` keys), :mod:`.server_metrics` (``/metrics`` timeline during a run),
:mod:`.sweep` (saturation sweep and knee), :mod:`.bench` (``run_bench(BenchConfig)``, the whole run:
config → :mod:`.datasets` (one workload per ``--dataset``, chosen once) × :mod:`.drivers` (one process,
``--workers``, Ray, conversations, chosen once) → summary), :mod:`.progress` (live counts for the progress bar).
"""
