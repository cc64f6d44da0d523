"""A transformers Trainer on a tiny GPT-2 built from a config, synthetic tokens (nothing from a hub).

python hf_trainer.py OUT.json [callback]: with "callback", gpuprof is driven by a TrainerCallback
(the docs/profiling.md recipe) and torch.profiler runs in the same process; the report's dict and
torch.profiler's operator totals are written to OUT.json. Without it, the script is for `gpuprof run`.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = 8


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 4 * STEPS

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


model = GPT2LMHeadModel(
    GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
)
args = TrainingArguments(
    output_dir=os.path.join(os.path.dirname(sys.argv[1]), "hf"),
    max_steps=STEPS,
    per_device_train_batch_size=4,
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    use_cpu=True,
    dataloader_num_workers=0,
    disable_tqdm=True,
    optim="adamw_torch",
)
callbacks = []
if "callback" in sys.argv:
    import gpuprof

    class GpuprofCallback(TrainerCallback):
        """One gpuprof step per optimizer step; the report once training ends."""

        def on_train_begin(self, args, state, control, **kw):
            self.prof = gpuprof.profile(
                schedule=gpuprof.schedule(wait=1, warmup=1, active=STEPS - 2), record_shapes=True
            )
            self.prof.start()

        def on_step_end(self, args, state, control, **kw):
            self.prof.step()

        def on_train_end(self, args, state, control, **kw):
            self.prof.stop()

    cb = GpuprofCallback()
    callbacks.append(cb)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks).train()
if "callback" in sys.argv:
    json.dump({"report": cb.prof.report().to_dict()}, open(sys.argv[1], "w"))
