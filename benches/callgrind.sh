#!/bin/sh
# Instructions per lifecycle and per floor operation (std HashMap insert+remove), counted by
# callgrind: stable on a loaded machine. Usage: benches/callgrind.sh [n]   (default 20000)
set -eu
cd "$(dirname "$0")/.."
n=${1:-20000}
cargo build -q --release -p leasehold-benches --bin profile
out=$(mktemp -d)
count() { # <what> <held> <function to collect>
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect="$3" \
        target/release/profile "$1" "$2" "$n" >/dev/null 2>"$out/log"
    total=$(sed -n 's/^==[0-9]*== Collected : //p' "$out/log")
    echo $((total / n))
}
echo "| held leases | lifecycle (instructions) | floor: std HashMap insert+remove | ratio |"
echo "|---:|---:|---:|---:|"
for held in 1 1000 100000; do
    l=$(count lifecycle "$held" 'leasehold_benches::fixture::Driver<P>::lifecycle')
    f=$(count floor "$held" 'profile::floor_step')
    echo "| $held | $l | $f | $(awk "BEGIN { printf \"%.2f\", $l / $f }") |"
done
rm -r "$out"
