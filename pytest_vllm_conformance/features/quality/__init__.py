"""The quality suite's room: lm-eval runs against a target and its baseline, and the paired gate.

``runner`` drives lm-eval's own API backends (``lm_eval_backends``) offline
(``offline``) over tasks shipped in ``tasks/`` (``task_files``) or generated
to a context length (``long_context``); ``greedy`` compares temperature-0
tokens; ``paired`` is the statistics; ``baseline_file`` stores a run;
``session`` ties one run together for the suite. lm-eval is imported only
when an eval runs, so the plugin works without the ``quality`` extra.
"""
