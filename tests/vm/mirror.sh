#!/usr/bin/env bash
# Prints the Debian mirror this host's apt uses for the suite given (default bookworm): the first `deb` URI
# of a source that lists that suite, in /etc/apt/sources.list or a deb822 file in /etc/apt/sources.list.d.
set -euo pipefail
suite=${1:-bookworm}
uri=$(
  {
    cat /etc/apt/sources.list 2>/dev/null | awk -v s="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++)
      if ($i ~ /^[a-z]+:\/\//) { if ($(i + 1) == s) { print $i; exit } else break } }'
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -r "$f" ] || continue
      awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" } {
        types = uris = suites = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:/) types = $i
          else if ($i ~ /^URIs:/) uris = $i
          else if ($i ~ /^Suites:/) suites = $i
        }
        if (types ~ /[ \t]deb([ \t]|$)/ && (" " suites " ") ~ ("[ \t]" s "[ \t]")) { split(uris, u, /[ \t]+/); print u[2]; exit }
      }' "$f"
    done
  } | head -n 1
)
if [ -z "$uri" ]; then
  echo "no apt source for Debian suite '$suite' in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources" >&2
  exit 1
fi
echo "$uri"
