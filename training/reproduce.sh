#!/usr/bin/env bash
# reproduce.sh: the shipped models end to end from the corpus, on one machine with a CUDA GPU
# (on a CPU it runs too, far slower). The lineage in models/*/README.md ran the same steps split
# over two calls of the GPU-machine tool (scripts/device-pretrain.sh); the budgets here are theirs.
#   HOTLINE_CORPUS=/path/to/corpus bash training/reproduce.sh
# Without a corpus it says so and stops after nothing: the corpus stages need it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${HOTLINE_CORPUS:-}" ] || [ ! -d "$HOTLINE_CORPUS" ]; then
  echo "reproduce.sh: set HOTLINE_CORPUS to the corpus folder (pretrain/, hotline_haikou_12345/, slu/)"
  exit 0
fi
B=build-train
# 1. Corpus stage: masking, vocabulary, word-segmented shards, the orders split by number.
$PY training/corpus.py --out $B/corpus
$PY training/slu_sets.py --out $B
# 2. Encoded caches (the GPU machine needs no tokenizer).
$PY training/train_classifier.py --data $B/corpus/haikou --vocab $B/corpus/vocab.txt \
    --cache $B/haikou.json.gz --encode-only
mkdir -p $B/joint
cp data/hotline/*.jsonl $B/joint/ && cp config/taxonomy/hotline.yaml $B/joint/taxonomy.yaml
$PY training/train.py --data $B/joint --taxonomy $B/joint/taxonomy.yaml --vocab $B/corpus/vocab.txt \
    --extra-train $B/corpus/oos.jsonl --encode-only --cache $B/joint/cache.json.gz
$PY training/train.py --data $B/cais --taxonomy $B/cais/taxonomy.yaml --vocab $B/corpus/vocab.txt \
    --encode-only --cache $B/cais/cache.json.gz
# 3. Pretraining (400 s on an H200) and the dispatcher; then the joint model and CAIS.
OUT=$B/out1 PRETRAIN_S=400 JOBS="haikou" HAIKOU_ARGS="--time-budget 110" \
    bash scripts/device-pretrain.sh
OUT=$B/out2 PRETRAIN_S=0 JOB_S=240 JOBS="joint cais" \
    JOINT_ARGS="--epochs 12 --aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --aug-asr 0.4 --garble 0.1 --ema 0.999 --intent-smoothing 0.1 --dropout 0.1 --bf16 --log-every 0 --warmup 0.06" \
    ARGS_joint="--lr 3e-4 --batch-size 96 --seed 51" \
    CAIS_ARGS="--lr 1.5e-4 --epochs 15 --batch-size 32 --bf16 --log-every 0 --time-budget 150" \
    bash scripts/device-pretrain.sh
# 4. Model folders (ONNX with FP16 weights, parity against PyTorch asserted).
$PY training/export_classifier.py --run /tmp/runs/haikou --vocab $B/corpus/vocab.txt \
    --data $B/corpus/haikou --out models/haikou --name haikou
$PY training/export.py --run /tmp/runs/joint --vocab $B/corpus/vocab.txt --data data/hotline \
    --out models/default
