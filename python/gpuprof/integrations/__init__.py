"""Adapters for the places people already run training: a Hugging Face ``Trainer`` callback
(``hf``), a Lightning profiler and callback (``lightning``), the ``%%gpuprof`` Jupyter cell magic
(``jupyter``); ``_span`` is what the trainer adapters share. Each imports its host library only
when used: none is a dependency of gpuprof (docs/integrations.md)."""
