package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"dflash/data/chat"
)

// record is one parsed line and where it came from.
type record struct {
	File     string
	Line     int
	Messages []chat.Message
}

// stats counts what readAll read.
type stats struct {
	Files, Lines, Blank, Kept int
	Bad                       map[string]int // skipped bad lines by reason
}

func (s stats) badTotal() int {
	n := 0
	for _, v := range s.Bad {
		n += v
	}
	return n
}

// readAll reads paths the way the data pipeline does: Lines, then Parse on
// each line. With skip, bad lines are counted and skipped; otherwise the
// first one ends reading with its error.
func readAll(t *testing.T, paths []string, f Format, skip bool) ([]record, stats, error) {
	t.Helper()
	l, err := OpenLines(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out []record
	st := stats{Bad: map[string]int{}}
	for {
		ln, err := l.Next()
		st.Files, st.Blank = l.Files(), l.Blank()
		if err == io.EOF {
			return out, st, nil
		}
		if err != nil {
			return out, st, err
		}
		st.Lines++
		msgs, err := Parse(ln, f)
		var le *LineError
		if errors.As(err, &le) && skip {
			st.Bad[le.Reason]++
			continue
		}
		if err != nil {
			return out, st, err
		}
		st.Kept++
		out = append(out, record{File: ln.File, Line: ln.N, Messages: msgs})
	}
}

// wantMessages decodes a testdata file with encoding/json directly, as an
// independent reference for the reader.
func wantMessages(t *testing.T, path string) [][]chat.Message {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]chat.Message
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var v map[string][]map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		var msgs []chat.Message
		for _, m := range v["messages"] {
			var content string
			switch c := m["content"].(type) {
			case string:
				content = c
			case []any:
				for _, p := range c {
					content += p.(map[string]any)["text"].(string)
				}
			}
			msgs = append(msgs, chat.Message{Role: m["role"].(string), Content: content})
		}
		for _, m := range v["conversations"] {
			role := map[string]string{"human": "user", "gpt": "assistant", "system": "system"}[m["from"].(string)]
			msgs = append(msgs, chat.Message{Role: role, Content: m["value"].(string)})
		}
		out = append(out, msgs)
	}
	return out
}

func TestReadFormats(t *testing.T) {
	for _, c := range []struct {
		file string
		f    Format
	}{
		{"messages.jsonl", Messages},
		{"messages.jsonl", Auto},
		{"sharegpt.jsonl", ShareGPT},
		{"sharegpt.jsonl", Auto},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", c.file)
			recs, st, err := readAll(t, []string{path}, c.f, false)
			if err != nil {
				t.Fatal(err)
			}
			want := wantMessages(t, path)
			if len(recs) != len(want) || st.Kept != len(want) || st.Lines != len(want) || st.Files != 1 {
				t.Fatalf("read %d records, stats %+v; want %d", len(recs), st, len(want))
			}
			for i, r := range recs {
				if r.Line != i+1 || r.File != path {
					t.Errorf("record %d at %s:%d", i, r.File, r.Line)
				}
				if !reflect.DeepEqual(r.Messages, want[i]) && !sameIgnoringReasoning(r.Messages, want[i]) {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, r.Messages, want[i])
				}
			}
		})
	}
}

func sameIgnoringReasoning(a, b []chat.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Role != b[i].Role || a[i].Content != b[i].Content {
			return false
		}
	}
	return true
}

func TestWrongFormat(t *testing.T) {
	_, _, err := readAll(t, []string{filepath.Join("testdata", "sharegpt.jsonl")}, Messages, false)
	var le *LineError
	if !errors.As(err, &le) || le.Reason != ReasonWrongFormat || le.Line != 1 {
		t.Fatalf("got %v, want a wrong-format error on line 1", err)
	}
}

