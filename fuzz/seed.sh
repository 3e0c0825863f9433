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

# The recordings of providers added after the first batch, each seeding its own decoder.
BATCH2=${CONFORMANCE_STREAMS_BATCH2:-$(dirname "$STREAMS")/streams-batch2}

while IFS= read -r file; do
  # Split sizes 1 (octal 000) and 16 (octal 017): byte-at-a-time and chunky networks.
  for prefix in 000 017; do
    seed_file sse_parser "$file" "$prefix"
    seed_file openai_stream "$file" "$prefix"
    seed_file anthropic_stream "$file" "$prefix"
  done
done < <(sse_files)

# The second batch's Anthropic recordings: compaction, code execution, programmatic calls.
if [ -d "$BATCH2/anthropic" ]; then
  while IFS= read -r file; do
    for prefix in 000 017; do
      seed_file anthropic_stream "$file" "$prefix"
    done
  done < <(find "$BATCH2/anthropic" -name '*.sse')
fi

if [ -d "$BATCH2/gemini" ]; then
  while IFS= read -r file; do
    for prefix in 000 017; do
      seed_file gemini_stream "$file" "$prefix"
      seed_file sse_parser "$file" "$prefix"
    done
  done < <(find "$BATCH2/gemini" -name '*.sse')
fi

# The binary Bedrock bodies, raw (prefix bytes below 0x80: not re-framed) at splits 1 and 16.
if [ -d "$BATCH2/bedrock" ]; then
  while IFS= read -r file; do
    for prefix in 000 017; do
      seed_file bedrock_stream "$file" "$prefix"
    done
  done < <(find "$BATCH2/bedrock" -name '*.eventstream')
fi
if [ -d "$BATCH2/openai-responses" ]; then
  while IFS= read -r file; do
    for prefix in 000 017; do
      seed_file responses_stream "$file" "$prefix"
      seed_file sse_parser "$file" "$prefix"
    done
  done < <(find "$BATCH2/openai-responses" -name '*.sse')
fi

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

# Non-streamed completions: llama.cpp's real answers, and the shapes compatible servers vary.
while IFS= read -r file; do
  seed_file completion_body "$file"
done < <(find "$REPO/crates/agentloop/tests/fixtures/llamacpp-real" -name '*.response.json')
mkdir -p corpus/completion_body
completion_seed() { printf '%s' "$1" >"corpus/completion_body/$(printf '%s' "$1" | sha1sum | cut -c1-16)"; }
completion_seed '{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4}}}'
completion_seed '{"id":"x","model":"m","choices":[{"message":{"reasoning_content":"think","content":"a \"quoted\" answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_cache_hit_tokens":1}}'
completion_seed '{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]}}],"error":null}'
completion_seed '{"error":{"message":"m","code":502}}'

mkdir -p corpus/chat_request
chat_seed() { printf '%s' "$1" >"corpus/chat_request/$(printf '%s' "$1" | sha1sum | cut -c1-16)"; }
chat_seed '{"message":"What is the weather in Paris?"}'
chat_seed '{"conversation_id":"conv_0123456789abcdef","message":"and tomorrow?"}'
chat_seed '{"message":"hi","extra":true}'
chat_seed '{"id":"chat1","messages":[{"role":"user","parts":[{"type":"text","text":"hello"}]}],"trigger":"submit-message"}'
chat_seed '{"id":"chat1","messages":[{"role":"user","parts":[{"type":"file","mediaType":"image/png","url":"data:image/png;base64,iVBORw0KGgo="}]}]}'

# Last-Event-ID header values: ids, the boundaries of usize, and what is not an id.
mkdir -p corpus/last_event_id
event_id_seed() { printf '%s' "$1" >"corpus/last_event_id/$(printf '%s' "$1" | sha1sum | cut -c1-16)"; }
for id in 0 7 ' 41 ' 4294967295 4294967296 18446744073709551614 18446744073709551615 \
  18446744073709551616 99999999999999999999999999 -1 +1 1e3 0x10 yesterday ''; do
  event_id_seed "$id"
done

# Tool arguments: JSON documents as models write them, escapes and numbers included.
mkdir -p corpus/tool_arguments
arguments_seed() { printf '%s' "$1" >"corpus/tool_arguments/$(printf '%s' "$1" | sha1sum | cut -c1-16)"; }
arguments_seed '{"city":"Paris","units":"celsius"}'
arguments_seed '{"path": "src/main.rs", "lines": ["fn line_0() { println!(\"0\"); }", "// end"]}'
arguments_seed '{"query":"caf\u00e9 \ud83d\ude00","max_price":250.5,"nights":-2,"flags":[true,false,null],"nested":{"a":{"b":[1e3,0,-0]}}}'
arguments_seed '{"a":1,"a":2}'

for dir in corpus/*/; do
  echo "$(basename "$dir"): $(find "$dir" -type f | wc -l) seeds"
done
