#!/usr/bin/env bash
# A million hostile statements against `evalsql serve` (the release binary, default limits):
# the generator of tests/serve/fuzz.py (the test suite runs 10,000 of them), through psycopg
# 3, half over the simple and half over the extended protocol. Prints the summary; fails if
# the server stopped, a statement that must be refused ran, a connection was lost, or
# anything was written under the data root.
#
#   bash benches/fuzz_serve.sh [COUNT] [SEED]      (default 1000000, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-1000000}"
seed="${2:-1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/evalsql-target}"
venv="$HOME/.cache/evalsql-psycopg-venv"
if ! "$venv/bin/python" -c 'import psycopg' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet 'psycopg[binary]'
fi
cargo build --release --quiet
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/root"
cp data/qa.jsonl "$work/root/"
echo "CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION '$work/root/qa.jsonl';" > "$work/init.sql"
# A closed port stands in for the endpoints: nothing may be sent there anyway.
EVALSQL_PG_USER=fuzz EVALSQL_PG_PASSWORD=fuzz OPENAI_API_KEY=sk-fuzz \
  OPENAI_BASE_URL=http://127.0.0.1:9/v1 EVALSQL_JUDGE_CACHE=off \
  "$CARGO_TARGET_DIR/release/evalsql" serve --host 127.0.0.1 --port 0 \
  --init "$work/init.sql" --data-root "$work/root" --statement-timeout 5 \
  2> "$work/server.log" &
server=$!
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
find "$work/root" | sort > "$work/before"
PGHOST=127.0.0.1 PGPORT="$port" PGUSER=fuzz PGPASSWORD=fuzz \
  "$venv/bin/python" tests/serve/fuzz.py --count "$count" --seed "$seed" \
  --root "$work/root" --report-every 10000 > "$work/summary.json"
find "$work/root" | sort > "$work/after"
cat "$work/summary.json"
kill -0 "$server" || { echo "fuzz_serve: the server stopped" >&2; exit 1; }
cmp -s "$work/before" "$work/after" || { echo "fuzz_serve: files appeared under the root" >&2; exit 1; }
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["unexpected_count"]==0 and s["alive"] else 1)' "$work/summary.json" \
  || { echo "fuzz_serve: unexpected outcomes (see the summary)" >&2; exit 1; }
echo "fuzz_serve: $count statements, server up, nothing written, nothing unexpected"
