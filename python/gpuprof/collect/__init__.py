"""Collect: the live side. A profiling session (``session``) over a ``schedule``, the LibTorch
operator hooks (``hooks``: loaded, or compiled once per torch build), CUDA collection (``gpu``:
CUPTI, NVML, NVTX), DataLoader settings (``dataloader``), user ranges (``ranges``), steps from
``optimizer.step()`` (``autostep``) and the end-of-span exchange between ranks (``exchange``).
What it produces is a native ``Trace``; ``session`` hands it to the report builder."""
