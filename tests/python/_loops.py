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


def make_tiny_resnet(width: int = 8, classes: int = 10):
    """A small ResNet: a stem, two stages of two basic blocks (the second stage's first block
    downsamples through a 1x1 convolution), pooling and a classifier. Each block applies its one
    ReLU module twice, as torchvision's BasicBlock does."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.downsample = None
            if stride != 1 or c_in != c_out:
                self.downsample = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
                )

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class TinyResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU()
            self.layer1 = nn.Sequential(BasicBlock(width, width, 1), BasicBlock(width, width, 1))
            self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width, 1))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * width, classes)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer2(self.layer1(x))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return TinyResNet()
