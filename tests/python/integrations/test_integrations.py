"""One line in the trainers people use: gpuprof.integrations.hf.GpuprofCallback for a Hugging Face
Trainer, gpuprof.integrations.lightning.GpuprofProfiler / GpuprofCallback for Lightning. Real
libraries on the CPU, small models built from configs, synthetic data (nothing from a hub).

What each test pins down: the steps gpuprof records are the trainer's optimizer steps (with
gradient accumulation, two micro-batches make one step: twice the forward passes per step), the
headline numbers reach the trainer's own logging, and the reports are written where `out` says.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402


def _needs(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"{', '.join(missing)} not installed (pip install -r .ci/requirements.txt)"
    )


def _calls(report, name: str) -> int:
    return sum(o["calls"] for o in report.operators if o["name"] == name)


# ---- Hugging Face Trainer ----------------------------------------------------------------------------
def _hf_train(tmp_path, accumulation: int, callbacks: list, steps: int = 6):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 4 * accumulation * steps

        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
        )
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulation,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        optim="adamw_torch",
    )
    Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks).train()


@_needs("transformers", "accelerate")
def test_hf_callback_records_optimizer_steps_logs_through_the_trainer_and_writes(tmp_path):
    from transformers import TrainerCallback

    from gpuprof.integrations.hf import GpuprofCallback

    class Seen(TrainerCallback):  # what every report_to logger receives from Trainer.log
        logs: list = []

        def on_log(self, args, state, control, logs=None, **kw):
            self.logs.append(dict(logs or {}))

    cb = GpuprofCallback(
        schedule=gpuprof.schedule(wait=1, warmup=1, active=3, repeat=1), out=tmp_path / "out"
    )
    seen = Seen()
    _hf_train(tmp_path, accumulation=2, callbacks=[cb, seen])
    (report,) = cb.reports
    assert [s["step"] for s in report.steps] == [2, 3, 4]
    # Each step is one optimizer step of two micro-batches: one AdamW step, two forward passes
    # (GPT-2 embeds tokens and positions: two aten::embedding calls per forward).
    optimizer = [r for r in report.ranges if r["name"].startswith("Optimizer.step#AdamW")]
    assert optimizer and optimizer[0]["calls"] == 3
    assert _calls(report, "aten::embedding") == 3 * 2 * 2
    logged = [entry for entry in seen.logs if "gpuprof/step_time_ms" in entry]
    assert len(logged) == 1 and logged[0]["gpuprof/steps"] == 3
    assert logged[0]["gpuprof/step_time_ms"] == pytest.approx(report.average["total_us"] / 1000, rel=1e-3)
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [s["step"] for s in written["steps"]] == [2, 3, 4]
    assert (tmp_path / "out" / "report.html").is_file() and (
        tmp_path / "out" / "report.trace.json.gz"
    ).is_file()


@_needs("transformers", "accelerate")
def test_hf_callback_without_accumulation_has_one_forward_per_step(tmp_path):
    from gpuprof.integrations.hf import GpuprofCallback

    cb = GpuprofCallback(schedule=gpuprof.schedule(wait=1, warmup=1, active=3, repeat=1), out=None, log=False)
    _hf_train(tmp_path, accumulation=1, callbacks=[cb])
    (report,) = cb.reports
    assert len(report.steps) == 3 and _calls(report, "aten::embedding") == 3 * 2
    assert cb.written == []


# ---- Lightning ---------------------------------------------------------------------------------------
def _lightning_fit(tmp_path, *, profiler=None, callbacks=(), accumulation=1, manual=False, steps=8):
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    torch.manual_seed(0)

    class MLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
            self.automatic_optimization = not manual

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            if manual:  # optimisation by hand: one optimizer step per batch
                opt = self.optimizers()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    batches = steps * accumulation
    data = torch.utils.data.TensorDataset(torch.randn(16 * batches, 32), torch.randn(16 * batches, 1))
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        accumulate_grad_batches=accumulation,
        logger=CSVLogger(str(tmp_path / "logs"), name="run"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
        callbacks=list(callbacks),
    )
    trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=16))
    return trainer


def _logged_metrics(trainer) -> list[dict]:
    import csv

    path = os.path.join(trainer.logger.log_dir, "metrics.csv")
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f)]


@_needs("lightning")
def test_lightning_profiler_steps_are_optimizer_steps_with_accumulation(tmp_path):
    from gpuprof.integrations.lightning import GpuprofProfiler

    prof = GpuprofProfiler(
        schedule=gpuprof.schedule(wait=1, warmup=1, active=3, repeat=1), out=tmp_path / "out"
    )
    trainer = _lightning_fit(tmp_path, profiler=prof, accumulation=2)
    (report,) = prof.reports
    assert [s["step"] for s in report.steps] == [2, 3, 4]
    # Two batches per optimizer step: two forward passes (two aten::linear each) per step.
    optimizer = [r for r in report.ranges if r["name"].startswith("Optimizer.step#SGD")]
    assert optimizer and optimizer[0]["calls"] == 3
    assert _calls(report, "aten::linear") == 3 * 2 * 2
    rows = [r for r in _logged_metrics(trainer) if r.get("gpuprof/step_time_ms")]
    assert len(rows) == 1 and float(rows[0]["gpuprof/steps"]) == 3
    assert (tmp_path / "out" / "report.json").is_file() and (tmp_path / "out" / "report.html").is_file()


@_needs("lightning")
def test_lightning_manual_optimisation_and_the_callback_form(tmp_path):
    from gpuprof.integrations.lightning import GpuprofCallback

    cb = GpuprofCallback(schedule=gpuprof.schedule(wait=1, warmup=1, active=3, repeat=1), out=None)
    trainer = _lightning_fit(tmp_path, callbacks=[cb], manual=True)
    (report,) = cb.reports
    assert [s["step"] for s in report.steps] == [2, 3, 4]
    assert _calls(report, "aten::linear") == 3 * 2
    assert [r for r in _logged_metrics(trainer) if r.get("gpuprof/step_time_ms")]


@_needs("lightning")
def test_lightning_profiler_ranges_mark_its_actions(tmp_path):
    from gpuprof.integrations.lightning import GpuprofProfiler

    prof = GpuprofProfiler(
        schedule=gpuprof.schedule(wait=1, warmup=1, active=2, repeat=1), out=None, ranges=True
    )
    _lightning_fit(tmp_path, profiler=prof, steps=6)
    (report,) = prof.reports
    names = {r["name"] for r in report.ranges}
    assert "run_training_batch" in names and any(n.endswith(".training_step") for n in names)
    assert "gpuprof" in prof.summary()


def test_a_failed_write_is_a_warning_and_the_report_stays(tmp_path):
    from gpuprof.integrations._span import TrainerSpan

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the output folder should be")
    span = TrainerSpan(schedule=gpuprof.schedule(wait=0, warmup=0, active=2, repeat=1), out=blocker / "out")
    model = torch.nn.Linear(8, 2)
    span.start()
    with pytest.warns(RuntimeWarning, match="could not write the profile"):
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            span.step()
    span.stop()
    assert len(span.reports) == 1 and len(span.reports[0].steps) == 2 and span.written == []


# ---- watch=True: the always-on watcher over the trainer's steps ------------------------------------
def _watch_lines(out) -> list[dict]:
    return [json.loads(line) for line in (out / "rank0" / "watch.jsonl").read_text().splitlines()]


def _capture_at(out, after_step: int, start: int, steps: int):
    """A capture request written once step ``after_step`` has ended, as `gpuprof capture OUT`
    writes it (the watcher reads it at its next write: every step here, see _flush_every_step)."""
    from gpuprof.session.capture import REQUEST_FILE

    def maybe(step_num: int) -> None:
        if step_num == after_step + 1 and not (out / REQUEST_FILE).exists():
            req = {"id": 1, "start": start, "steps": steps, "t": time.time()}
            (out / REQUEST_FILE).write_text(json.dumps(req))

    return maybe


@pytest.fixture
def _flush_every_step(monkeypatch):
    """The watcher writes (and looks for a capture request) once a second; these trainers run a few
    steps in well under a second, so here it writes at every step."""
    from gpuprof.session import watch as w

    monkeypatch.setattr(w, "FLUSH_NS", 0)


def _assert_watched_steps(out, steps: int, samples: int, wall_s: float) -> list[dict]:
    lines = _watch_lines(out)
    assert lines[0]["kind"] == "start" and lines[0]["rank"] == 0 and lines[0]["world"] == 1
    assert lines[-1]["kind"] == "end" and lines[-1]["steps"] == steps
    rows = [line for line in lines if line["kind"] == "step"]
    # One line per optimizer step, numbered from 0, each one step.
    assert [r["step"] for r in rows] == list(range(steps)) and all(r["steps"] == 1 for r in rows)
    for r in rows:
        assert r["step_ms"] > 0 and 0 <= r["dataloader_wait_ms"] < r["step_ms"]
        assert r["cpu_ms"] > 0 and r["rss_bytes"] > 16 << 20  # torch alone holds more than that
        assert r["samples_per_s"] > 0 and r["gpu_peak_allocated_bytes"] is None  # the CPU
    # Two DataLoader batches per optimizer step (gradient accumulation of 2), counted when drawn:
    # both trainers draw one batch ahead (to know the epoch's end), so step 0 holds a third and the
    # last step one; every batch is counted once.
    assert [r["samples"] for r in rows[1:-1]] == [samples] * (steps - 2)
    assert sum(r["samples"] for r in rows) == steps * samples
    # The steps' wall time lies inside the training call's (less its setup before step 0's start).
    assert sum(r["step_ms"] for r in rows) < wall_s * 1000
    return lines


@_needs("transformers", "accelerate")
def test_hf_callback_watch_writes_a_line_per_optimizer_step_and_answers_a_capture(
    tmp_path, _flush_every_step
):
    from transformers import TrainerCallback

    from gpuprof.integrations.hf import GpuprofCallback

    out = tmp_path / "w"
    cb = GpuprofCallback(watch=True, out=out)
    ask = _capture_at(out, after_step=1, start=3, steps=2)

    class Asker(TrainerCallback):  # after gpuprof's step end: the request is seen at the next one
        def on_step_end(self, args, state, control, **kw):
            ask(state.global_step)

    began = time.monotonic()
    _hf_train(tmp_path, accumulation=2, callbacks=[cb, Asker()], steps=7)
    lines = _assert_watched_steps(out, 7, samples=8, wall_s=time.monotonic() - began)
    assert cb.reports == [] and cb.watch_path == out / "rank0" / "watch.jsonl"
    captures = [line for line in lines if line["kind"] == "capture"]
    assert [c["state"] for c in captures] == ["armed", "done"] and captures[1]["recorded"] == [3, 4]
    report = json.loads((out / "capture-1" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [3, 4]
    # The full profiler in those steps: one AdamW step and two forward passes each.
    assert sum(o["calls"] for o in report["operators"] if o["name"] == "aten::embedding") == 2 * 2 * 2


@_needs("lightning")
def test_lightning_watch_writes_a_line_per_optimizer_step_for_top(tmp_path):
    import subprocess
    import sys

    from gpuprof.integrations.lightning import GpuprofCallback, GpuprofProfiler

    out = tmp_path / "w"
    prof = GpuprofProfiler(watch=True, out=out)
    began = time.monotonic()
    _lightning_fit(tmp_path, profiler=prof, accumulation=2, steps=8)
    _assert_watched_steps(out, 8, samples=32, wall_s=time.monotonic() - began)
    assert prof.reports == [] and str(out / "rank0" / "watch.jsonl") in prof.summary()
    top = subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", "top", str(out), "--json"], capture_output=True, text=True
    )
    assert top.returncode == 0, top.stderr
    (rank,) = json.loads(top.stdout)["ranks"]
    assert rank["rank"] == 0 and rank["step"] == 7 and rank["step_time_ms"] > 0
    # The callback form, manual optimisation: one line per optimizer step as well.
    cb = GpuprofCallback(watch=True, out=tmp_path / "cb")
    _lightning_fit(tmp_path, callbacks=[cb], manual=True, steps=5)
    steps = [line for line in _watch_lines(tmp_path / "cb") if line["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(5))


def test_watch_takes_out_and_the_watchers_options_only(tmp_path):
    from gpuprof.integrations._span import watch_span

    made = watch_span(
        "X", watch=True, schedule=None, out=tmp_path, trace=True, auto_steps=False, batch_size=4
    )
    assert made is not None and not made.active
    with pytest.raises(
        ValueError, match=r"X\(watch=True\).*not schedule, record_shapes; .*gpuprof capture OUT"
    ):
        watch_span(
            "X",
            watch=True,
            schedule=gpuprof.schedule(wait=1, warmup=0, active=1),
            out=tmp_path,
            trace=True,
            auto_steps=False,
            record_shapes=True,
        )
    with pytest.raises(ValueError, match="needs a folder"):
        watch_span("X", watch=True, schedule=None, out=None, trace=True, auto_steps=False)
    if importlib.util.find_spec("lightning") is not None:
        from gpuprof.integrations.lightning import GpuprofProfiler

        with pytest.raises(ValueError, match="marks no ranges"):
            GpuprofProfiler(watch=True, out=tmp_path, ranges=True)
        # Lightning's Profiler.__del__ tears down even a profiler whose __init__ raised: quietly.
        refused = object.__new__(GpuprofProfiler)
        with pytest.raises(ValueError):
            refused.__init__(watch=True, out=tmp_path, ranges=True)
        refused.teardown(stage=None)
    assert watch_span("X", watch=False, schedule=None, out=None, trace=True, auto_steps=False) is None
