"""Masked-LM pretraining with whole-word masking on the corpus stage's shards (training/corpus.py).

Each sequence is [CLS] + a window of one source's token stream starting at a text's beginning
(texts joined by [SEP], as BERT packs them) + [SEP]; its length is drawn per batch (short ones
often, since calls are short; up to --max-length for posts and orders). Sources are drawn by
weight. Whole-word masking: jieba words (the stream's bit 15) are chosen until about --mask-rate
of the tokens are covered; chosen tokens become [MASK] 80%, a random token 10%, themselves 10%.

Resumable: the run folder keeps `ckpt.pt` (model, optimiser, scheduler, step, RNG), written every
--ckpt-every seconds and at the end; a second call with the same --out continues from it. The
encoder weights go to weights-*.npz + config.json (train.py's run-folder form, the MLM head
included) so fine-tuning starts from them with train.py --init-encoder.

  python3 training/pretrain.py --corpus-dir build-train/corpus --out build-train/pretrain \
      --layers 6 --hidden 256 --heads 4 --ffn 1024 --time-budget 480
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import BertJoint, SelfAttention, read_weight_arrays, write_weight_shards  # noqa

WORD_START = 0x8000
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
N_SPECIAL = 5

DEFAULT_WEIGHTS = {"customer_service_qa": 0.30, "dialog_utterances": 0.12,
                   "xinwenlianbo_news": 0.18, "haikou_orders": 0.22, "own_calls": 0.18}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Streams:
    def __init__(self, corpus_dir, weights):
        self.names, self.ids, self.starts, w = [], [], [], []
        for path in sorted(glob.glob(os.path.join(corpus_dir, "pretrain-*.npz"))):
            name = os.path.basename(path)[len("pretrain-"):-len(".npz")]
            with np.load(path) as z:
                self.names.append(name)
                self.ids.append(z["ids"])
                self.starts.append(z["starts"])
            w.append(weights.get(name, 0.1))
        if not self.names:
            raise SystemExit(f"no pretrain-*.npz in {corpus_dir}: run training/corpus.py first")
        self.p = np.asarray(w) / np.sum(w)

    def batch(self, rng, n, length):
        """n windows of `length` tokens (flags kept), each from a text start of a drawn source."""
        out = np.full((n, length), SEP, dtype=np.int64)
        src = rng.choice(len(self.names), size=n, p=self.p)
        for k in range(n):
            ids, starts = self.ids[src[k]], self.starts[src[k]]
            s = int(starts[rng.integers(len(starts))])
            piece = ids[s:s + length]
            out[k, :len(piece)] = piece
        return out


def mask_batch(raw, rng, vocab, rate, device):
    """raw: [n, L] stream tokens with flags -> (input_ids, attention_mask, labels) tensors with
    [CLS] prepended and [SEP] appended; whole words masked."""
    n, L = raw.shape
    flags = (raw & WORD_START) != 0
    tok = raw & ~WORD_START
    # A window may begin inside a word: its first token starts a word for masking purposes.
    flags[:, 0] = True
    special = tok < N_SPECIAL
    flags |= special
    word_id = np.cumsum(flags, axis=1)  # word index per token, 1-based per row
    n_words = word_id[:, -1]
    # Per row, choose words with probability `rate` (special tokens never).
    pick = rng.random((n, int(n_words.max()) + 2)) < rate
    chosen = np.take_along_axis(pick, word_id, axis=1) & ~special
    labels = np.where(chosen, tok, -100)
    r = rng.random((n, L))
    inp = tok.copy()
    inp[chosen & (r < 0.8)] = MASK
    rand_sel = chosen & (r >= 0.8) & (r < 0.9)
    inp[rand_sel] = rng.integers(N_SPECIAL, vocab, size=int(rand_sel.sum()))
    cls = np.full((n, 1), CLS)
    sep = np.full((n, 1), SEP)
    ign = np.full((n, 1), -100)
    inp = np.concatenate([cls, inp, sep], axis=1)
    labels = np.concatenate([ign, labels, ign], axis=1)
    attn = np.ones_like(inp)
    t = lambda a: torch.from_numpy(a).to(device, non_blocking=True)  # noqa: E731
    return t(inp), t(attn), t(labels)


def save_weights(out, model, cfg):
    write_weight_shards(out, {k: v.detach().float().cpu().numpy()
                              for k, v in model.state_dict().items()
                              if not k.startswith(("intent_head", "slot_head"))})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--max-length", type=int, default=256, help="longest sequence, [CLS]/[SEP] in")
    ap.add_argument("--tokens-per-batch", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--rewarm", type=int, default=300,
                    help="warm-up steps when resuming from weights without optimiser state")
    ap.add_argument("--total-steps", type=int, default=0,
                    help="the schedule's length; 0: as many steps as the time budget fits, "
                    "measured over the first steps")
    ap.add_argument("--mask-rate", type=float, default=0.15)
    ap.add_argument("--time-budget", type=float, default=300, help="seconds for this call")
    ap.add_argument("--ckpt-every", type=float, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--compile", action="store_true", help="torch.compile the encoder")
    a = ap.parse_args(argv)
    t_start = time.time()
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    vocab_path = os.path.join(a.corpus_dir, "vocab.txt")
    with open(vocab_path, encoding="utf-8") as f:
        vocab = sum(1 for _ in f)
    streams = Streams(a.corpus_dir, DEFAULT_WEIGHTS)
    log(f"device {device}; sources {dict(zip(streams.names, np.round(streams.p, 3)))}; "
        f"tokens {sum(len(x) for x in streams.ids):,}; vocab {vocab}")
    torch.manual_seed(a.seed)
    model = BertJoint(vocab, 1, 1, a.layers, a.hidden, a.heads, a.ffn, 0.1).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "ln" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "ln" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr,
                            betas=(0.9, 0.98), eps=1e-6,
                            **({"fused": True} if device.type == "cuda" else {}))

    # One cosine cycle per call: warm-up, then down to 5% at plan["total"]. A call resumed from
    # weights alone starts a new cycle at its first step.
    plan = {"total": a.total_steps or 10**9, "start": 0, "warm": a.warmup}

    def lr_at(step):
        s = step - plan["start"]
        if s < plan["warm"]:
            return (s + 1) / plan["warm"]
        prog = min(1.0, (s - plan["warm"]) / max(1, plan["total"] - plan["start"] - plan["warm"]))
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * prog))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = np.random.default_rng(a.seed)
    step, seen_tokens, history = 0, 0, []
    os.makedirs(a.out, exist_ok=True)
    ckpt = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ckpt):
        st = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        step, seen_tokens, history = st["step"], st["seen_tokens"], st["history"]
        rng = np.random.default_rng([a.seed, step])
        log(f"resumed from {ckpt} at step {step} ({seen_tokens:,} tokens seen)")
    elif glob.glob(os.path.join(a.out, "weights-*.npz")):
        # Weights of an earlier call without its optimiser state (it stays on that machine):
        # a fresh optimiser, warmed up again over --rewarm steps, the schedule continued.
        with open(os.path.join(a.out, "config.json")) as f:
            prev = json.load(f)
        for k in ("vocab_size", "layers", "hidden", "heads", "ffn"):
            if prev[k] != model.config[k]:
                raise SystemExit(f"{a.out} holds a model with {k} {prev[k]}, this run has "
                                 f"{model.config[k]}")
        sd = read_weight_arrays(a.out)
        missing, unexpected = model.load_state_dict(
            {k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
        missing = [k for k in missing if not k.startswith(("intent_head", "slot_head"))]
        if missing or unexpected:
            raise SystemExit(f"{a.out}: weights do not fit: missing {missing}, unexpected "
                             f"{unexpected}")
        step, seen_tokens, history = prev["step"], prev["seen_tokens"], prev["history"]
        plan.update(start=step, warm=a.rewarm)
        if a.total_steps:
            plan["total"] = step + a.total_steps
        for g in opt.param_groups:  # LambdaLR scales the group's initial lr
            g["lr"] = a.lr
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s, base=step: lr_at(s + base))
        rng = np.random.default_rng([a.seed, step])
        log(f"resumed from the weights in {a.out} at step {step} (fresh optimiser)")
    cfg = dict(model.config, pretrain=dict(vars(a), sources=dict(zip(streams.names,
                                                                     streams.p.tolist()))),
               torch=torch.__version__)
    fwd = torch.compile(model.encode) if a.compile else model.encode
    SelfAttention.use_sdpa = device.type == "cuda"
    t_measure = None

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "sched": sched.state_dict(), "step": step, "seen_tokens": seen_tokens,
                    "history": history}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
        save_weights(a.out, model, dict(cfg, step=step, seen_tokens=seen_tokens, history=history))

    model.train()
    last_ckpt, t0, run_loss, run_n = time.time(), time.time(), 0.0, 0
    # Lengths: a third short (calls), the rest up to the maximum (posts, orders, news).
    lengths = [16, 32, 48, 64, 96, 128, 192, a.max_length - 2]
    lengths = sorted({min(x, a.max_length - 2) for x in lengths})
    len_p = np.asarray([3 if x <= 48 else 2 if x <= 128 else 1.5 for x in lengths], float)
    len_p /= len_p.sum()
    start_step = step
    while step < plan["total"] and time.time() - t_start < a.time_budget:
        if not a.total_steps and step == start_step + 20:
            t_measure = time.time()
        if not a.total_steps and step == start_step + 120 and t_measure:
            rate = 100 / (time.time() - t_measure)
            left = a.time_budget - (time.time() - t_start) - 30  # the final save and slack
            plan["total"] = step + max(1, int(rate * left))
            log(f"{rate:.1f} steps/s: the schedule ends at step {plan['total']}")
        L = int(rng.choice(lengths, p=len_p))
        n = max(8, a.tokens_per_batch // (L + 2))
        inp, attn, lab = mask_batch(streams.batch(rng, n, L), rng, vocab, a.mask_rate, device)
        tt = torch.zeros_like(inp)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            h = fwd(inp, attn, tt)
            sel = lab != -100
            logits = model.mlm_logits(h[sel])
        loss = F.cross_entropy(logits.float(), lab[sel])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        seen_tokens += int(n * L)
        run_loss += loss.detach()
        run_n += 1
        if step % 200 == 0:
            acc = (logits.argmax(-1) == lab[sel]).float().mean().item()
            history.append({"step": step, "loss": float(run_loss) / run_n, "mlm_acc": acc,
                            "lr": sched.get_last_lr()[0], "tokens": seen_tokens})
            log(f"step {step} loss {history[-1]['loss']:.3f} acc {acc:.3f} "
                f"lr {history[-1]['lr']:.2e} {seen_tokens / 1e6:.0f}M tokens "
                f"({time.time() - t0:.0f}s)")
            run_loss, run_n = 0.0, 0
        if time.time() - last_ckpt > a.ckpt_every:
            save()
            last_ckpt = time.time()
    save()
    log(f"saved {a.out} at step {step} ({seen_tokens:,} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
