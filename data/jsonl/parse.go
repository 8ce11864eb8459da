package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"dflash/data/chat"
)

// Format selects the line format.
type Format int

const (
	Auto     Format = iota // messages or ShareGPT, decided per line
	Messages               // {"messages": [{"role","content"}]}
	ShareGPT               // {"conversations": [{"from","value"}]}
)

// ParseFormat reads "auto", "messages" or "sharegpt".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return Auto, nil
	case "messages":
		return Messages, nil
	case "sharegpt":
		return ShareGPT, nil
	}
	return Auto, fmt.Errorf("unknown format %q (want auto, messages or sharegpt)", s)
}

// Reasons a line is bad (LineError.Reason).
const (
	ReasonJSON        = "invalid JSON"
	ReasonNoMessages  = "no messages or conversations list"
	ReasonWrongFormat = "other format than asked for"
	ReasonRole        = "unsupported role"
	ReasonContent     = "unsupported content"
	ReasonToolCalls   = "tool_calls not supported"
	ReasonEmpty       = "empty conversation"
	ReasonUTF8        = "invalid UTF-8"
)

// LineError is a bad line: where it is and why.
type LineError struct {
	File   string
	Line   int
	Reason string // one of the Reason constants
	Detail string
}

func (e *LineError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Reason, e.Detail)
}

type messageJSON struct {
	Role      string          `json:"role"`
	Content   any             `json:"content"` // decoded once: string, nil or []any
	Reasoning *string         `json:"reasoning_content"`
	ToolCalls json.RawMessage `json:"tool_calls"`
	From      string          `json:"from"`
	Value     *string         `json:"value"`
}

type lineJSON struct {
	Messages      []messageJSON `json:"messages"`
	Conversations []messageJSON `json:"conversations"`
}

var shareGPTRoles = map[string]string{
	"system": "system", "human": "user", "user": "user",
	"gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "model": "assistant",
	"tool": "tool",
}

var messageRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

// Parse decodes one line into messages; a bad line is a *LineError (with
// File and Line taken from ln).
func Parse(ln Line, f Format) ([]chat.Message, error) {
	bad := func(reason, format string, a ...any) error {
		return &LineError{File: ln.File, Line: ln.N, Reason: reason, Detail: fmt.Sprintf(format, a...)}
	}
	if err := checkUTF8(ln.Text); err != nil {
		return nil, bad(ReasonUTF8, "%v", err)
	}
	var lj lineJSON
	if err := json.Unmarshal(ln.Text, &lj); err != nil {
		return nil, bad(ReasonJSON, "%v", err)
	}
	sharegpt := false
	switch {
	case lj.Messages != nil && lj.Conversations != nil:
		return nil, bad(ReasonNoMessages, "both messages and conversations are set")
	case lj.Messages != nil:
		if f == ShareGPT {
			return nil, bad(ReasonWrongFormat, "a messages line in a ShareGPT dataset")
		}
	case lj.Conversations != nil:
		if f == Messages {
			return nil, bad(ReasonWrongFormat, "a ShareGPT line in a messages dataset")
		}
		sharegpt = true
	default:
		return nil, bad(ReasonNoMessages, "")
	}
	in := lj.Messages
	if sharegpt {
		in = lj.Conversations
	}
	if len(in) == 0 {
		return nil, bad(ReasonEmpty, "")
	}
	out := make([]chat.Message, len(in))
	for i, m := range in {
		if sharegpt {
			role, ok := shareGPTRoles[m.From]
			if !ok {
				return nil, bad(ReasonRole, "conversations[%d].from %q", i, m.From)
			}
			if m.Value == nil {
				return nil, bad(ReasonContent, "conversations[%d].value is missing or not a string", i)
			}
			out[i] = chat.Message{Role: role, Content: *m.Value}
			continue
		}
		if !messageRoles[m.Role] {
			return nil, bad(ReasonRole, "messages[%d].role %q", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && !bytes.Equal(bytes.TrimSpace(m.ToolCalls), []byte("null")) && !bytes.Equal(bytes.TrimSpace(m.ToolCalls), []byte("[]")) {
			return nil, bad(ReasonToolCalls, "messages[%d]", i)
		}
		content, err := contentText(m.Content)
		if err != nil {
			return nil, bad(ReasonContent, "messages[%d].content: %v", i, err)
		}
		out[i] = chat.Message{Role: m.Role, Content: content, ReasoningContent: m.Reasoning}
	}
	return out, nil
}

// contentText reads a content string, null, or a list of text parts.
func contentText(v any) (string, error) {
	switch c := v.(type) {
	case nil:
		return "", nil
	case string:
		return c, nil
	case []any:
		var b strings.Builder
		for i, p := range c {
			part, _ := p.(map[string]any)
			text, ok := part["text"].(string)
			if typ, _ := part["type"].(string); typ != "text" || !ok {
				return "", fmt.Errorf("part %d has type %q; only text parts are supported", i, part["type"])
			}
			b.WriteString(text)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("want a string, null or a list of text parts")
}
