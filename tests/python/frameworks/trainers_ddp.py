"""A Hugging Face Trainer or a Lightning Trainer under torchrun with DDP on the CPU (gloo), profiled
by gpuprof's adapter, with gradient accumulation (two micro-batches per optimizer step).

    torchrun --standalone --nproc-per-node 2 trainers_ddp.py hf|hf-watch|lightning OUT

``hf-watch``: the Hugging Face callback with ``watch=True`` (every step watched, nothing recorded).

Each rank writes OUT/steps-rank<N>.json: the trainer's own count of optimizer steps and the number
of optimizer.step() calls that ran, so the test compares gpuprof's steps with the trainer's.
Small models built from configs, synthetic data, nothing from a hub.
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

import gpuprof

STEPS = 6
ACCUMULATION = 2
SCHEDULE = dict(wait=1, warmup=1, active=3, repeat=1)  # records optimizer steps 2, 3 and 4

torch.manual_seed(0)
torch.set_num_threads(1)
kind, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])

# Every optimizer.step() that runs, counted beside the trainer (and beside gpuprof).
optimizer_steps = []
register_optimizer_step_post_hook(lambda opt, args, kwargs: optimizer_steps.append(1))

if kind in ("hf", "hf-watch"):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from gpuprof.integrations.hf import GpuprofCallback

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 4 * ACCUMULATION * STEPS * 2  # both ranks' shares

        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
        )
    )
    args = TrainingArguments(
        output_dir=os.path.join(out, "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=ACCUMULATION,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        ddp_backend="gloo",
        dataloader_num_workers=0,
        disable_tqdm=True,
        optim="adamw_torch",
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(),
        callbacks=[
            GpuprofCallback(watch=True, out=out)
            if kind == "hf-watch"
            else GpuprofCallback(schedule=gpuprof.schedule(**SCHEDULE), out=out)
        ],
    )
    trainer.train()
    trainer_steps = trainer.state.global_step
else:
    import lightning as L

    from gpuprof.integrations.lightning import GpuprofProfiler

    class MLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    batches = STEPS * ACCUMULATION * 2
    data = torch.utils.data.TensorDataset(torch.randn(16 * batches, 32), torch.randn(16 * batches, 1))
    trainer = L.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        accumulate_grad_batches=ACCUMULATION,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=GpuprofProfiler(schedule=gpuprof.schedule(**SCHEDULE), out=out),
    )
    trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=16))
    trainer_steps = trainer.global_step

with open(os.path.join(out, f"steps-rank{rank}.json"), "w") as f:
    json.dump({"trainer_steps": trainer_steps, "optimizer_steps": len(optimizer_steps)}, f)

# gloo's worker threads free a finished collective's tensors just after the collective returns,
# and need the GIL to do it; one still doing so when the interpreter exits is ended by Python
# (std::terminate, SIGABRT: pytorch/pytorch#190489), and the group's destructor, run with the GIL
# held (del of the DDP model), waits for it forever. A short sleep hands them the GIL before the
# script ends; the group is then destroyed as torch asks.
time.sleep(0.5)
if torch.distributed.is_available() and torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
