#!/usr/bin/env bash
# reproduce.sh: the shipped models end to end from the corpus, on one machine with a CUDA GPU
# (on a CPU it runs too, far slower). The lineage in models/*/README.md ran the same steps split
# over several calls of the GPU-machine tool (scripts/device-pretrain.sh); the budgets here are theirs.
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
# 4. A first joint model (no real orders) and CAIS; both fine-tunings as in the model cards.
J="--aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --aug-asr 0.4 --garble 0.1 --ema 0.999 --intent-smoothing 0.1 --dropout 0.1 --bf16 --log-every 0 --warmup 0.06 --fast --batch-size 256 --lr 5e-4 --epochs 24 --time-budget 430"
OUT=$B/out2 PRETRAIN_S=0 JOBS="jointB cais" JOINT_ARGS="$J" ARGS_jointB="--seed 62" \
    CAIS_ARGS="--lr 1.5e-4 --epochs 30 --batch-size 32 --bf16 --fast --min-span-chars 1 --log-every 0 --time-budget 260" \
    bash scripts/device-pretrain.sh
$PY training/export.py --run /tmp/runs/jointB --vocab $B/corpus/vocab.txt --data data/hotline \
    --out $B/first
# 5. The Haikou training-period orders aligned to our intents by that model, then the shipped
#    joint model with them.
$PY training/pseudo_label.py --model $B/first --orders $B/corpus/haikou/train.jsonl \
    $B/corpus/haikou/dev.jsonl --map training/maps/haikou_departments.json \
    --out $B/haikou_extra3.jsonl --report $B/haikou_extra_report.json
#    Three seeds; the shipped one is the best on dev of those that end every scripted call as
#    written (export each, then `ctest -R ScriptedCalls`): seed 73 in the model card.
X="--extra-train $B/haikou_extra3.jsonl --vocab $B/corpus/vocab.txt --aug-asr 0.5"
OUT=$B/out3 PRETRAIN_S=0 JOBS="jointN jointN2 jointN3" JOINT_ARGS="$J $X" \
    ARGS_jointN="--seed 72" ARGS_jointN2="--seed 73" ARGS_jointN3="--seed 74" \
    bash scripts/device-pretrain.sh
# 6. Model folders (ONNX with FP16 weights, parity against PyTorch asserted).
$PY training/export_classifier.py --run /tmp/runs/haikou --vocab $B/corpus/vocab.txt \
    --data $B/corpus/haikou --out models/haikou --name haikou
$PY training/export.py --run /tmp/runs/jointN2 --vocab $B/corpus/vocab.txt --data data/hotline \
    --out models/default
