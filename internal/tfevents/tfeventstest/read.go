// Package tfeventstest reads TensorBoard event files for tests: a minimal
// TFRecord and protobuf decoder written apart from package tfevents (no
// code shared with the writer), which checks every record's CRCs.
package tfeventstest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
)

// Event is a decoded tensorflow.Event: the fields tfevents writes.
type Event struct {
	WallTime    float64
	Step        int64
	FileVersion string
	Scalars     map[string]float32 // summary values with simple_value, by tag
	Tags        []string           // summary tags in file order
	Start       bool               // session_log with status START
}

// ReadFile decodes every complete record of the event file at path. A
// torn last record (a file cut short) ends the list and sets torn; a
// record whose CRC does not match, or whose event does not decode, is an
// error.
func ReadFile(path string) (events []Event, torn bool, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	for off := 0; off < len(raw); {
		if len(raw)-off < 12 {
			return events, true, nil
		}
		head := raw[off : off+8]
		if got, want := binary.LittleEndian.Uint32(raw[off+8:]), mask(head); got != want {
			return nil, false, fmt.Errorf("record at %d: length CRC %#x, want %#x", off, got, want)
		}
		n := int(binary.LittleEndian.Uint64(head))
		if n < 0 || len(raw)-off-12 < n+4 {
			return events, true, nil
		}
		data := raw[off+12 : off+12+n]
		if got, want := binary.LittleEndian.Uint32(raw[off+12+n:]), mask(data); got != want {
			return nil, false, fmt.Errorf("record at %d: data CRC %#x, want %#x", off, got, want)
		}
		ev, err := decodeEvent(data)
		if err != nil {
			return nil, false, fmt.Errorf("record at %d: %w", off, err)
		}
		events = append(events, ev)
		off += 12 + n + 4
	}
	return events, false, nil
}

// mask is TFRecord's masked CRC-32C (Castagnoli).
func mask(b []byte) uint32 {
	c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	return (c>>15 | c<<17) + 0xa282ead8
}

// field is one decoded protobuf field: varint and fixed values in u,
// length-delimited ones in b.
type field struct {
	num, wire int
	u         uint64
	b         []byte
}

// fields splits a protobuf message into its fields.
func fields(msg []byte) ([]field, error) {
	var out []field
	for len(msg) > 0 {
		key, n := uvarint(msg)
		if n <= 0 {
			return nil, fmt.Errorf("bad field key")
		}
		msg = msg[n:]
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.u, n = uvarint(msg)
			if n <= 0 {
				return nil, fmt.Errorf("field %d: bad varint", f.num)
			}
		case 1:
			if len(msg) < 8 {
				return nil, fmt.Errorf("field %d: short fixed64", f.num)
			}
			f.u, n = binary.LittleEndian.Uint64(msg), 8
		case 5:
			if len(msg) < 4 {
				return nil, fmt.Errorf("field %d: short fixed32", f.num)
			}
			f.u, n = uint64(binary.LittleEndian.Uint32(msg)), 4
		case 2:
			l, m := uvarint(msg)
			if m <= 0 || uint64(len(msg)-m) < l {
				return nil, fmt.Errorf("field %d: bad length", f.num)
			}
			f.b, n = msg[m:m+int(l)], m+int(l)
		default:
			return nil, fmt.Errorf("field %d: wire type %d", f.num, f.wire)
		}
		out = append(out, f)
		msg = msg[n:]
	}
	return out, nil
}

// uvarint decodes a base-128 varint, least significant group first.
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func decodeEvent(data []byte) (Event, error) {
	fs, err := fields(data)
	if err != nil {
		return Event{}, err
	}
	var ev Event
	for _, f := range fs {
		switch {
		case f.num == 1 && f.wire == 1:
			ev.WallTime = math.Float64frombits(f.u)
		case f.num == 2 && f.wire == 0:
			ev.Step = int64(f.u)
		case f.num == 3 && f.wire == 2:
			ev.FileVersion = string(f.b)
		case f.num == 5 && f.wire == 2:
			if err := decodeSummary(f.b, &ev); err != nil {
				return Event{}, err
			}
		case f.num == 6 && f.wire == 2:
			log, err := fields(f.b)
			if err != nil {
				return Event{}, fmt.Errorf("session_log: %w", err)
			}
			for _, l := range log {
				ev.Start = ev.Start || l.num == 1 && l.wire == 0 && l.u == 1
			}
		default:
			return Event{}, fmt.Errorf("unexpected event field %d (wire type %d)", f.num, f.wire)
		}
	}
	return ev, nil
}

func decodeSummary(b []byte, ev *Event) error {
	vals, err := fields(b)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	ev.Scalars = map[string]float32{}
	for _, v := range vals {
		if v.num != 1 || v.wire != 2 {
			return fmt.Errorf("summary: unexpected field %d", v.num)
		}
		vf, err := fields(v.b)
		if err != nil {
			return fmt.Errorf("summary value: %w", err)
		}
		var tag string
		var val float32
		var has bool
		for _, x := range vf {
			switch {
			case x.num == 1 && x.wire == 2:
				tag = string(x.b)
			case x.num == 2 && x.wire == 5:
				val, has = math.Float32frombits(uint32(x.u)), true
			default:
				return fmt.Errorf("summary value: unexpected field %d (wire type %d)", x.num, x.wire)
			}
		}
		if !has {
			return fmt.Errorf("summary value %q without simple_value", tag)
		}
		if _, dup := ev.Scalars[tag]; dup {
			return fmt.Errorf("summary: tag %q twice", tag)
		}
		ev.Scalars[tag] = val
		ev.Tags = append(ev.Tags, tag)
	}
	return nil
}
