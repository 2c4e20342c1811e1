#!/usr/bin/env bash
# The input pipeline beside tf.data, whether it keeps up with training, and its memory:
#  1. JPEGs decoded and augmented to 224x224 (resize 240x240, random crop 224x224, random
#     flip, / 255): records/s of psctl data bench with 1 and 2 threads, and of tf.data
#     (bench/tf_input.py: tf.io.decode_jpeg, the same transforms, TensorFlow's pools and
#     num_parallel_calls limited to 1 and 2), on the same N files: 256x256 RGB JPEGs that
#     psctl data convert makes from Fashion-MNIST (quality 95). Alternated ROUNDS times.
#  2. MobileNetV2 at 224x224 (examples/mobilenetv2_224_train.json), psworker --no-ps,
#     batch BATCH, STEPS steps: samples/s fed from that JPEG folder through the pipeline
#     (the transforms above) against fed from memory (Fashion-MNIST loaded whole and
#     resized once, --input-adapt resize), alternated ROUNDS times.
#  3. Memory: a small CNN trained over TFRecord files of 224x224x3 PNG images whose
#     decoded size is 4x --input-memory (MB); the worker's RSS sampled every 0.2 s.
# usage: bench/input_pipeline.sh [BUILD]   (env N=2000 ROUNDS=3 BATCH=16 STEPS=8 MEMORY=32
#        PARTS="decode train memory")
# $TF_VENV (default /tmp/tfvenv): tensorflow-cpu, made when missing (PyPI; else part 1
# runs without its peer). Benchmarks never run in the test suite.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n "2,18p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
n=${N:-2000}
rounds=${ROUNDS:-3}
batch=${BATCH:-16}
steps=${STEPS:-8}
memory=${MEMORY:-32}
parts=${PARTS:-decode train memory}
venv=${TF_VENV:-/tmp/tfvenv}
data=${PS_DATA:-/usr/share/datasets/fashion-mnist}
psctl=$build/psctl/psctl
worker=$build/worker/psworker
[ -x "$psctl" ] && [ -x "$worker" ] || { echo "input_pipeline: build first ($build)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ps-input-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
echo "input_pipeline: $(nproc) cores, $(date -u +%FT%TZ), $(git -C "$root" rev-parse --short HEAD)"

"$psctl" data convert "$data" jpg --to jpeg --quality 95 --classes 0,1 --max "$n" \
    --size 256x256 --channels 3 >/dev/null || exit 1
cat >aug.json <<'EOF'
{"path": "jpg", "channels": 3,
 "preprocess": [{"resize": [240, 240]}, {"random_crop": [224, 224]},
                {"random_flip": "horizontal"}, {"rescale": 0.00392156862745098}]}
EOF

if [[ " $parts " == *" decode "* ]]; then
    have_tf=1
    if ! "$venv/bin/python" -c 'import tensorflow' 2>/dev/null; then
        { [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"; } &&
            "$venv/bin/pip" install -q tensorflow-cpu==2.21.0 || have_tf=0
    fi
    "$psctl" data bench aug.json --threads 1 --records "$n" >/dev/null # warm the page cache
    for r in $(seq "$rounds"); do
        for t in 1 2; do
            line=$("$psctl" data bench aug.json --threads "$t" --records "$n" --batch 32)
            rate=$(sed -n 's/.*: \([0-9]*\) records\/s (\([0-9]*\) per thread).*: \([0-9]*\) records per CPU second/\1 \2 \3/p' <<<"$line")
            read -r all per percpu <<<"$rate"
            echo "{\"round\": $r, \"peer\": \"this project\", \"threads\": $t, \"records_per_sec\": $all, \"per_thread\": $per, \"per_cpu_second\": $percpu}"
            [ $have_tf = 1 ] && echo "$("$venv/bin/python" "$here/tf_input.py" jpg "$t" 240 224 32 |
                sed "s/^{/{\"round\": $r, /")"
        done
    done | tee decode.jsonl
    /usr/bin/python3 - decode.jsonl <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for key, what in (("records_per_sec", "records/s"), ("per_cpu_second", "records per CPU second")):
    print(f"\ndecode + augment to 224x224, {what} (median of rounds; min-max):")
    for t in (1, 2):
        got = {}
        for peer in ("this project", "tf.data"):
            v = [r[key] for r in rows if r["peer"] == peer and r["threads"] == t]
            if v:
                got[peer] = statistics.median(v)
                print(f"  {t} thread(s) {peer:13s} {got[peer]:8.1f}  ({min(v):.1f}-{max(v):.1f})")
        if len(got) == 2:
            print(f"  {t} thread(s) ratio: {got['this project'] / got['tf.data']:.2f}x tf.data")
PY
fi

if [[ " $parts " == *" train "* ]]; then
    cp "$root/examples/mobilenetv2_224.json" "$root/examples/mobilenetv2_224_train.json" .
    common=(--no-ps yes --model mobilenetv2_224_train.json --batch "$batch" --epochs 1
        --max-steps "$steps" --progress none --summary s.json)
    for r in $(seq "$rounds"); do
        "$worker" "${common[@]}" --data "$data" --max-train $((batch * steps)) --max-test 16 \
            --input-adapt resize --positive-classes 1 >mem.log 2>&1 || { tail -3 mem.log; exit 1; }
        m=$(/usr/bin/python3 -c 'import json; print(json.load(open("s.json"))["samples_per_sec"])')
        "$worker" "${common[@]}" --data aug.json >jpg.log 2>&1 || { tail -3 jpg.log; exit 1; }
        j=$(/usr/bin/python3 -c 'import json; print(json.load(open("s.json"))["samples_per_sec"])')
        echo "{\"round\": $r, \"from_memory\": $m, \"from_jpeg_folder\": $j}"
    done | tee train.jsonl
    /usr/bin/python3 - train.jsonl <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
m = statistics.median(r["from_memory"] for r in rows)
j = statistics.median(r["from_jpeg_folder"] for r in rows)
print(f"\nMobileNetV2 224x224 training samples/s (median): from memory {m:.2f}, "
      f"from the JPEG folder {j:.2f}: {j / m:.3f}x")
PY
fi

if [[ " $parts " == *" memory "* ]]; then
    cat >small_cnn.json <<'EOF'
{"name": "small_cnn", "input_shape": [224, 224, 3],
 "layers": [{"type": "AveragePooling2D", "pool_size": 8}, {"type": "Flatten"},
            {"type": "Dense", "units": 2}],
 "loss": "sparse_categorical_crossentropy", "from_logits": true,
 "optimizer": {"name": "adam", "learning_rate": 0.001}, "batch_size": 32}
EOF
    # records of 224x224x3 floats: 602112 bytes each once decoded; the same job over
    # TFRecord files of 1x and 4x --input-memory, the same number of steps
    for times in 1 4; do
        recs=$(((times * memory * 1048576 + 602111) / 602112))
        "$psctl" data convert "$data" big$times.tfrecord --to tfrecord --image png --shards 4 \
            --classes 0,1 --max "$recs" --size 224x224 --channels 3 >/dev/null || exit 1
        echo "{\"path\": \"big$times.tfrecord-*\", \"channels\": 3, \"preprocess\": [{\"rescale\": 0.00392156862745098}]}" >big$times.json
        "$worker" --no-ps yes --model small_cnn.json --data big$times.json \
            --epochs $((32 / times)) --progress none --input-memory "$memory" >big$times.log 2>&1 &
        pid=$!
        : >rss$times.txt
        t0=$(date +%s.%N)
        while kill -0 $pid 2>/dev/null; do
            rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)
            [ -n "$rss" ] && echo "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }') $rss" >>rss$times.txt
            sleep 0.1
        done
        wait $pid || { tail -3 big$times.log; exit 1; }
        /usr/bin/python3 - rss$times.txt "$recs" "$memory" "$times" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
recs, mem, times = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
end = rows[-1][0]
steady = [r for t, r in rows if t >= end / 4]  # past the start-up
print(f"\nTFRecord of {recs} records of 224x224x3 ({recs * 602112 / 2**20:.0f} MiB decoded, "
      f"{times}x --input-memory {mem}), {32 // times} epochs, {end:.1f} s: worker RSS "
      f"peak {max(r for _, r in rows) / 1024:.0f} MiB; from a quarter of the run on "
      f"{min(steady) / 1024:.0f}-{max(steady) / 1024:.0f} MiB ({len(rows)} samples)")
PY
    done
fi
