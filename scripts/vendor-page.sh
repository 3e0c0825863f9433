#!/bin/sh
# Refresh the chat page's vendored libraries (crates/agentloop-server/static/vendor/) from the
# npm registry: the pinned versions below, each with its license. Change a version here, run
# this script, and commit the script and the files together. Needs npm and network access to
# the registry; the page itself loads nothing from a CDN.
set -eu

MARKED=18.2.1
DOMPURIFY=3.4.18
HIGHLIGHT=11.12.0

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/crates/agentloop-server/static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { # package@version -> directory with the unpacked package
    dir="$work/$(echo "$1" | tr '/@' '__')"
    mkdir -p "$dir"
    (cd "$dir" && npm pack --silent "$1" >/dev/null && tar xzf ./*.tgz)
    echo "$dir/package"
}

mkdir -p "$out"
p=$(fetch "marked@$MARKED")
cp "$p/lib/marked.umd.js" "$out/marked.js"
cp "$p/LICENSE" "$out/LICENSE-marked"

p=$(fetch "dompurify@$DOMPURIFY")
cp "$p/dist/purify.min.js" "$out/purify.js"
cp "$p/LICENSE" "$out/LICENSE-dompurify"

# The browser build with highlight.js's common languages (the npm package `highlight.js` has
# only CommonJS and ES module builds; the project publishes its browser builds here).
p=$(fetch "@highlightjs/cdn-assets@$HIGHLIGHT")
cp "$p/highlight.min.js" "$out/highlight.js"
cp "$p/LICENSE" "$out/LICENSE-highlight.js"

cat > "$out/VERSIONS" <<END
marked $MARKED (MIT) lib/marked.umd.js
dompurify $DOMPURIFY (MPL-2.0 or Apache-2.0) dist/purify.min.js
@highlightjs/cdn-assets $HIGHLIGHT (BSD-3-Clause) highlight.min.js (common languages)
END
echo "vendored into $out:"
cat "$out/VERSIONS"
