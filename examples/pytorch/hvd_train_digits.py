#!/usr/bin/env python3
"""A Horovod-style PyTorch training script (MNIST-like: scikit-learn's 8x8 digits, no download),
run on byteps by changing one line: ``import horovod.torch as hvd`` -> ``import byteps.torch as hvd``.

Launch: ``PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- python3
examples/pytorch/hvd_train_digits.py``.  Rank 0 prints the test accuracy and a ``RESULT {...}``
line (accuracy, last averaged loss, a checksum of the final weights).
"""

import argparse
import json

import torch
import torch.nn.functional as F

import byteps.torch as hvd  # the only change from a Horovod script

parser = argparse.ArgumentParser(description="Horovod-style digits training")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)

from sklearn.datasets import load_digits  # noqa: E402

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target, dtype=torch.int64)
train_x, train_y, test_x, test_y = x[:1400], y[:1400], x[1400:], y[1400:]
# Horovod's recipe: each worker takes its shard of the training set.
shard = torch.arange(hvd.rank(), len(train_x), hvd.size())[: len(train_x) // hvd.size()]
train_x, train_y = train_x[shard], train_y[shard]

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


loss_avg = 0.0
for epoch in range(args.epochs):
    model.train()
    for i in range(0, len(train_x), args.batch_size):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_x[i:i + args.batch_size]), train_y[i:i + args.batch_size])
        loss.backward()
        optimizer.step()
    loss_avg = metric_average(loss.item(), f"avg_loss.{epoch}")

model.eval()
with torch.no_grad():
    local = test_x[hvd.rank()::hvd.size()], test_y[hvd.rank()::hvd.size()]
    correct = float((model(local[0]).argmax(1) == local[1]).sum())
accuracy = metric_average(correct, "correct") * hvd.size() / len(test_x)
checksum = sum(float(p.double().abs().sum()) for p in model.parameters())
if hvd.rank() == 0:
    print(f"test accuracy {accuracy:.4f}")
    print("RESULT " + json.dumps({"workers": hvd.size(), "accuracy": accuracy, "loss": loss_avg,
                                  "checksum": checksum}), flush=True)
hvd.shutdown()