func TestBrokenLine(t *testing.T) {
	path := filepath.Join("testdata", "broken.jsonl")
	t.Run("fails", func(t *testing.T) {
		recs, _, err := readAll(t, []string{path}, Auto, false)
		var le *LineError
		if !errors.As(err, &le) {
			t.Fatalf("got %v, want a *LineError", err)
		}
		if le.File != path || le.Line != 4 || le.Reason != ReasonJSON || len(recs) != 2 {
			t.Fatalf("got %v after %d records; want %s:4 invalid JSON after 2", err, len(recs), path)
		}
		if !strings.HasPrefix(err.Error(), path+":4: ") {
			t.Fatalf("message %q does not start with file:line", err)
		}
	})
	t.Run("skips", func(t *testing.T) {
		recs, st, err := readAll(t, []string{path}, Auto, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 3 || st.Kept != 3 || st.Lines != 5 || st.Blank != 1 || st.badTotal() != 2 ||
			st.Bad[ReasonJSON] != 1 || st.Bad[ReasonRole] != 1 {
			t.Fatalf("records %d, stats %+v", len(recs), st)
		}
		if got := []int{recs[0].Line, recs[1].Line, recs[2].Line}; !reflect.DeepEqual(got, []int{1, 3, 6}) {
			t.Fatalf("kept lines %v, want [1 3 6]", got)
		}
	})
}

func TestParseCases(t *testing.T) {
	for _, c := range []struct {
		name, line, reason string
	}{
		{"not an object", `[1,2]`, ReasonJSON},
		{"no list", `{"text": "hi"}`, ReasonNoMessages},
		{"empty", `{"messages": []}`, ReasonEmpty},
		{"role", `{"messages": [{"role": "developer", "content": "x"}]}`, ReasonRole},
		{"sharegpt role", `{"conversations": [{"from": "function_call", "value": "x"}]}`, ReasonRole},
		{"image", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, ReasonContent},
		{"number content", `{"messages": [{"role": "user", "content": 5}]}`, ReasonContent},
		{"tool calls", `{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}]}`, ReasonToolCalls},
		{"latin-1 byte", "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}", ReasonUTF8},
		{"cut sequence", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xe2\x82\"}]}", ReasonUTF8},
		{"lone high surrogate", `{"messages": [{"role": "user", "content": "a\ud83d b"}]}`, ReasonUTF8},
		{"lone low surrogate", `{"messages": [{"role": "user", "content": "\uDE00"}]}`, ReasonUTF8},
		{"high then not low", `{"messages": [{"role": "user", "content": "\ud83d\u0041"}]}`, ReasonUTF8},
		{"ok surrogate pair", `{"messages": [{"role": "user", "content": "\ud83d\ude00 caf\u00e9 \\ud800"}]}`, ""},
		{"ok literal U+FFFD", `{"messages": [{"role": "user", "content": "\ufffd �"}]}`, ""},
		{"ok null content", `{"messages": [{"role": "assistant", "content": null}]}`, ""},
		{"ok reasoning", `{"messages": [{"role": "assistant", "content": "a", "reasoning_content": "r"}]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs, err := Parse(Line{File: "f.jsonl", N: 7, Text: []byte(c.line)}, Auto)
			if c.reason == "" {
				if err != nil || len(msgs) != 1 {
					t.Fatalf("got %v, %v", msgs, err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Reason != c.reason || le.Line != 7 {
				t.Fatalf("got %v, want reason %q at line 7", err, c.reason)
			}
		})
	}
}

// TestCompressedAndMultipleFiles reads gzip and zstd copies of the testdata
// files in one run and compares with the plain files.
func TestCompressedAndMultipleFiles(t *testing.T) {
	dir := t.TempDir()
	plain := []string{filepath.Join("testdata", "messages.jsonl"), filepath.Join("testdata", "sharegpt.jsonl")}
	var both []string
	for _, p := range plain {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var gz, zs bytes.Buffer
		gw := gzip.NewWriter(&gz)
		gw.Write(b)
		gw.Close()
		zw, _ := zstd.NewWriter(&zs)
		zw.Write(b)
		zw.Close()
		g := filepath.Join(dir, filepath.Base(p)+".gz")
		z := filepath.Join(dir, filepath.Base(p)+".data") // the name does not matter
		os.WriteFile(g, gz.Bytes(), 0o644)
		os.WriteFile(z, zs.Bytes(), 0o644)
		both = append(both, g, z)
	}
	want, _, err := readAll(t, []string{plain[0], plain[0], plain[1], plain[1]}, Auto, false)
	if err != nil {
		t.Fatal(err)
	}
	got, st, err := readAll(t, both, Auto, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 4 || len(got) != len(want) {
		t.Fatalf("got %d records from %d files, want %d from 4", len(got), st.Files, len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i].Messages, want[i].Messages) || got[i].Line != want[i].Line {
			t.Fatalf("record %d differs", i)
		}
	}
	l, _ := OpenLines(both)
	for {
		if _, err := l.Next(); err != nil {
			break
		}
	}
	if l.BytesRead() != TotalBytes(both) {
		t.Errorf("BytesRead %d, files hold %d", l.BytesRead(), TotalBytes(both))
	}
}

// TestLongLine reads a line longer than the 1 MiB read buffer.
func TestLongLine(t *testing.T) {
	long := strings.Repeat("word ", 700_000)
	line, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}})
	path := filepath.Join(t.TempDir(), "long.jsonl")
	os.WriteFile(path, append(append(line, '\n'), []byte(`{"messages":[{"role":"user","content":"x"}]}`)...), 0o644)
	recs, _, err := readAll(t, []string{path}, Auto, false)
	if err != nil || len(recs) != 2 || recs[0].Messages[0].Content != long || recs[1].Line != 2 {
		t.Fatalf("got %d records, err %v", len(recs), err)
	}
}

func TestMissingFile(t *testing.T) {
	if _, err := OpenLines([]string{"testdata/nope.jsonl"}); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Fatalf("got %v", err)
	}
}
