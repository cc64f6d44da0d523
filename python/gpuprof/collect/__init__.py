"""Collect: the live side. The ``schedule``, the LibTorch operator hooks (``hooks``: loaded, or
compiled once per torch build), CUDA collection (``gpu``: CUPTI, NVML, NVTX), DataLoader settings
(``dataloader``), user ranges (``ranges``), steps from ``optimizer.step()`` (``autostep``) and the
end-of-span exchange between ranks (``exchange``). What it produces is a native ``Trace`` and its
context; the live session (``gpuprof.session``) hands them to the report builder. Imports no later
stage."""
