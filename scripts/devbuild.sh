# devbuild.sh is sourced by the device scripts: the build of
# `bash scripts/gpu-train.sh --build` is carried to the device compressed
# (.devbuild/train.txz; uncompressed it passes the device tool's carry
# limit), and unpacked there when a script needs it. DEVBUILD
# names another build (scripts/gpu-run-bench.sh: .devbuild/runbench). The
# scripts of one call share one kernel cache.
B=${DEVBUILD:-.devbuild/train}
# A machine kept warm keeps the last call's unpacked build: a newer .txz
# (a new carry) replaces it whole.
if [ -f "$B.txz" ] && { [ ! -x "$B/dflash" ] || [ "$B.txz" -nt "$B/.unpacked" ]; }; then
	rm -rf "$B"
	tar -xJf "$B.txz" -C "$(dirname "$B")" && touch "$B/.unpacked" || { echo "FAIL: unpacking $B.txz" >&2; exit 1; }
fi
export DFLASH_KERNEL_CACHE=${DFLASH_KERNEL_CACHE:-/tmp/dflash-kernels}
# bundle_out NAME... packs everything in $OUT into $OUT/all.tgz when it
# holds more than the device tool brings back (8 files), keeping the files
# NAME... of $OUT's top level beside it.
bundle_out() {
	[ "$(find "$OUT" -type f | wc -l)" -le 8 ] && return 0
	local keep=() n
	for n in "$@"; do keep+=(! -name "$n"); done
	tar -czf "$OUT.tgz" -C "$OUT" . &&
		find "$OUT" -mindepth 1 -maxdepth 1 "${keep[@]}" -exec rm -rf {} + &&
		mv "$OUT.tgz" "$OUT/all.tgz"
}
