"""The demo: a real small training loop, profiled, its breakdown printed, a report written.

    python -m gpuprof.demo [--dir gpuprof_demo] [--steps 12] [--workers N]

On first run it writes a small CIFAR-like data set as individual PNG files (the many-small-files
layout that starves GPUs), then trains a small CNN on it, on the GPU when there is one, profiled
with a schedule. Run once as most tutorials write it (num_workers=0), print the report, which stage
of the input pipeline dominates (decoding the PNG or transforming it) and the worker count Little's
law gives, and the top recommendation; then time both settings (as written, and as the advice says)
alternately over several rounds and print the median step time of each with its range, beside the
law's count: a speed-up is claimed only when every round of one setting beat every round of the
other, else the difference is said to be within noise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CLASSES = 10
IMAGE_SIZE = 32


def make_dataset(root: Path, per_class: int = 160, seed: int = 0) -> int:
    """Write `per_class` PNGs per class: a class-coloured shape on noise, so the CNN can learn."""
    import numpy as np
    from PIL import Image

    marker = root / ".complete"
    if marker.exists():
        return sum(1 for _ in root.glob("*/*.png"))
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:IMAGE_SIZE, :IMAGE_SIZE]
    n = 0
    for c in range(CLASSES):
        d = root / f"class_{c}"
        d.mkdir(parents=True, exist_ok=True)
        colour = np.array([(37 * c) % 256, (91 * c + 60) % 256, (153 * c + 120) % 256], dtype=np.float32)
        for i in range(per_class):
            img = rng.normal(110, 40, (IMAGE_SIZE, IMAGE_SIZE, 3))
            cx, cy, r = rng.integers(8, 24), rng.integers(8, 24), 4 + c % 5
            shape = (
                (xx - cx) ** 2 + (yy - cy) ** 2 < r * r if c % 2 else (abs(xx - cx) < r) & (abs(yy - cy) < r)
            )
            img[shape] = colour
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(d / f"{i:05d}.png")
            n += 1
    marker.touch()
    return n


class FlipNormalize:
    """RandomHorizontalFlip + Normalize on a decoded image tensor, as a torchvision transform."""

    def __call__(self, x):
        import torch

        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return (x - 0.45) / 0.25


class PngFolder:
    """Decodes one PNG per sample, then flips and normalises it on the CPU with its ``transform``:
    what torchvision's ImageFolder(transform=Compose([ToTensor(), RandomHorizontalFlip(),
    Normalize(...)])) does. The transform is an attribute of the data set, as torchvision's are, so
    gpuprof times decoding and transforming apart."""

    def __init__(self, root: Path) -> None:
        self.files = sorted(root.glob("*/*.png"))
        if not self.files:
            raise FileNotFoundError(f"no PNG files under {root}")
        self.transform = FlipNormalize()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import numpy as np
        import torch
        from PIL import Image

        path = self.files[i]
        with Image.open(path) as im:
            x = torch.from_numpy(np.asarray(im.convert("RGB"), dtype=np.float32)).permute(2, 0, 1) / 255.0
        return self.transform(x), int(path.parent.name.split("_")[1])


def make_model(width: int = 32):
    import torch.nn as nn

    w = width

    def block(cin, cout):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
        )

    return nn.Sequential(
        block(3, w),
        block(w, w),
        nn.MaxPool2d(2),
        block(w, 2 * w),
        nn.MaxPool2d(2),
        block(2 * w, 4 * w),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * w, CLASSES),
    )


def train(
    data: Path,
    *,
    num_workers: int,
    steps: int,
    batch_size: int,
    device: str,
    loader_settings: dict | None = None,
):
    """One profiled run; returns the Report of its recorded span and the final loss.

    ``loader_settings`` (DataLoader keyword arguments, e.g. an advice's ``change``) override the
    defaults below."""
    import torch
    from torch.utils.data import DataLoader

    import gpuprof

    torch.manual_seed(0)
    # Narrower on a CPU, so that the demo stays a couple of minutes on a laptop or a login node.
    model = make_model(32 if device == "cuda" else 16).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    pin = device == "cuda"
    kwargs = {"num_workers": num_workers, "pin_memory": pin, "persistent_workers": num_workers > 0}
    kwargs.update(loader_settings or {})
    loader = DataLoader(PngFolder(data), batch_size=batch_size, shuffle=True, **kwargs)
    # 2 idle steps (worker start-up), 2 warm-up steps (first-call costs), then the recorded ones.
    sched = gpuprof.schedule(wait=2, warmup=2, active=steps, repeat=1)
    loss = None
    with gpuprof.profile(schedule=sched) as prof:
        done = 0
        while done < steps + 4:
            for x, y in loader:
                x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
                with gpuprof.range("forward+loss"):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                prof.step()
                done += 1
                if done >= steps + 4:
                    break
    return prof.report(), float(loss.detach())  # (a scalar from a tensor that needs grad warns on torch 2.13)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def compare(before_ms: list[float], after_ms: list[float], *, what: str = "rounds") -> dict:
    """What the timings of two settings (one mean step time per round, in ms) show, as a verdict.

    The medians and ranges are always given. A difference is claimed (``"faster"`` or ``"slower"``)
    only when the ranges do not overlap: every round of one setting beat every round of the other,
    with at least two rounds each. Otherwise the verdict is ``"noise"``: the rounds disagree, so the
    difference is within what the machine's own variation makes. A pure function, so that the claim
    logic can be checked with made-up timings. ``what`` names the samples in the text ("rounds",
    "steps")."""
    if not before_ms or not after_ms:
        raise ValueError("compare needs at least one timing of each setting")
    mb, ma = median(before_ms), median(after_ms)
    rounds = min(len(before_ms), len(after_ms))
    if rounds >= 2 and max(after_ms) < min(before_ms):
        verdict = "faster"
    elif rounds >= 2 and min(after_ms) > max(before_ms):
        verdict = "slower"
    else:
        verdict = "noise"
    ratio = mb / ma if ma > 0 else float("inf")

    def span(xs: list[float]) -> str:
        return f"{median(xs):.1f} ms (range {min(xs):.1f}-{max(xs):.1f}, {len(xs)} {what})"

    head = f"median step time {span(before_ms)} -> {span(after_ms)}"
    if verdict == "faster":
        text = f"{head}: {ratio:.2f}x faster, every one of the {what}"
    elif verdict == "slower":
        text = f"{head}: {1 / ratio:.2f}x slower, every one of the {what}"
    elif rounds < 2:
        text = f"{head}: one of each, too few to tell a difference from noise"
    else:
        text = f"{head}: the ranges overlap, the difference is within noise (no speed-up claimed)"
    return {"verdict": verdict, "before_ms": mb, "after_ms": ma, "ratio": ratio, "text": text}


# What the demo calls each stage of its input pipeline (input_pipeline's keys).
STAGE_WORDS = {"fetch": "decoding the PNG", "transform": "flipping and normalising", "collate": "collating"}


def pipeline_lines(report) -> list[str]:
    """What the report measured inside the DataLoader: each stage of a batch and which dominates,
    and Little's law's worker count with its arithmetic; [] when nothing was measured."""
    ip = report.data.get("input_pipeline")
    law = (ip or {}).get("law") or {}
    batch = (ip or {}).get("batch_us")
    if not ip or not batch or not isinstance(law.get("t_batch_us"), (int, float)):
        return []
    where = "in the training process" if ip.get("process") == "main" else "in a worker"
    parts = []
    for key, name in (("fetch", "decode"), ("transform", "transform"), ("collate", "collate")):
        s = ip.get(f"{key}_us")
        if s:
            parts.append(f"{name} {s['mean'] / 1000:.1f} ms ({100 * s['mean'] / batch['mean']:.0f}%)")
    lines = [
        f"Input pipeline: a batch takes {batch['mean'] / 1000:.1f} ms to make {where}: "
        + ", ".join(parts)
        + (f"; {STAGE_WORDS[ip['stage']]} dominates" if ip.get("stage") in STAGE_WORDS else "")
    ]
    law_line = (
        f"Little's law: T_batch {law['t_batch_us'] / 1000:.1f} ms / T_step {law['t_step_us'] / 1000:.1f} ms "
        f"(the step's own work) -> N = {law['workers_needed']} "
        + ("worker keeps up" if law["workers_needed"] == 1 else "workers keep up")
    )
    if isinstance(law.get("cpu_limit"), int):
        law_line += (
            f"; {law['cpu_budget']:g} CPUs less {law['training_cpus']:g} for training"
            + (
                f" and {law['other_cpus_subtracted']:g} that other processes kept busy"
                if isinstance(law.get("other_cpus_subtracted"), (int, float))
                else ""
            )
            + " fit "
            f"{law['cpu_limit']} at {100 * law['worker_cpu_share']:.0f}% of a CPU each"
        )
    lines.append(law_line + f": num_workers={ip['recommended_num_workers']}")
    return lines


def demo_threads(device: str, cpus: int) -> int:
    """Intra-op threads for the demo on a CPU: half the CPUs (at most 4), so that DataLoader workers
    have CPUs of their own to decode on; with all CPUs taken by the model, workers only contend
    with it and the advice's effect cannot show (a 2-CPU machine: 1 thread)."""
    return max(1, min(4, cpus // 2)) if device == "cpu" else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuprof.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="gpuprof_demo", help="where the data set and reports go")
    p.add_argument("--steps", type=int, default=12, help="recorded steps per run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--rounds", type=int, default=3, help="timed rounds of each setting, alternated (default %(default)s)"
    )
    p.add_argument("--images-per-class", type=int, default=160, help=argparse.SUPPRESS)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="num_workers of the second run (default: what run 1's advice says)",
    )
    args = p.parse_args(argv)

    import torch

    from gpuprof._host import cpus_available

    out = Path(args.dir)
    t0 = time.perf_counter()
    n = make_dataset(out / "data", per_class=args.images_per_class)
    print(f"data set: {n} PNG files under {out / 'data'} ({time.perf_counter() - t0:.1f} s)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = demo_threads(device, cpus_available())
    if threads:
        torch.set_num_threads(threads)
    print(
        f"training a small CNN on the {device.upper()}, batch {args.batch_size}"
        + (f", {threads} intra-op thread(s) of {cpus_available()} CPUs" if threads else "")
        + "\n"
    )

    before, loss0 = train(
        out / "data", num_workers=0, steps=args.steps, batch_size=args.batch_size, device=device
    )
    print("Run 1: DataLoader(num_workers=0), as most tutorials write it")
    print(before)
    for line in pipeline_lines(before):
        print(line)
    before.to_json(out / "run1_report.json")
    before.to_html(out / "run1_report.html")
    written = [out / "run1_report.json", out / "run1_report.html"]

    # Run 2 applies run 1's DataLoader advice: the settings come from the recommendation itself.
    top = before.advice[0] if before.advice else None
    if top is not None:
        print(
            f"\nTop recommendation [{top['rule']}]: {top['title']} (saves at most "
            f"{top['saving_bound_pct']:.0f}% of the step, confidence {top['confidence']})"
        )
        print(f"  evidence: {top['evidence']['summary']}\n  fix: {top['fix']}")
    dl_advice = next((a for a in before.advice if a["rule"] == "dataloader"), None)
    settings = dict((dl_advice or {}).get("change", {}).get("DataLoader", {}))
    if args.workers is not None:  # the user's own choice wins over the advice
        settings.update(num_workers=args.workers, persistent_workers=args.workers > 0)
    workers = int(settings.get("num_workers", 0))
    if not settings:
        print(
            "\nThe DataLoader advice for run 1 changes no setting: run 2 repeats its settings"
            if dl_advice
            else "\nNo DataLoader advice for run 1: run 2 repeats its settings"
        )
    shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "num_workers=0"
    how = "as the advice says" if dl_advice and args.workers is None else "as given"

    # The timing: both settings, alternated round by round so that a change in the machine's load
    # falls on both; one profiled run of each per round, its mean step time the round's number.
    # Rounded as printed, so that the claim follows from the numbers the rounds show.
    before_ms: list[float] = [round(before.average["total_us"] / 1000.0, 1)]
    after_ms: list[float] = []
    after = None
    rounds = max(1, args.rounds)
    for r in range(rounds):
        if r > 0:
            rep, _ = train(
                out / "data", num_workers=0, steps=args.steps, batch_size=args.batch_size, device=device
            )
            before_ms.append(round(rep.average["total_us"] / 1000.0, 1))
        after, loss1 = train(
            out / "data",
            num_workers=workers,
            steps=args.steps,
            batch_size=args.batch_size,
            device=device,
            loader_settings=settings,
        )
        after_ms.append(round(after.average["total_us"] / 1000.0, 1))
        print(f"round {r + 1}/{rounds}: num_workers=0 {before_ms[-1]:.1f} ms, {shown} {after_ms[-1]:.1f} ms")
    print(f"\nRun 2 (last round): DataLoader({shown}), {how}")
    print(after)
    after.to_json(out / "run2_report.json")
    after.to_html(out / "run2_report.html")
    written += [out / "run2_report.json", out / "run2_report.html"]

    result = compare(before_ms, after_ms)
    a = after.average
    b = before.average
    print(f"\nDataLoader(num_workers=0) -> DataLoader({shown}): {result['text']}")
    print(
        f"DataLoader share {b['dataloader_pct']:.1f}% -> {a['dataloader_pct']:.1f}% (run 1, last round); "
        f"loss {loss0:.3f} / {loss1:.3f}"
    )
    law = ((before.data.get("input_pipeline") or {}).get("law")) or {}
    waits = [(r.data.get("input_pipeline") or {}).get("wait_pct") for r in (before, after)]
    if law.get("workers_needed") and all(isinstance(w, (int, float)) for w in waits):
        n = law["workers_needed"]
        print(
            f"Little's law asked for {n} worker{'' if n == 1 else 's'}"
            + (f" (the CPUs fit {law['cpu_limit']})" if isinstance(law.get("cpu_limit"), int) else "")
            + f"; with num_workers={workers} the loop's wait went from {waits[0]:.1f}% to {waits[1]:.1f}% "
            "of the step (measured above)"
        )
    print("reports: " + ", ".join(str(w) for w in written))
    print(f"total demo time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
