package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// englishText is Newton's Opticks (public domain, about 560 KB), which every
// Go distribution ships as $GOROOT/src/testdata/Isaac.Newton-Opticks.txt.
func englishText(b *testing.B) string {
	path := filepath.Join(runtime.GOROOT(), "src", "testdata", "Isaac.Newton-Opticks.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("English corpus %s: %v", path, err)
	}
	return string(data)
}

// BenchmarkEncodeEnglish measures single-goroutine encode speed on English
// prose. cold starts every iteration with an empty word cache; warm keeps
// the cache, as a long preprocessing run does.
//
//	go test ./data/tokenizer -run '^$' -bench EncodeEnglish -benchtime 20x
func BenchmarkEncodeEnglish(b *testing.B) {
	text := englishText(b)
	for _, name := range []string{"qwen3", "llama3"} {
		tok := loadCached(b, name)
		b.Run(name+"/cold", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for i := 0; i < b.N; i++ {
				e := &encoder{cache: make(map[string][]int32, 1024), chunks: make([][]int, len(tok.splitters))}
				tok.encode(e, nil, nil, text)
			}
		})
		b.Run(name+"/warm", func(b *testing.B) {
			e := tok.getEncoder()
			tok.encode(e, nil, nil, text)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tok.encode(e, nil, nil, text)
			}
		})
	}
}

// BenchmarkEncodeBatch measures EncodeBatch over all cores on the same text
// cut into documents of about 4 KB.
func BenchmarkEncodeBatch(b *testing.B) {
	text := englishText(b)
	var docs []string
	for len(text) > 0 {
		k := min(4096, len(text))
		if j := strings.IndexByte(text[k:], '\n'); j >= 0 {
			k += j + 1
		} else {
			k = len(text)
		}
		docs, text = append(docs, text[:k]), text[k:]
	}
	tok := loadCached(b, "qwen3")
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	b.SetBytes(int64(n))
	for i := 0; i < b.N; i++ {
		tok.EncodeBatch(docs, 0)
	}
}
