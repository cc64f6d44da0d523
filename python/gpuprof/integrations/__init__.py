"""Adapters for the places people already run training: the ``%%gpuprof`` Jupyter cell magic
(``jupyter``). Each imports its host library only when used: none is a dependency of gpuprof."""
