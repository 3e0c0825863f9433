#!/usr/bin/env bash
# Seed the fuzz corpora (fuzz/corpus/<target>/, git-ignored) from the recorded provider streams
# and the test fixtures. Safe to run again: files are named by content.
set -euo pipefail
cd "$(dirname "$0")"
REPO=$(cd .. && pwd)
STREAMS=${CONFORMANCE_STREAMS:-$REPO/../shared/conformance/streams}

# seed_file <target> <file> [prefix-byte-octal]: copy a file in, named by its content hash.
# Targets whose first input byte picks the network split get a prefix byte.
seed_file() {
  local target=$1 file=$2 prefix=${3:-}
  mkdir -p "corpus/$target"
  local tmp
  tmp=$(mktemp)
  if [ -n "$prefix" ]; then printf "\\$prefix" >"$tmp"; fi
  cat "$file" >>"$tmp"
  local name
  name=$(sha1sum "$tmp" | cut -c1-16)
  mv "$tmp" "corpus/$target/$name"
}

sse_files() {
  if [ -d "$STREAMS" ]; then find "$STREAMS" -name '*.sse'; fi
  find "$REPO/crates/agentloop/tests" -name '*.sse'
}

while IFS= read -r file; do
  # Split sizes 1 (octal 000) and 16 (octal 017): byte-at-a-time and chunky networks.
  for prefix in 000 017; do
    seed_file sse_parser "$file" "$prefix"
    seed_file openai_stream "$file" "$prefix"
    seed_file anthropic_stream "$file" "$prefix"
  done
done < <(sse_files)

# One chunk per seed for the chunk-reader target: every `data:` line of the recordings.
mkdir -p corpus/stream_chunk
while IFS= read -r file; do
  grep -h '^data:' "$file" | sed 's/^data: *//' | while IFS= read -r line; do
    name=$(printf '%s' "$line" | sha1sum | cut -c1-16)
    printf '%s' "$line" >"corpus/stream_chunk/$name"
  done
  # And the first chunks of each recording together, one per line, as a stream sends them.
  first=$(awk '/^data:/ { sub(/^data: */, ""); print; if (++n == 4) exit }' "$file")
  printf '%s' "$first" >"corpus/stream_chunk/$(printf '%s' "$first" | sha1sum | cut -c1-16)"
done < <(sse_files)

while IFS= read -r file; do
  seed_file descriptor_json "$file"
done < <(find "$REPO/crates/agentloop/tests/fixtures/tools" -name '*.json')

while IFS= read -r file; do
  seed_file descriptor_yaml "$file"
done < <(find "$REPO/crates/agentloop/tests/fixtures/tools" -name '*.yaml' -o -name '*.yml')

mkdir -p corpus/chat_request
chat_seed() { printf '%s' "$1" >"corpus/chat_request/$(printf '%s' "$1" | sha1sum | cut -c1-16)"; }
chat_seed '{"message":"What is the weather in Paris?"}'
chat_seed '{"conversation_id":"conv_0123456789abcdef","message":"and tomorrow?"}'
chat_seed '{"message":"hi","extra":true}'
chat_seed '{"id":"chat1","messages":[{"role":"user","parts":[{"type":"text","text":"hello"}]}],"trigger":"submit-message"}'
chat_seed '{"id":"chat1","messages":[{"role":"user","parts":[{"type":"file","mediaType":"image/png","url":"data:image/png;base64,iVBORw0KGgo="}]}]}'

for dir in corpus/*/; do
  echo "$(basename "$dir"): $(find "$dir" -type f | wc -l) seeds"
done
