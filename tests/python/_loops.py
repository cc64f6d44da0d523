"""Small real training loops the tests profile (CPU, torch)."""

import time


def make_cnn():
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 16, 10),
    )


class SleepyImages:
    """A map-style dataset whose samples cost `sleep_s` of waiting each (like reading small files)."""

    def __init__(self, n=512, sleep_s=0.0, size=32):
        self.n, self.sleep_s, self.size = n, sleep_s, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, self.size, self.size, generator=g), i % 10


def train_step(model, opt, x, y, reps=1):
    import torch

    for _ in range(reps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


def hooks():
    from gpuprof.collect import hooks as _hooks_loader

    return _hooks_loader.hooks()
