package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// FuzzDecodeFile feeds decodeFile arbitrary bytes, as they are and, when
// reseal is set, with a valid checksum so that the fuzzer reaches the
// length and metadata checks behind it. decodeFile must never panic; it
// rejects with a *corruptError, or accepts a file whose parts are exactly
// the bytes its header describes and which encodeFile writes back byte for
// byte (the metadata's encoding has one form for each Meta).
//
// A plain `go test` runs the seeds below and the corpus in
// testdata/fuzz/FuzzDecodeFile (headers whose lengths once caused a
// slice-bounds panic, metadata that is not UTF-8 or not in its one form);
// .ci/run also fuzzes it for a few seconds:
//
//	go test -run='^$' -fuzz='^FuzzDecodeFile$' -fuzztime=5s ./jit
//
// A failure the fuzzer finds is written to that folder; keep it there as a
// regression case.
func FuzzDecodeFile(f *testing.F) {
	s := src("fuzz", 1)
	meta := Meta{Family: s.Family, Program: s.ProgramName(), Arch: s.Arch, Compiler: "fake 1.0",
		Options: s.Options, Params: s.Params, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Log: "ok"}
	valid, err := encodeFile(KeyOf(s, "fake 1.0"), meta, fakeImage(s, 300))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, false)
	f.Add(valid, true)
	odd := meta
	odd.Options, odd.Params, odd.Log = []string{"-DX=\xff", ""}, map[string]string{"\xc3(": "\x80", "b": ""}, "\xfe"
	oddFile, err := encodeFile(KeyOf(s, "fake 1.0"), odd, fakeImage(s, 10))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(oddFile, false)
	f.Add(valid[:headerSize], true)
	f.Add([]byte(nil), false)
	empty, _ := encodeFile(Key{}, Meta{}, nil)
	f.Add(empty, false)
	f.Fuzz(func(t *testing.T, data []byte, resealIt bool) {
		if resealIt && len(data) >= headerSize {
			data = reseal(bytes.Clone(data))
		}
		key, meta, image, err := decodeFile("fuzz.kimg", data, Key{})
		if err != nil {
			var ce *corruptError
			if !errors.As(err, &ce) {
				t.Fatalf("rejected with %T %v, want a *corruptError", err, err)
			}
			return
		}
		m := uint64(binary.LittleEndian.Uint32(data[12:16]))
		n := binary.LittleEndian.Uint64(data[16:24])
		if uint64(len(data)) != headerSize+m+n || !bytes.Equal(image, data[headerSize+m:]) {
			t.Fatalf("accepted %d bytes with lengths m=%d n=%d and an image of %d bytes", len(data), m, n, len(image))
		}
		again, err := encodeFile(key, meta, image)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoded file differs from the accepted one (meta %#v)", meta)
		}
	})
}
