#!/usr/bin/env python3
"""PyTorch twin of examples/word_lm: pytorch/examples word_language_model (data.py, model.py, main.py) on
the same text, split the same way (examples/word_lm/corpus.h: documents end at "%" lines, document k to
valid when k % 10 == 8, to test when k % 10 == 9, else train), tokenised the same way (bytes.split()
plus "<eos>" per line, the dictionary in order of first appearance over train, valid, test), from the
same initial weights (a safetensors file from `word_lm --export-init`), so its per-step losses are the
ones lockstep should print. One process; --batch-size is the global batch (lockstep's batch per rank
times its ranks).

  launch --nproc_per_node=1 bazel-bin/examples/word_lm --export-init /tmp/init.safetensors
  OMP_NUM_THREADS=1 python tools/twins/word_lm_twin.py --init /tmp/init.safetensors --steps 20

Prints main.py's lines and `step_ms <median> cpu_ms <median>` (the first 3 steps left out); --losses-json
writes {"config": ..., "losses": [...], "val_losses": [...], "test_loss": ...}.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FORTUNES_DIR = "/usr/share/games/fortunes"
# examples/common/fortunes.cpp's fortune_files().
FORTUNE_FILES = [
    "art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education", "ethnic",
    "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
    "startrek", "tao", "translate-me", "wisdom", "work", "zippy",
]


# ---- data.py, on the three parts of one text ----
class Dictionary:
    def __init__(self):
        self.word2idx, self.idx2word = {}, []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]


class Corpus:
    def __init__(self, data: bytes):
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":  # `for line in f` yields no empty line after a final "\n"
            lines.pop()
        parts, doc = [[], [], []], 0
        for line in lines:
            parts[1 if doc % 10 == 8 else 2 if doc % 10 == 9 else 0].append(line)
            if line == b"%":
                doc += 1
        self.dictionary = Dictionary()
        self.train, self.valid, self.test = (self.tokenize(p) for p in parts)

    def tokenize(self, lines):
        ids = [self.dictionary.add_word(w) for line in lines for w in line.split() + [b"<eos>"]]
        return torch.tensor(ids, dtype=torch.int64)


# ---- model.py ----
class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


# ---- main.py ----
def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="")
    p.add_argument("--init", required=True, help="initial weights: word_lm --export-init FILE")
    p.add_argument("--model", default="LSTM")
    p.add_argument("--emsize", type=int, default=200)
    p.add_argument("--nhid", type=int, default=200)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--lr", type=float, default=20)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--steps", type=int, default=-1, help="stop after this many steps in all (-1: every epoch)")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--eval-batch-size", type=int, default=10)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--seed", type=int, default=1111)
    p.add_argument("--log-interval", type=int, default=200)
    p.add_argument("--no-eval", action="store_true", help="skip validation and test (timing runs)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--losses-json", default="")
    a = p.parse_args()
    torch.manual_seed(a.seed)

    if a.text:
        data = open(a.text, "rb").read()
    else:
        data = b"".join(open(os.path.join(FORTUNES_DIR, f), "rb").read() for f in FORTUNE_FILES)
    corpus = Corpus(data)
    train_data = batchify(corpus.train, a.batch_size)
    val_data = batchify(corpus.valid, a.eval_batch_size)
    test_data = batchify(corpus.test, a.eval_batch_size)
    ntokens = len(corpus.dictionary.idx2word)
    model = RNNModel(a.model, ntokens, a.emsize, a.nhid, a.nlayers, a.dropout, a.tied)
    from safetensors.torch import load_file
    model.load_state_dict(load_file(a.init))
    criterion = nn.NLLLoss()

    def evaluate(source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(a.eval_batch_size)
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, a.bptt):
                data, targets = get_batch(source, i, a.bptt)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(source) - 1)

    lr, best_val, best = a.lr, None, None
    losses, val_losses, step_ms, step_cpu_ms = [], [], [], []
    max_steps = a.steps if a.steps >= 0 else float("inf")
    for epoch in range(1, a.epochs + 1):
        if len(losses) >= max_steps:
            break
        model.train()
        total_loss, start = 0.0, time.time()
        hidden = model.init_hidden(a.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, a.bptt)):
            if len(losses) >= max_steps:
                break
            t0, c0 = time.perf_counter(), time.process_time()
            data, targets = get_batch(train_data, i, a.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            for q in model.parameters():
                q.data.add_(q.grad, alpha=-lr)
            losses.append(loss.item())
            step_ms.append((time.perf_counter() - t0) * 1e3)
            step_cpu_ms.append((time.process_time() - c0) * 1e3)
            total_loss += losses[-1]
            if batch % a.log_interval == 0 and batch > 0 and not a.quiet:
                cur = total_loss / a.log_interval
                ms = (time.time() - start) * 1000 / a.log_interval
                print(f"| epoch {epoch:3d} | {batch:5d}/{len(train_data) // a.bptt:5d} batches | lr {lr:02.2f} | "
                      f"ms/batch {ms:5.2f} | loss {cur:5.2f} | ppl {math.exp(cur):8.2f}", flush=True)
                total_loss, start = 0.0, time.time()
        if a.no_eval:
            continue
        val_loss = evaluate(val_data)
        val_losses.append([epoch, val_loss])
        if not a.quiet:
            print(f"| end of epoch {epoch:3d} | valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}",
                  flush=True)
        if best_val is None or val_loss < best_val:
            best_val = val_loss
            best = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            lr /= 4.0
    test_loss = None
    if best is not None:
        model.load_state_dict(best)
        test_loss = evaluate(test_data)
        if not a.quiet:
            print(f"| end of training | test loss {test_loss:5.2f} | test ppl {math.exp(test_loss):8.2f}")

    def median(v):  # the first 3 steps left out, as word_lm does
        v = sorted(v[min(3, len(v) - 1):])
        return v[len(v) // 2] if v else 0.0
    print(f"step_ms {median(step_ms):.3f} cpu_ms {median(step_cpu_ms):.3f}")
    if a.losses_json:
        cfg = {k: v for k, v in vars(a).items() if k not in ("init", "losses_json", "quiet")}
        with open(a.losses_json, "w") as f:
            json.dump({"config": cfg, "ntoken": ntokens, "losses": losses, "val_losses": val_losses,
                       "test_loss": test_loss}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
