"""A lightning Trainer on an MLP with synthetic data (Lightning steps the optimizer with a closure:
forward and backward run inside optimizer.step).

python lightning_mlp.py OUT.json [callback] [fused]: "callback" drives gpuprof from a Lightning
Callback and writes the report's dict to OUT.json; without it, the script is for `gpuprof run`.
"""

import json
import sys

import lightning as L
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = 10


class MLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        layers = [m for _ in range(8) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(32, 1))  # 18 small parameters

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        if "fused" in sys.argv:  # one fused kernel: the optimizer rule has nothing to say
            return torch.optim.Adam(self.parameters(), fused=True)
        return torch.optim.Adam(self.parameters(), foreach=False)


data = torch.utils.data.TensorDataset(torch.randn(64 * STEPS, 32), torch.randn(64 * STEPS, 1))
loader = torch.utils.data.DataLoader(data, batch_size=64)
callbacks = []
if "callback" in sys.argv:
    import gpuprof

    class GpuprofCallback(L.Callback):
        def on_train_start(self, trainer, module):
            self.prof = gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=STEPS - 3))
            self.prof.start()

        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            self.prof.step()

        def on_train_end(self, trainer, module):
            self.prof.stop()

    cb = GpuprofCallback()
    callbacks.append(cb)
trainer = L.Trainer(
    max_steps=STEPS,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=callbacks,
)
trainer.fit(MLP(), loader)
if "callback" in sys.argv:
    json.dump({"report": cb.prof.report().to_dict()}, open(sys.argv[1], "w"))
